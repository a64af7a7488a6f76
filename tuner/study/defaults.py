"""What a study gets when its file names no sampler or seed policy: what won the replays of real learning curves.

``python -m benchmarks.replay`` runs tuning strategies against tables of real PPO runs (their figures, commands and
commits: benchmarks/replay/README.md and benchmarks/README.md). Before the text task existed, a rule for choosing the
default from every table of every task family was written down (benchmarks/README.md, "Pre-registered: the tuner on
real language"): the candidate with the lower geometric mean, over the tables, of its updates to 95% of the best
against random search's ships, if it is never slower than random search and is significantly faster on the text
table. By that rule the frontier-guided search (``tuner.search.frontier_sampler``) ships: 0.68 against joint TPE's
0.92 over the graph task seeds 0-3 and the text task, 0.53x random search's updates on the text table (p < 0.01 on
three sets of repeat seeds), where joint TPE was no faster than random search.

The frontier search reads where held-out gold peaks in held-out KL, so it is the default only for a study that
maximises held-out gold alone (:func:`default_sampler`). Any other study (a custom reward without a gold scorer, a
proxy objective, several objectives) gets the default that preceded it, TPE modelling the parameters jointly
(``multivariate``, with ``group`` so that the parameters of one KL mode are modelled together) after 4 random
start-up trials: on the graph tables it reached a good configuration in fewer updates than random search, than more
start-up trials, and than Optuna's independent TPE with warm starts.

A study file's ``sampler`` section with a ``name`` is taken as written; one without (``sampler: {seed: 3}``) gets
the default with its own options on top. The reward-based pruner stays off unless a file names one (the KL guard runs
whatever the pruner): a median pruner's warm-up counts updates, which only a study knows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ppo_core.metric_names import HELD_OUT_JUDGE_METRICS
from tuner.search.frontier_sampler import FRONTIER_SAMPLER

SEED_POLICY: dict[str, Any] = {"name": "racing", "seeds": 2, "top_k": 2, "start": 0.8}
"""Racing late (``tuner.study.seed_policy``): once 80% of the budget is spent, the 2 best configurations by mean are
re-run on a second seed, and the winner is the best two-seed mean, so no single seed's luck picks it. In the replay it
found a good configuration as fast as one seed for every trial, with a lower final regret: the race spends only the last
fifth of the budget, where the search has mostly found its region. Racing from the start cost far more updates."""

FRONTIER: dict[str, Any] = {"name": FRONTIER_SAMPLER}
"""FrontierSampler() with its own defaults (4 start-up trials): the replays' ``frontier_race_late``, the search the rule
chose. Its aims are not held within the study's KL budget (``within_budget``, an option): the first live study on
SmolLM2 aimed all 8 of its steered trials past its budget, but replayed on the text table the hold needed 0.89x random
search's updates where the search without it needed 0.48x (benchmarks/README.md, "The budget hold, post hoc")."""

JOINT_TPE: dict[str, Any] = {"name": "tpe", "multivariate": True, "group": True, "n_startup_trials": 4}
"""TPESampler(multivariate=True, group=True, n_startup_trials=4); ``tuner.trial.factory`` adds the constant liar.
The replays' ``tpe_multivariate_race_late``, and the default of a study the frontier search cannot read."""


def reads_frontier(objectives: Sequence[tuple[str, str]]) -> bool:
    """Whether the frontier search can serve a study of these objectives, each (metric, direction): one objective,
    a held-out judge maximised (a built-in task's gold, or the judges a run names), which is what it aims at. The KL
    it reads, ``eval/kl``, is reported by every run that evaluates. (Pairs, not the spec's Objective: the spec's
    seed policy reads this module.)"""
    return len(objectives) == 1 and objectives[0][0] in HELD_OUT_JUDGE_METRICS and objectives[0][1] == "maximize"


def default_sampler(objectives: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The sampler of a study file that names none: :data:`FRONTIER` where :func:`reads_frontier`, else
    :data:`JOINT_TPE`."""
    return dict(FRONTIER if reads_frontier(objectives) else JOINT_TPE)
