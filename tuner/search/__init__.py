"""The search: the space a study searches, its warm starts, and the samplers that choose each next trial.

``space`` (the parameters and how a point becomes config values), ``warm_start``, ``options`` (the samplers and
pruners a study file may name), and the frontier-guided search: ``frontier_sampler`` with the models it reads
(``kl_model``: the KL a configuration buys; ``gold_model``: what other knobs add at that KL; ``frontier_peak`` and
``frontier_points``: where the objective peaks in KL; ``peak_reading``: whether that peak is clear of the runs'
noise, the one reading the pages and advice report; ``frontier_aim``: where the next trial aims), and
``kl_target_notice``. Imports only the store.
"""

__all__ = [
    "frontier_aim", "frontier_peak", "frontier_points", "frontier_sampler", "gold_model", "kl_model",
    "kl_target_notice", "options", "peak_reading", "space", "warm_start",
]
