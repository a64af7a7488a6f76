"""What a study gets when its file names no sampler or seed policy: what won the replay of real learning curves.

``python -m benchmarks.replay`` runs tuning strategies against a table of real PPO runs of the quickstart's space
(its figures, command and commit: benchmarks/replay/README.md). What decides a configuration's value there is the
product of the learning rate, the epochs and the mini-batches per epoch (the step mass), which only a model of the
parameters together can see; and the good region is small, so every random start-up trial is mostly a miss. So the
default models the parameters jointly (TPE, ``multivariate``, with ``group`` so that the parameters of one KL mode are
modelled together) after few random start-up trials, with the KL guard and no other pruner: in the replay it reached
a good configuration in fewer updates than random search, than more start-up trials, and than Optuna's independent
TPE with warm starts.

A study file's ``sampler`` section with a ``name`` is taken as written; one without (``sampler: {seed: 3}``) gets
these settings with its own on top. The reward-based pruner stays off unless a file names one (the KL guard runs
whatever the pruner): a median pruner's warm-up counts updates, which only a study knows.
"""

from __future__ import annotations

from typing import Any

SEED_POLICY: dict[str, Any] = {"name": "racing", "seeds": 2, "top_k": 2, "start": 0.8}
"""Racing late (``tuner.study.seed_policy``): once 80% of the budget is spent, the 2 best configurations by mean are
re-run on a second seed, and the winner is the best two-seed mean, so no single seed's luck picks it. In the replay it
found a good configuration as fast as one seed for every trial, with a lower final regret: the race spends only the last
fifth of the budget, where the search has mostly found its region. Racing from the start cost far more updates."""

SAMPLER: dict[str, Any] = {"name": "tpe", "multivariate": True, "group": True, "n_startup_trials": 4}
"""TPESampler(multivariate=True, group=True, n_startup_trials=4); ``tuner.trial.factory`` adds the constant liar."""
