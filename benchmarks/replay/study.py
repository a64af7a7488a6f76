"""One repeat of one strategy: an in-memory Optuna study run against the table until its budget of updates is spent.

Each trial is asked of the study, proposed by ``tuner.search.space.suggest_params`` over the study file's space and
base (what a real study's trial suggests), mapped to the table's nearest configuration
(``benchmarks.replay.mapping``), replayed on one of that configuration's runs (``benchmarks.replay.trial``) and told
back: its value when it completed, PRUNED when a pruner, the KL guard or the budget stopped it, FAIL when it diverged;
its constraints are set first, completed or pruned alike, as the tuner sets them, so the samplers model feasibility.

Seed policies, the tuner's own (``tuner.study.seed_policy``): ``single`` replays every trial on the repeat's table seed
(as a study trains every trial on the base's seed) and the winner is the best feasible completed trial. ``racing``
(``seed_policy: {name: racing, seeds: S, top_k: K, start: F}``) runs the tuner's ``Racing`` callback after each
completed trial once F of the repeat's budget of updates is spent: each of the top K configurations by mean with
fewer than S seeds is queued again on its next seed, as an ordinary trial (the pruner and the guard judge it, the
sampler learns from it, it costs its updates), replayed on the next table seed. The winner after each trial is the
tuner's own answer, ``tuner.study.winner.read_winner``: the repeat's study carries its spec, with the strategy's seed
policy, as a real study does, so the replay never works out a winner by rules of its own.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from benchmarks.replay.mapping import TableIndex
from benchmarks.replay.strategies import WARM_STARTS, Fidelity, Strategy, make_pruner, make_sampler
from benchmarks.replay.table import SeedKey, Table
from benchmarks.replay.trial import TrialOutcome, replay_run
from tuner.search.frontier_points import TRIAL_COLUMN
from tuner.search.frontier_sampler import FrontierSampler
from tuner.search.space import suggest_params
from tuner.search.warm_start import enqueue_warm_starts, warm_start_points
from tuner.store.attrs import RACE_OF_ATTR, SEED_ATTR
from tuner.study.constraints import upper_limit
from tuner.study.seed_policy import Racing
from tuner.study.spec import StudySpec
from tuner.study.spec_record import record_spec
from tuner.study.winner import read_winner


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
class RepeatLog:
    """What one repeat did: its trials' fates, the proposals' mapping, and the winner after each trial."""

    table_seed: SeedKey
    spent: int = 0
    states: list[str] = field(default_factory=list)
    reruns: int = 0
    proposals: list[tuple[float, int, int]] = field(default_factory=list)
    """(distance to the nearest row, nearest config_id, second-nearest config_id) of each proposal (reruns not)."""
    trials: list[tuple[int, int, SeedKey, str, float]] = field(default_factory=list)
    """(the trial its configuration first ran as, config_id, table seed, state, value) of each trial."""
    timeline: list[tuple[int, int | None]] = field(default_factory=list)
    """(updates spent, config_id of the winner then) after each trial."""
    costs: list[tuple[int, float]] = field(default_factory=list)
    """(episodes, seconds) spent after each trial, in step with ``timeline``: the table's measured wall time of the
    updates each trial ran (``benchmarks.replay.table.Run.cost``)."""


@dataclass
class UpdateBudget:
    """A repeat's budget in PPO updates, for racing's start (``tuner.study.seed_policy.Budget``): no cap on trials."""

    total: int
    used: int = 0

    def spent(self, trials: Sequence[FrozenTrial]) -> float:
        return self.used / self.total

    def room(self, trials: Sequence[FrozenTrial]) -> int | None:
        return None


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
    sampler = make_sampler(strategy, spec, sampler_seed)
    evaluations: list[dict[str, float]] = []  # what the repeat's trials evaluated, as the metrics table holds it
    if isinstance(sampler, FrontierSampler):
        sampler.attach(spec.search_space, spec.base, lambda _: pd.DataFrame(evaluations), upper_limit(spec.constraints))
    study = optuna.create_study(study_name=f"replay-{sampler_seed}", direction="maximize", sampler=sampler,
                                pruner=make_pruner(strategy, spec, context.fidelity))
    if strategy.warm_starts:
        enqueue_warm_starts(study, warm_start_points(spec.search_space, WARM_STARTS, spec.base))
    seeds = seed_order(table, repeat)
    # Table seed k stands for the base's seed + k, as the tuner numbers a race's seeds.
    budget = UpdateBudget(context.budget)
    policy = dataclasses.replace(strategy.seed_policy, seeds=min(strategy.seed_policy.seeds, len(seeds)))
    racing = Racing(policy, base_seed=0, budget=budget) if policy.racing else None
    # The spec the repeat's study carries, as ``ppo-tune run`` stores it: what the winner is read from.
    record_spec(study, dataclasses.replace(spec, mapping={**spec.mapping, "seed_policy": dataclasses.asdict(policy)}),
                allow_changes=False)
    guard = spec.kl_guard if strategy.guard else None
    objective, constraints = spec.objectives[0], spec.constraints
    log = RepeatLog(table_seed=seeds[0])
    config_of: dict[int, int] = {}  # trial number -> config_id

    while log.spent < context.budget:
        trial = study.ask()
        suggest_params(trial, spec.search_space, spec.base)
        root = int(trial.user_attrs.get(RACE_OF_ATTR, trial.number))
        if root == trial.number:
            rows, distances = context.index.nearest(trial.params, 2)
            config_of[root] = context.rows[rows[0]]
            log.proposals.append((distances[0], config_of[root], context.rows[rows[-1]]))
        else:
            log.reruns += 1
        config = table.configs[config_of[root]]
        config_of[trial.number] = config.config_id
        seed = seeds[int(trial.user_attrs.get(SEED_ATTR, 0))]
        run = config.runs[seed]
        outcome = replay_run(run, objective, constraints, guard, trial, context.budget - log.spent)
        evaluations.extend({TRIAL_COLUMN: trial.number, **row} for row in run.evals if row["update"] <= outcome.cost)
        log.spent += outcome.cost
        episodes, seconds = run.cost(outcome.cost)
        before = log.costs[-1] if log.costs else (0, 0.0)
        log.costs.append((before[0] + episodes, before[1] + seconds))
        budget.used = log.spent
        log.states.append(outcome.state)
        log.trials.append((root, config.config_id, seed, outcome.state, outcome.value))
        tell(study, trial, outcome)
        if racing is not None:
            # The trial just told: the queue's waiting trials (warm starts, reruns) may carry higher numbers.
            racing(study, next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number))
        winner = read_winner(study).best
        log.timeline.append((log.spent, None if winner is None else config_of[winner.number]))
    return log
