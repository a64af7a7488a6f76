"""One repeat of one strategy: an in-memory Optuna study run against the table until its budget of updates is spent.

Each trial is asked of the study, proposed by ``tuner.search_space.suggest_params`` over the study file's space and
base (what a real study's trial suggests), mapped to the table's nearest configuration
(``benchmarks.replay_mapping``), replayed on one of that configuration's runs (``benchmarks.replay_trial``) and told
back: its value when it completed, PRUNED when a pruner, the KL guard or the budget stopped it, FAIL when it diverged;
its constraints are set first, completed or pruned alike, as the tuner sets them, so the samplers model feasibility.

Seed policies: ``single`` replays every trial on the repeat's table seed (as a study trains every trial on seed 0);
``racing`` also reruns a trial whose first value enters the top 3 on the next table seed, to its end (the KL guard
still on when the strategy has it, no pruner), and a candidate's standing is its mean over the seeds it ran
(:func:`benchmarks.replay_table.estimate`). A guarded or diverged rerun disqualifies the candidate. The study's winner
is the feasible candidate with the best standing (the earlier on a tie).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from benchmarks.replay_mapping import TableIndex
from benchmarks.replay_strategies import Fidelity, Strategy, make_pruner, make_sampler
from benchmarks.replay_table import Config, Run, SeedKey, Table, estimate
from benchmarks.replay_trial import TrialOutcome, replay_run
from tuner.search_space import suggest_params
from tuner.study_config import StudySpec
from tuner.warm_start import enqueue_warm_starts

RACE_TOP = 3
"""A trial whose first value ranks among the best RACE_TOP candidates is run again on another seed."""


@dataclass(frozen=True)
class Context:
    """What every repeat reads: the study file's spec, the table and its index, the budget and the rungs."""

    spec: StudySpec
    table: Table
    index: TableIndex
    rows: tuple[int, ...]
    """The config_id of each row of ``index``."""
    budget: int
    fidelity: Fidelity


@dataclass
class Candidate:
    """A completed trial: its table configuration, the runs it completed, and whether a rerun disqualified it."""

    config: Config
    runs: list[Run]
    disqualified: bool = False


@dataclass
class RepeatLog:
    """What one repeat did: its trials' fates, the proposals' mapping, and the winner after each trial."""

    table_seed: SeedKey
    spent: int = 0
    states: list[str] = field(default_factory=list)
    reruns: int = 0
    proposals: list[tuple[float, int, int]] = field(default_factory=list)
    """(distance to the nearest row, nearest config_id, second-nearest config_id) of each proposal."""
    timeline: list[tuple[int, int | None]] = field(default_factory=list)
    """(updates spent, config_id of the winner then) after each trial and each rerun."""


def standing(candidate: Candidate, spec: StudySpec) -> tuple[float, bool]:
    """(mean value over the seeds it ran, feasible): a disqualified candidate is infeasible."""
    value, feasible = estimate(candidate.runs, spec.objectives[0], spec.constraints)
    return value, feasible and not candidate.disqualified


def winner(standings: Sequence[tuple[float, bool]]) -> int | None:
    """The index of the best feasible standing, the earliest on a tie; None when none is feasible."""
    best: int | None = None
    for index, (value, feasible) in enumerate(standings):
        if feasible and not math.isnan(value) and (best is None or value > standings[best][0]):
            best = index
    return best


def enters_top(standings: Sequence[tuple[float, bool]], index: int, top: int = RACE_TOP) -> bool:
    """Whether feasible standing ``index`` is among the ``top`` best: fewer than ``top`` feasible ones beat it."""
    value, feasible = standings[index]
    if not feasible:
        return False
    return sum(1 for other, ok in standings if ok and other > value) < top


def tell(study: optuna.Study, trial: optuna.Trial, outcome: TrialOutcome) -> None:
    for key, value in outcome.constraints.items():
        trial.set_constraint(key, value)
    if outcome.state == "complete" and math.isfinite(outcome.value):
        study.tell(trial, outcome.value)
    elif outcome.state in ("pruned", "guarded", "cut"):
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)


def seed_order(table: Table, repeat: int) -> list[SeedKey]:
    """The repeat's table seed first (the seeds in turn over repeats), then the others in order: a race's reruns."""
    first = repeat % len(table.seeds)
    return [*table.seeds[first:], *table.seeds[:first]]


def run_repeat(strategy: Strategy, context: Context, sampler_seed: int, repeat: int) -> RepeatLog:
    """Run one strategy's study against the table until ``context.budget`` updates are spent."""
    spec, table = context.spec, context.table
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)
    # A fixed name: HyperbandPruner assigns a trial's bracket by a hash of the study's name and the trial's number,
    # and an in-memory study is otherwise named at random, which would make repeats irreproducible.
    study = optuna.create_study(study_name=f"replay-{sampler_seed}", direction="maximize",
                                sampler=make_sampler(strategy, spec, sampler_seed),
                                pruner=make_pruner(strategy, spec, context.fidelity))
    if strategy.warm_starts:
        enqueue_warm_starts(study, spec.enqueue)
    seeds = seed_order(table, repeat)
    guard = spec.kl_guard if strategy.guard else None
    objective, constraints = spec.objectives[0], spec.constraints
    log = RepeatLog(table_seed=seeds[0])
    candidates: list[Candidate] = []

    def note_winner() -> None:
        best = winner([standing(candidate, spec) for candidate in candidates])
        log.timeline.append((log.spent, None if best is None else candidates[best].config.config_id))

    while log.spent < context.budget:
        trial = study.ask()
        suggest_params(trial, spec.search_space, spec.base)
        rows, distances = context.index.nearest(trial.params, 2)
        config = table.configs[context.rows[rows[0]]]
        second = context.rows[rows[-1]]
        log.proposals.append((distances[0], config.config_id, second))
        run = config.runs[seeds[0]]
        outcome = replay_run(run, objective, constraints, guard, trial, context.budget - log.spent)
        log.spent += outcome.cost
        log.states.append(outcome.state)
        tell(study, trial, outcome)
        if outcome.state != "complete":
            note_winner()
            continue
        candidates.append(Candidate(config, [run]))
        note_winner()
        if strategy.seeds == "racing" and len(seeds) > 1 and log.spent < context.budget and \
                enters_top([standing(candidate, spec) for candidate in candidates], len(candidates) - 1):
            rerun = replay_run(config.runs[seeds[1]], objective, constraints, guard, None,
                               context.budget - log.spent)
            log.spent += rerun.cost
            log.reruns += 1
            if rerun.state == "complete":
                candidates[-1].runs.append(config.runs[seeds[1]])
            elif rerun.state in ("guarded", "failed"):
                candidates[-1].disqualified = True
            note_winner()
    return log
