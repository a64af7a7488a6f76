"""Population-based training on a study's own storage: members trained in segments, the weak copying the strong
and perturbing their learning rate and KL coefficient, so that what comes out is a schedule.

``controller`` (the ``optimize`` callback that queues each generation) plans with ``plan``, which ranks and pairs
members with ``select`` (holding back members ``heading`` past the KL budget), may send a recipient back to the best
earlier segment end with ``backtrack`` and perturbs knobs with ``explore``; ``checkpoints`` removes what no later
segment can reach; ``lineage`` says in words what made a member's run. The study file's section is
``tuner.study.population_section``, the segments' records ``tuner.store.segments``; a segment's run is
``tuner.trial.segment_run``'s. Imports the wings below it (store, search, study, trial).
"""

__all__ = ["backtrack", "checkpoints", "controller", "explore", "heading", "lineage", "plan", "select"]
