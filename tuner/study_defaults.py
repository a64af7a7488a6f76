"""What a study gets when its file names no sampler or seed policy: what won the replay of real learning curves.

``benchmarks.replay`` (benchmarks/replay/README.md) runs tuning strategies against a
table of real PPO runs of the quickstart's space. What decides a configuration's value there is the product of the
learning rate, the epochs and the mini-batches per epoch (the step mass), which only a model of the parameters
together can see; and the good region is small (1 configuration in 9 reaches 95% of the best), so every random
start-up trial is mostly a miss. On 240 configurations x 3 seeds, 100 paired repeats each, TPE modelling the
parameters jointly (``multivariate``, with ``group`` so that the parameters of one KL mode are modelled together)
after 4 random start-up trials reached the target in a median 384 updates with the KL guard and no other pruner,
against random search's 552: faster in 54% of the paired repeats, slower in 20% (Wilcoxon p 0.00011). With 8
start-up trials it took 486; Optuna's independent TPE with the old quickstart's warm starts took 614.

A study file's ``sampler`` section with a ``name`` is taken as written; one without (``sampler: {seed: 3}``) gets
these settings with its own on top. The reward-based pruner stays off unless a file names one (the KL guard runs
whatever the pruner): a median pruner's warm-up counts updates, which only a study knows.
"""

from __future__ import annotations

from typing import Any

SEED_POLICY: dict[str, Any] = {"name": "racing", "seeds": 2, "top_k": 2, "start": 0.8}
"""Racing late (``tuner.seed_policy``): once 80% of the budget is spent, the 2 best configurations by mean are re-run
on a second seed, and the winner is the best two-seed mean, so no single seed's luck picks it. Replayed on 240
configurations x 3 seeds with the default search, it reached the target in the same median updates as one seed for
every trial (384; later in 1 repeat of 100) and its final regret was lower in 19 repeats, higher in 8 (mean 0.0168
against 0.0202, p 0.060): the race spends only the last fifth of the budget, where the search has mostly found its
region. Racing from the start cost the whole budget (top 3 on 3 seeds) or 1.6x the updates (the leader on 2 seeds)."""

SAMPLER: dict[str, Any] = {"name": "tpe", "multivariate": True, "group": True, "n_startup_trials": 4}
"""TPESampler(multivariate=True, group=True, n_startup_trials=4); ``tuner.factory`` adds the constant liar."""
