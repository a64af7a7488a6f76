"""The curve table as the replay reads it: each configuration's point and its runs, one per table seed, and what each
run and each configuration is worth by the study's own objective and constraints.

A run's value is what a trial that ran it to the end would have been told: the objective's metric history reduced as
the tuner reduces it (``tuner.study.reduction.reduce_history``: the quickstart's mean of the last 2 held-out golds), and
it is feasible when every constraint holds on its reduced history (the quickstart's last ``eval/kl`` <= 5). A
configuration's TRUE quality is the mean of its runs' values over every table seed, feasible when the mean of each
constraint's reduced value over those seeds keeps the bound and no run diverged: the expectation a user who adopts it
gets, where one seed's value is partly luck.

Example::

    table = load_table(Path("benchmarks/results/curve_tables/curve_table.jsonl"), spec.objectives[0], spec.constraints)
    table.configs[0].true_value, table.configs[0].true_feasible
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.search.kl_model import rollout_episodes
from tuner.study.constraints import Constraint
from tuner.study.reduction import Reduction, reduce_history

SeedKey = tuple[int, int]
"""A table seed: (task_seed, seed) of a run."""


@dataclass(frozen=True)
class Run:
    """One (configuration, seed) row: per update the training metrics, per held-out evaluation its metrics."""

    seed: SeedKey
    updates: int
    planned_updates: int
    failed: bool
    """The run diverged before its last update (a non-finite metric): a trial of it fails."""
    train: dict[str, list[float]]
    evals: tuple[dict[str, float], ...]
    """Each evaluation's metrics, with ``update`` the update it came after."""
    seconds: float = 0.0
    """The run's wall time as the table's builder measured it (its evaluations included)."""
    episodes: int = 0
    """Episodes (prompt, response pairs) generated per update: the run's rollout."""

    def cost(self, updates: int) -> tuple[int, float]:
        """(episodes, seconds) of the run's first ``updates`` updates: its time spread evenly over the updates it ran
        (each update generates, scores and trains on one rollout, alike)."""
        share = updates / self.updates if self.updates else 0.0
        return updates * self.episodes, self.seconds * share

    @property
    def eval_updates(self) -> list[int]:
        return [int(point["update"]) for point in self.evals]


@dataclass(frozen=True)
class Config:
    """A configuration of the table: the sampler's point and its runs by seed, with its TRUE quality."""

    config_id: int
    params: dict[str, Any]
    runs: dict[SeedKey, Run]
    true_value: float
    """Mean over every table seed of the run's value; NaN when a run has no value (it diverged before evaluating)."""
    true_feasible: bool


@dataclass(frozen=True)
class Table:
    configs: dict[int, Config]
    seeds: tuple[SeedKey, ...]
    """Every table seed, in order; each configuration has a run on each."""
    dropped: int
    """Configurations left out for lacking a run on some table seed (the table is still being built)."""
    rows: int
    """The table's rows read."""


def history(run: Run, metric: str, upto: int) -> list[float]:
    """The metric's values at updates 1..upto: a training metric's one per update, an evaluation metric's one per
    evaluation at or before ``upto``. A missing training value reads 0.0, as the tuner's KL history does."""
    if metric in run.train:
        return [0.0 if value is None else float(value) for value in run.train[metric][:upto]]
    return [float(point[metric]) for point in run.evals if point["update"] <= upto and metric in point]


def run_value(run: Run, objective: Reduction) -> float:
    """The objective of the run to its end (NaN if it never reported the metric); a diverged run has none."""
    return math.nan if run.failed else reduce_history(history(run, objective.metric, run.updates), objective)


def constraint_reduced(run: Run, constraint: Constraint) -> float:
    """The constraint's metric history over the whole run, reduced (NaN when never reported)."""
    return reduce_history(history(run, constraint.metric, run.updates), constraint)


def keeps(constraint: Constraint, reduced: float) -> bool:
    """Whether a reduced value keeps the constraint's bounds (a NaN keeps none)."""
    if math.isnan(reduced):
        return False
    above = constraint.min is None or reduced >= constraint.min
    return above and (constraint.max is None or reduced <= constraint.max)


def estimate(runs: Sequence[Run], objective: Reduction, constraints: Sequence[Constraint]) -> tuple[float, bool]:
    """(mean value, feasible) of a configuration over the runs given: value = mean of ``run_value``; feasible when no
    run diverged and, for each constraint, the mean of its reduced value over the runs keeps the bound.

    With every table seed this is the TRUE quality; with the seeds a race ran, the race's estimate.
    """
    values = [run_value(run, objective) for run in runs]
    if not runs or any(math.isnan(value) for value in values):
        return math.nan, False
    feasible = all(keeps(c, statistics.fmean(constraint_reduced(run, c) for run in runs)) for c in constraints)
    return statistics.fmean(values), feasible


def parse_run(row: dict[str, Any], episodes_per_update: int = 0) -> Run:
    return Run(seed=(int(row["task_seed"]), int(row["seed"])), updates=int(row["updates"]),
               planned_updates=int(row["planned_updates"]), failed=row.get("failure") is not None,
               train={name: list(values) for name, values in row["train"].items()}, evals=tuple(row["evals"]),
               seconds=float(row["seconds"]), episodes=episodes_per_update)


def table_rows(path: Path, rows: int | None = None) -> list[dict[str, Any]]:
    """The rows of the JSON-lines table at ``path``, the first ``rows`` of them when given; a table still being built
    included (its last line, half written, is left out)."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if lines and not lines[-1].rstrip().endswith("}"):
        lines.pop()  # the row the builder is writing right now
    return [json.loads(line) for line in lines[:rows]]  # the builder only appends: a table's first rows stay its own


def load_table(path: Path, objective: Reduction, constraints: Sequence[Constraint], rows: int | None = None,
               base: Mapping[str, Any] | None = None) -> Table:
    """Read the JSON lines at ``path`` (a table still being built included), the first ``rows`` of them when given;
    keep the configurations with a run on every table seed. With the study's ``base``, each run knows its episodes
    per update (``tuner.search.kl_model.rollout_episodes``), for the cost in episodes."""
    read = table_rows(path, rows)
    points: dict[int, dict[str, Any]] = {}
    runs: dict[int, dict[SeedKey, Run]] = {}
    for row in read:
        run = parse_run(row, rollout_episodes(row["params"], base) if base is not None else 0)
        points[int(row["config_id"])] = row["params"]
        runs.setdefault(int(row["config_id"]), {})[run.seed] = run
    seeds = tuple(sorted({seed for by_seed in runs.values() for seed in by_seed}))
    configs = {}
    for config_id, by_seed in sorted(runs.items()):
        if len(by_seed) == len(seeds):
            value, feasible = estimate([by_seed[seed] for seed in seeds], objective, constraints)
            configs[config_id] = Config(config_id, points[config_id], by_seed, value, feasible)
    return Table(configs, seeds, dropped=len(runs) - len(configs), rows=len(read))


def best_true(table: Table) -> float:
    """The best TRUE value among configurations feasible in truth; NaN when none is."""
    values = [config.true_value for config in table.configs.values() if config.true_feasible]
    return max(values) if values else math.nan
