"""A parsed study file (:class:`StudySpec`) and the small records it holds: its objectives and its KL guard.

``tuner.study.study_file.load_study_spec`` reads and checks a study file into one.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ppo_core.metric_names import HELD_OUT_JUDGE_METRICS
from tuner.search.frontier_sampler import FRONTIER_METRICS, FRONTIER_SAMPLER
from tuner.search.space import ParamSpec
from tuner.search.warm_start import WarmStart
from tuner.store.attrs import DEFAULT_KL_METRIC, DEFAULT_KL_THRESHOLD
from tuner.study.constraints import Constraint
from tuner.study.population_section import Population
from tuner.study.reduction import reduction_label
from tuner.study.seed_policy import SeedPolicy

Direction = Literal["maximize", "minimize"]
DIRECTIONS: tuple[Direction, ...] = typing.get_args(Direction)


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: Direction = "maximize"
    reduce: str = "mean_last_k"
    k: int = 5

    @property
    def label(self) -> str:
        return reduction_label(self)


@dataclass(frozen=True)
class KLGuard:
    """When a trial's KL counts as blown up (the seed guidance: above 10-15 or 15-20 nats is divergence)."""

    enabled: bool = True
    metric: str = DEFAULT_KL_METRIC
    threshold: float = DEFAULT_KL_THRESHOLD
    """Nats that the mean of the last ``window`` updates' KL may not pass: one batch's estimate is noisy."""
    predict: bool = True
    window: int = 5
    """Updates the KL level (their mean) and the trend (a least-squares line through them) are read over; the trend
    forecasts as many updates ahead."""
    min_updates: int = 3
    predict_min_fraction: float = 0.5
    confidence: float = 0.95
    """How sure the trend must be: the line's forecast is taken at this one-sided lower confidence bound (Student's t
    over the window), so a noisy window forecasts no crossing."""
    confirmations: int = 2
    """Updates running at which the trend must forecast a crossing: the guard asks at every update, and one look's
    error rate would compound over a run's hundred looks."""


@dataclass
class StudySpec:
    name: str
    storage: str
    path: Path
    n_trials: int | None
    timeout: float | None
    sampler: dict[str, Any]
    pruner: dict[str, Any]
    objectives: list[Objective]
    kl_guard: KLGuard
    base: dict[str, Any]
    search_space: dict[str, ParamSpec] = field(default_factory=dict)
    heartbeat_interval: int = 10
    trial_timeout: float | None = None
    """Seconds one trial's process may run; past it the process is killed and the trial is FAIL. None: no limit."""
    processes_per_trial: int = 1
    """Processes that train one trial together, under ``accelerate launch`` when more than one."""
    enqueue: list[WarmStart] = field(default_factory=list)
    """The study's first trials (``enqueue``: trl_defaults, seed_guidance or values), as points of the search space;
    ``tuner.search.warm_start.enqueue_warm_starts`` queues them on a new study."""
    constraints: list[Constraint] = field(default_factory=list)
    """Bounds on reduced metrics (e.g. a KL budget) that a feasible trial keeps; set on each trial for Optuna."""
    hacking_guard: list[Constraint] = field(default_factory=list)
    """Bounds a held-out signal of hacking (``eval/repeated_3grams``, ...) may not cross at any evaluation: the trial
    stops there, pruned."""
    seed_policy: SeedPolicy = field(default_factory=SeedPolicy)
    """Which seeds trials train on, and so what chooses the winner (tuner.study.seed_policy)."""
    trainer: str = "ppo_core"
    """What trains each trial: ``ppo_core`` (ppo-tune's own trainer) or TRL's trainer ``trl-grpo`` / ``trl-rloo``
    (:mod:`tuner.trl_trial`), which is then also the target."""
    target: str | None = None
    """The trainer the winner will run in (an export format: trl-grpo, verl, ...): its profile fills the base, and
    no trial may compute what it does not (tuner.study.target)."""
    population: Population | None = None
    """Population-based training instead of a search of whole runs (tuner.study.population_section); None: none."""
    mapping: dict[str, Any] = field(default_factory=dict)
    """The study file's mapping as read: stored on the study (``tuner.study.spec_record``), so that a resume can tell
    what changed and ``ppo-tune validate`` can rebuild the spec from the storage alone."""

    def named_metrics(self) -> list[tuple[str, str]]:
        """(key in the study file, metric name) for each metric the study reads from its runs."""
        named = [(f"objectives[{index}].metric", objective.metric) for index, objective in enumerate(self.objectives)]
        named += [(f"constraints[{index}].metric", constraint.metric)
                  for index, constraint in enumerate(self.constraints)]
        named += [(f"hacking_guard[{index}].metric", bound.metric) for index, bound in enumerate(self.hacking_guard)]
        if self.sampler["name"] == FRONTIER_SAMPLER:  # it reads where a held-out judge peaks in held-out KL
            judged = [objective.metric for objective in self.objectives if objective.metric in HELD_OUT_JUDGE_METRICS]
            named += [(f"sampler.name {FRONTIER_SAMPLER}", metric)
                      for metric in (FRONTIER_METRICS if not judged else (FRONTIER_METRICS[0], judged[0]))]
        return named + ([("kl_guard.metric", self.kl_guard.metric)] if self.kl_guard.enabled else [])

    @property
    def directions(self) -> list[Direction]:
        return [objective.direction for objective in self.objectives]

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1
