"""What a tuner buys: the quickstart study against random search and two fixed configs, at equal PPO updates.

    python -m benchmarks.tuning_quality [--budget-updates N] [--sampler-seeds 5] [--validation-seeds 5]
                                        [--task-seed T] [--workers 2] [--work-dir DIR] [--resume] [--frontier]
                                        [--methods M ...] [--quick]

Four methods on the built-in task (the base of ``studies/quickstart.yaml``), all judged by the quickstart's
objective (the held-out ``eval/gold_score`` over the last two evaluations) and KL budget (``eval/kl``, a constraint):

- ``default``: the quickstart study as shipped (its sampler, pruner, seed policy, KL guard and ``enqueue`` warm
  starts: what a study gets by default, ``tuner.study.defaults``);
- ``random``: random search, no pruner, no KL guard, no warm starts;
- ``trl_defaults``: ``benchmarks/studies/trl_defaults.yaml`` (TRL 1.12's defaults) with the quickstart's evaluation
  settings;
- ``guidance``: the seed guidance's starting point (``tuner.search.warm_start.guidance_values``) on the quickstart base;
- ``frontier`` (with ``--frontier``): the quickstart study with ``sampler: {name: frontier}``
  (``tuner.search.frontier_sampler``) at half the budget of updates; ``paired_frontier`` holds, per seed, its validated
  mean minus random search's.

``--methods`` runs only the named methods' studies (``--methods random frontier``: the frontier comparison alone,
without the default's and the fixed configs' studies, about 60% of the compute).

``--study FILE`` runs the searches on another study file instead of the quickstart (its base, space, objective,
constraints, guard and evaluation), for example ``benchmarks/studies/smollm2.yaml``: the shipped default search at half
random search's budget against random search at all of it, live on the real model::

    python -m benchmarks.tuning_quality --study benchmarks/studies/smollm2.yaml --methods random frontier \
        --sampler-seeds 3 --validation-seeds 3 --work-dir DIR [--resume]

There the budget defaults to the study's own (its ``n_trials`` times its base's updates per trial), and only the
searches run: the two fixed configurations are the quickstart's.

Each ``default``/``random`` study (one per sampler seed) runs trials one after another until the PPO updates its trials
ran (``tuner.study.reports.updates_run``: a pruned trial counts the updates it ran) reach ``--budget-updates``; the
trial running then is finished. The two fixed configs are one-trial studies. Every method's chosen config (the best
tuning trial, or the one trial) is then retrained on fresh seeds as ``ppo-tune validate --top-k 1`` does, the same
seeds for every study. Studies run ``--workers`` at a time with one CPU thread each, each tuned and then validated in
one process. The two searches are paired by sampler seed: ``paired`` holds, per seed, the
default's validated mean minus random search's, their mean and its 95% t interval. ``--task-seed`` runs every study
on another draw of the built-in task (``task_seed``). ``--resume`` goes on with an interrupted run in its
``--work-dir``: finished studies are read, not rerun, an unfinished one continues (its interrupted trial queued
again), and the validation runs that finished are kept.
The default budget is 960 updates per study, 5 sampler seeds and 5 validation seeds: about 25 min of tuning and 50 of
validation on 2 quiet cores (an estimate from the 2026-11-23 runs, which were resumed). Results and what they mean:
benchmarks/README.md. ``--quick`` is a smoke run of every step: 2 updates per study, trials of 2 updates, 1 sampler
seed, 1 validation seed and 1 study at a time, results in ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from benchmarks.common.json_safe import json_safe
from benchmarks.common.machine import machine_facts
from benchmarks.common.pool import each_result
from tools.provenance import command_line
from tools.quick_mode import add_quick_argument, results_path
from tuner.production.confidence import mean_interval

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "studies" / "quickstart.yaml"
TRL_DEFAULTS = ROOT / "benchmarks" / "studies" / "trl_defaults.yaml"
RESULTS = ROOT / "benchmarks" / "results"
T = TypeVar("T")
SEARCHES = ("default", "random", "frontier")
FRONTIER_SHARE = 0.5
"""The frontier-guided search's budget, as a share of the others': what it must match is random search at the full
budget, with half the compute (``--frontier``)."""
FIXED = ("trl_defaults", "guidance")
# The quickstart's evaluation settings, copied onto TRL's defaults so that both are judged on the same held-out runs.
EVAL_FIELDS = ("eval_steps", "num_eval_samples", "num_eval_prompts")
WITHIN = 0.05
"""'Compute to come within 5% of the best': updates until the best-so-far reaches (1 - WITHIN) x the best."""
DEFAULT_BUDGET = 960
QUICK = {"budget_updates": 2, "sampler_seeds": 1, "validation_seeds": 1, "workers": 1}
"""--quick: the fewest processes that still run every step (the test suite runs it on a core it shares): the studies
run one after another in the benchmark's own process, one validation seed (a mean without an interval, which
tuner.production.confidence's own tests cover)."""
QUICK_BASE = {"total_episodes": 32, "num_eval_samples": 2}
"""--quick: every study's runs (tuning and validation) take 32 episodes (1 or 2 updates) with 2 responses per
held-out prompt at each evaluation."""
FULL = {"budget_updates": DEFAULT_BUDGET, "sampler_seeds": 5, "validation_seeds": 5, "workers": 2}


def study_budget(definition: dict[str, Any]) -> int:
    """A study file's own budget of PPO updates: its ``n_trials`` times its base's updates per trial (PPOConfig's
    defaults where the base sets nothing; a searched rollout size is read at its default)."""
    from tuner.search.kl_model import mass_factors

    return int(definition.get("n_trials") or 1) * int(mass_factors({}, definition["base"])["updates"])


def guidance_base(quickstart: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The seed guidance's starting point as config values on the quickstart base: the quickstart's own
    ``seed_guidance`` warm start (fitted to its space: rollouts of 256 become 32), plus the guidance's stated values
    for fields the study does not search (λ 0.95, c1 0.5)."""
    from ppo_core.config.ppo_config import settable_fields
    from tuner.search.space import VIRTUAL_PARAMS, config_values
    from tuner.search.warm_start import guidance_values, warm_start_points
    from tuner.study.study_file import parse_study

    space = parse_study(quickstart, QUICKSTART).search_space
    (start,) = warm_start_points(space, ["seed_guidance"])
    stated = {name: value for name, value in guidance_values().items()
              if name not in space and name not in VIRTUAL_PARAMS and name in settable_fields()}
    return {**quickstart["base"], **config_values(start.params, quickstart["base"]), **stated}, list(start.notes)


def study_definitions(quickstart: dict[str, Any], work_dir: Path, sampler_seeds: int,
                      base_overrides: dict[str, Any] | None = None, frontier: bool = False,
                      methods: Collection[str] | None = None) -> list[dict[str, Any]]:
    """Every study's file contents, tuning studies first; each in its own SQLite file under ``work_dir``, with
    ``base_overrides`` on every study's base; with ``frontier``, a frontier-guided study per sampler seed too; with
    ``methods``, only those methods' studies."""
    definitions = []
    for seed in range(sampler_seeds):
        shipped = {**quickstart, "sampler": {**quickstart.get("sampler", {}), "seed": seed}}
        random = {**quickstart, "sampler": {"name": "random", "seed": seed}, "pruner": {"name": "none"},
                  "kl_guard": {**quickstart.get("kl_guard", {}), "enabled": False}}
        random.pop("enqueue", None)
        random["seed_policy"] = {"name": "single"}  # one seed for every trial: no racing
        definitions += [{**shipped, "name": f"tq-default-s{seed}"}, {**random, "name": f"tq-random-s{seed}"}]
        if frontier:
            definitions.append({**quickstart, "sampler": {"name": "frontier", "seed": seed},
                                "name": f"tq-frontier-s{seed}"})
    if methods is None or any(method in FIXED for method in methods):
        evaluation = {key: quickstart["base"][key] for key in EVAL_FIELDS if key in quickstart["base"]}
        trl_base = {**yaml.safe_load(TRL_DEFAULTS.read_text()), **evaluation}
        fixed = {key: value for key, value in quickstart.items() if key not in ("enqueue", "search_space")}
        fixed.update(n_trials=1, sampler={"name": "random", "seed": 0}, pruner={"name": "none"},
                     kl_guard={**quickstart.get("kl_guard", {}), "enabled": False})  # one run: nothing to prune
        definitions += [{**fixed, "name": "tq-trl_defaults", **pinned(trl_base)},
                        {**fixed, "name": "tq-guidance", **pinned(guidance_base(quickstart)[0])}]
    definitions = [d for d in definitions if methods is None or method_of(d["name"]) in methods]
    for definition in definitions:
        definition.pop("timeout", None)
        definition["storage"] = f"sqlite:///{work_dir / definition['name']}.db"
        definition["base"] = {**definition["base"], **(base_overrides or {})}
    return definitions


def pinned(base: dict[str, Any]) -> dict[str, Any]:
    """A fixed configuration as a one-trial study's base and search space: a study with nothing to search is refused,
    so the base's own PPO epochs move into the space as its one choice (the trial runs the same configuration)."""
    from ppo_core.config.ppo_config import PPOConfig

    rest = {key: value for key, value in base.items() if key != "num_ppo_epochs"}
    epochs = base.get("num_ppo_epochs", PPOConfig.__dataclass_fields__["num_ppo_epochs"].default)
    return {"base": rest, "search_space": {"num_ppo_epochs": {"type": "categorical", "choices": [epochs]}}}


def method_of(name: str) -> str:
    return name.split("-")[1]


def budget_of(method: str, budget: int) -> int | None:
    """A study's budget of updates: ``budget`` for a search (:data:`FRONTIER_SHARE` of it for the frontier-guided
    one), None for a fixed configuration's one trial."""
    if method not in SEARCHES:
        return None
    return max(1, round(budget * FRONTIER_SHARE)) if method == "frontier" else budget


class BudgetStop:
    """Stops the study once its trials have run ``budget`` PPO updates; the trial that crossed it has finished. It is
    also the study's budget for racing's start (``tuner.study.seed_policy.Budget``), in updates, with no cap on
    trials."""

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def spent(self, trials: Any) -> float:
        from tuner.study.reports import updates_run

        return sum(updates_run(t) for t in trials) / self.budget if self.budget else 1.0

    def room(self, trials: Any) -> int | None:
        return None

    def __call__(self, study: Any, trial: Any) -> None:
        from tuner.study.reports import updates_run

        spent = sum(updates_run(t) for t in study.get_trials(deepcopy=False))
        value = f"{trial.value:.4f}" if trial.values else "-"
        print(f"{study.study_name}: trial {trial.number} {trial.state.name} value {value} updates "
              f"{updates_run(trial)}; {spent}/{self.budget} updates spent", flush=True)
        if spent >= self.budget:
            study.stop()


def run_one_study(path: str, budget: int | None) -> dict[str, Any]:
    """Run the study file at ``path`` in this process, trials one at a time on one CPU thread: until ``budget``
    updates, or one trial when None; a study an earlier run finished is only read (``--resume``). Returns this call's
    wall time, the trials' summed durations, warm-start notes and trials."""
    import optuna
    from optuna.trial import FrozenTrial

    from ppo_core.config.ppo_config import PPOConfig
    from ppo_core.models.quiet import quiet_hugging_face
    from tuner.run.worker import StopWhenTargetReached, open_study
    from tuner.search.kl_model import rollout_episodes
    from tuner.store.attrs import RACE_OF_ATTR, WARM_START_ATTR
    from tuner.store.database import create_engine
    from tuner.store.records import create_tables
    from tuner.study.constraints import feasible
    from tuner.study.reports import trial_reason, updates_run
    from tuner.study.seed_policy import Racing
    from tuner.study.study_file import load_study_spec
    from tuner.trial.launch import start_fork_server
    from tuner.trial.trial_function import make_trial_function, run_trials

    quiet_hugging_face()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_study_spec(path)
    started = time.perf_counter()
    study, messages = open_study(spec)
    create_tables(create_engine(spec.storage))
    stop = BudgetStop(budget if budget is not None else 0)
    before = study.get_trials(deepcopy=False)
    if not finished(before, stop, budget):
        start_fork_server()
        callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] = [StopWhenTargetReached(None, max_failures=5),
                                                                         stop]
        # The study's seed policy, as a worker runs it, with the budget in updates: racing queues before the stop
        # counts. A one-trial study has nothing to race (a queued re-run would never run).
        if budget is not None:
            callbacks.insert(0, Racing(spec.seed_policy, int(spec.base.get("seed", PPOConfig.seed)), stop))
        run_trials(study, make_trial_function(spec, threads=1), n_trials=None if budget is not None else 1,
                   callbacks=callbacks)
    after = study.get_trials(deepcopy=False)
    trials = [{"number": t.number, "state": t.state.name, "value": t.values[0] if t.values else None,
               "updates": updates_run(t), "episodes": updates_run(t) * rollout_episodes(t.params, spec.base),
               "feasible": t.state == optuna.trial.TrialState.COMPLETE and feasible(t),
               "warm_start": t.user_attrs.get(WARM_START_ATTR),
               "race_of": t.user_attrs.get(RACE_OF_ATTR), "params": t.params, "reason": trial_reason(t) or None,
               "duration_s": round(t.duration.total_seconds(), 2) if t.duration else None}
              for t in after]
    return {"wall_s": round(time.perf_counter() - started, 1), "run_s": round(run_seconds(after), 1),
            "resumed_trials": len(before), "messages": messages, "trials": trials}


def finished(trials: Any, stop: BudgetStop, budget: int | None) -> bool:
    """Whether an earlier run of this study (``--resume``) finished it: no trial left running, and its budget of
    updates spent, or (a one-trial study: ``budget`` None) its trial run. A trial left RUNNING by an interrupted run
    is failed and queued again by the study's heartbeat once the study runs. Racing re-runs still queued when the
    budget was spent stay queued, as the budget's stop left them."""
    from optuna.trial import TrialState

    if any(t.state == TrialState.RUNNING for t in trials):
        return False
    return stop.spent(trials) >= 1.0 if budget is not None else any(t.state.is_finished() for t in trials)


def run_seconds(trials: Any) -> float:
    """The summed durations of a study's finished trials: the compute it took, the same whether it ran in one go
    or was resumed."""
    return sum(t.duration.total_seconds() for t in trials if t.duration is not None)


def validate(name: str, storage: str, seeds: int, eval_samples: int | None = None) -> dict[str, Any]:
    """What ``ppo-tune validate NAME --top-k 1 --seeds SEEDS [--eval-samples N]`` does, in this process (whose fork
    server the study's trials used): the chosen trial retrained on ``seeds`` fresh seeds, one at a time on one CPU
    thread; its validated figures and each run. What an earlier, interrupted run validated is kept (``--resume``)."""
    from tuner.production.local_validation import validate_here
    from tuner.production.validation import load_validation
    from tuner.store.attrs import SEED_ATTR
    from tuner.store.database import open_storage
    from tuner.study.constraints import feasible

    started = time.perf_counter()
    results = validate_here(name, storage, top_k=1, seeds=seeds, threads=1, eval_samples=eval_samples)
    wall = round(time.perf_counter() - started, 1)
    if not results:
        return {"wall_s": wall, "error": "no completed trial to validate", "runs": []}
    validation = load_validation(name, open_storage(storage))
    assert validation is not None  # validate_here created it
    trials = validation.get_trials(deepcopy=False)
    runs = [{"seed": t.user_attrs.get(SEED_ATTR), "state": t.state.name,
             "value": t.values[0] if t.values else None, "feasible": feasible(t),
             "constraints": dict(t.constraints)} for t in trials]
    return {**results[0].to_dict(), "wall_s": wall, "run_s": round(run_seconds(trials), 1), "runs": runs}


def tune_and_validate(path: str, name: str, storage: str, budget: int | None, validation_seeds: int,
                      eval_samples: int | None = None) -> dict[str, Any]:
    """One study of the benchmark (the file at ``path``, study ``name`` in ``storage``), start to end in one process:
    :func:`run_one_study`, then :func:`validate` its chosen trial."""
    study = run_one_study(path, budget)
    print(f"{name}: validating its chosen trial on {validation_seeds} seed(s)", file=sys.stderr, flush=True)
    return {**study, "validation": validate(name, storage, validation_seeds, eval_samples)}


def run_jobs(function: Callable[..., T], jobs: Sequence[tuple[Any, ...]], workers: int) -> list[T]:
    """``function(*job)`` for each job, in order (:func:`benchmarks.common.pool.each_result`): for this benchmark each
    job is a study tuned and then validated (:func:`tune_and_validate`) in one process, whose imports and fork server
    serve both."""
    return list(each_result(function, jobs, workers))


COSTS = {"updates": "updates", "episodes": "episodes", "seconds": "duration_s"}
"""What reaching the target cost, in three units, and the trial figure each sums: updates alone flatter short runs
(runs of 48 and 96 updates can generate the same episodes in about the same time)."""


def progress(trials: list[dict[str, Any]], threshold: float, cost: str = "updates") -> float | None:
    """Cumulative ``cost`` (a trial figure: updates, episodes or duration_s) at the end of the first trial whose
    best-so-far value (among completed trials that keep the study's constraints, as Optuna's best trial) reached
    ``threshold``."""
    spent, best = 0.0, float("-inf")
    for trial in sorted(trials, key=lambda t: t["number"]):
        spent += trial.get(cost) or 0
        if trial["feasible"] and trial["value"] is not None:
            best = max(best, trial["value"])
        if best >= threshold:
            return spent
    return None


def median_reach(reached: Sequence[float | None]) -> float | None:
    """The median over sampler seeds, a seed that never got there counting as infinitely late; None: not reached."""
    middle = statistics.median(float("inf") if r is None else float(r) for r in reached)
    return None if middle == float("inf") else middle


def summarise(studies: list[dict[str, Any]], validation_seeds: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per method: pooled validation mean and 95% CI, each study's validated mean, tuning values, updates, run
    time (summed trial durations), and the updates to come within WITHIN of the best tuning value of any
    default/random study."""
    tuned = [t["value"] for s in studies if s["method"] in SEARCHES for t in s["trials"]
             if t["feasible"] and t["value"] is not None]
    best = max(tuned) if tuned else float("nan")
    threshold = best - WITHIN * abs(best)
    for study in studies:
        study["updates_spent"] = sum(t["updates"] for t in study["trials"])
        for unit, figure in COSTS.items():
            reached = progress(study["trials"], threshold, figure) if study["method"] in SEARCHES else None
            study[f"{unit}_to_target"] = int(reached) if reached is not None and unit != "seconds" else reached
        runs = [r["value"] for r in study["validation"]["runs"] if r["state"] == "COMPLETE" and r["value"] is not None]
        study["validated_values"] = runs
    methods: dict[str, Any] = {}
    for method in SEARCHES + FIXED:
        group = [s for s in studies if s["method"] == method]
        if not group:  # the frontier-guided search runs only with --frontier
            continue
        pooled = [v for s in group for v in s["validated_values"]]
        mean, low, high = mean_interval(pooled)
        methods[method] = {
            "validated_mean": mean, "ci_low": low, "ci_high": high, "n": len(pooled),
            "validated": [statistics.fmean(s["validated_values"]) if s["validated_values"] else None for s in group],
            "chosen_trials": [s["validation"].get("trial") for s in group],
            "tuning_values": [s["validation"].get("tuning_value") for s in group],
            "updates_spent": [s["updates_spent"] for s in group],
            "tuning_run_s": [s["run_s"] for s in group],
            "validation_run_s": [s["validation"].get("run_s") for s in group],
        }
        if method in SEARCHES:
            for unit in COSTS:
                per_seed = [s[f"{unit}_to_target"] for s in group]
                methods[method].update({f"{unit}_to_target": per_seed,
                                        f"{unit}_to_target_median": median_reach(per_seed)})
    return methods, {"best_tuning_value": best, "threshold": threshold, "within": WITHIN,
                     "validation_seeds_per_config": validation_seeds}


def paired(studies: list[dict[str, Any]], ours: str = "default", theirs: str = "random") -> dict[str, Any]:
    """Search ``ours`` against ``theirs`` (random search), sampler seed by sampler seed: per seed, ours' validated
    mean minus theirs' (d_s), and mean(d) with its 95% t interval (``tuner.production.confidence.mean_interval``); per
    seed, the updates each took to the target (None: not reached). A seed either search has no validated value for is
    left out of the differences."""
    pair = (ours, theirs)
    by_seed = {method: {s["sampler_seed"]: s for s in studies if s["method"] == method} for method in pair}
    seeds = sorted(set(by_seed[ours]) & set(by_seed[theirs]))
    differences: list[float | None] = []
    for seed in seeds:
        mine, other = (by_seed[method][seed]["validated_values"] for method in pair)
        differences.append(statistics.fmean(mine) - statistics.fmean(other) if mine and other else None)
    mean, low, high = mean_interval([d for d in differences if d is not None])
    return {"sampler_seeds": seeds, "validated_difference": differences, "mean": mean, "ci_low": low, "ci_high": high,
            "updates_to_target": {method: [by_seed[method][seed]["updates_to_target"] for seed in seeds]
                                  for method in pair}}


def _number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def _numbers(values: list[Any], digits: int = 4) -> str:
    return ", ".join(_number(v, digits) if isinstance(v, float) or v is None else str(v) for v in values)


def markdown_table(methods: dict[str, Any]) -> str:
    lines = ["| method | held-out eval/gold_score, mean [95% CI] (runs) | validated mean per sampler seed "
             "| tuning value of the chosen trial(s) | PPO updates spent | updates to within 5% of the best "
             "(median; per seed) | episodes / trial seconds to within 5% (median) | run s: tuning / validation |",
             "|---|---|---|---|---|---|---|---|"]
    for method, row in methods.items():
        reach = "-"
        if "updates_to_target" in row:
            median = row["updates_to_target_median"]
            per_seed = ", ".join("not reached" if r is None else str(r) for r in row["updates_to_target"])
            reach = f"{'not reached' if median is None else f'{median:g}'}; {per_seed}"
        costs = " / ".join("-" if row.get(f"{unit}_to_target_median") is None
                           else f"{row[f'{unit}_to_target_median']:.4g}" for unit in ("episodes", "seconds"))
        lines.append(
            f"| {method} | {_number(row['validated_mean'])} [{_number(row['ci_low'])}, {_number(row['ci_high'])}] "
            f"({row['n']}) | {_numbers(row['validated'])} | {_numbers(row['tuning_values'])} "
            f"| {_numbers(row['updates_spent'])} | {reach} | {costs} "
            f"| {_numbers(row['tuning_run_s'], 0)} / {_numbers(row['validation_run_s'], 0)} |")
    return "\n".join(lines)


def studies_table(studies: list[dict[str, Any]]) -> str:
    lines = ["| study | trials: complete (in the KL budget) / pruned / failed | PPO updates | chosen trial "
             "| its tuning value | validated mean [95% CI] (runs; in the KL budget) | updates to within 5% of the best "
             "| run s: tuning / validation |", "|---|---|---|---|---|---|---|---|"]
    for study in studies:
        count = {state: sum(t["state"] == state for t in study["trials"]) for state in ("COMPLETE", "PRUNED", "FAIL")}
        counts = f"{count['COMPLETE']} ({sum(t['feasible'] for t in study['trials'])}) / {count['PRUNED']} / " \
                 f"{count['FAIL']}"
        validation = study["validation"]
        mean, low, high = mean_interval(study["validated_values"])
        reach = study["updates_to_target"]
        shown = "-" if study["method"] not in SEARCHES else "not reached" if reach is None else str(reach)
        runs = f"{len(study['validated_values'])}; {validation.get('feasible_runs', '-')}"
        lines.append(f"| {study['name']} | {counts} | {study['updates_spent']} | {validation.get('trial', '-')} "
                     f"| {_number(validation.get('tuning_value'))} | {_number(mean)} [{_number(low)}, "
                     f"{_number(high)}] ({runs}) | {shown} "
                     f"| {study['run_s']:.0f} / {_number(validation.get('run_s'), 0)} |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tuning_quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=QUICKSTART,
                        help="The study file whose searches are compared (default studies/quickstart.yaml; "
                             "another runs only the searches).")
    parser.add_argument("--budget-updates", type=int, default=None,
                        help=f"PPO updates per default/random study (default {DEFAULT_BUDGET}, or another --study's "
                             f"n_trials x updates per trial; --quick {QUICK['budget_updates']}).")
    parser.add_argument("--sampler-seeds", type=int, default=None,
                        help=f"default and random studies each (default {FULL['sampler_seeds']}).")
    parser.add_argument("--task-seed", type=int, default=None,
                        help="Run every study on this draw of the built-in task (the config field task_seed).")
    parser.add_argument("--validation-seeds", type=int, default=None, help="Fresh seeds per chosen config (default 5).")
    parser.add_argument("--eval-samples", type=int, default=None, metavar="N",
                        help="Each validation run's held-out evaluations draw N responses per prompt, as ppo-tune "
                             "validate --eval-samples (default: the study's num_eval_samples).")
    parser.add_argument("--workers", type=int, default=None,
                        help=f"Studies run at once, one CPU thread each (default {FULL['workers']}; --quick "
                             f"{QUICK['workers']}).")
    parser.add_argument("--work-dir", default=None, help="An empty directory for the study files and databases.")
    parser.add_argument("--resume", action="store_true",
                        help="Go on with the interrupted run in --work-dir (the same command otherwise): studies "
                             "that spent their budget and validation runs that finished are kept, the rest run.")
    parser.add_argument("--frontier", action="store_true",
                        help="Also run the frontier-guided search (sampler: {name: frontier}) at half the budget, "
                             "paired with random search at the full one.")
    parser.add_argument("--methods", nargs="+", choices=SEARCHES + FIXED, default=None, metavar="METHOD",
                        help=f"Run only these methods' studies, of {', '.join(SEARCHES + FIXED)} (default: all but "
                             "frontier, which --frontier adds; naming it here implies --frontier).")
    add_quick_argument(parser)
    parser.add_argument("--out", default=None, help="Results file (default "
                                                    "benchmarks/results/tuning_quality/tuning_quality.json; "
                                                    "--quick: a temporary directory).")
    return parser


def _read_study(parser: argparse.ArgumentParser,
                args: argparse.Namespace) -> tuple[dict[str, Any], list[str], int | None]:
    """The study file the searches run (``--study``), the guidance's notes (the quickstart's only), and the budget
    that another study brings (None: the quickstart's figures). Another study runs only the searches: its
    ``--methods`` default to random and the frontier search, and a fixed configuration is refused."""
    if not args.study.is_file():
        parser.error(f"--study: no file {args.study}")
    definition = yaml.safe_load(args.study.read_text())
    if args.study.resolve() == QUICKSTART.resolve():
        return definition, guidance_base(definition)[1], None
    if args.methods is None:
        args.methods = ["random", "frontier"]
    fixed = [method for method in args.methods if method in FIXED]
    if fixed:
        parser.error(f"--methods {' '.join(fixed)}: the fixed configurations are the quickstart's; with --study "
                     f"{args.study} name only searches ({', '.join(SEARCHES)})")
    return definition, [], None if args.quick else study_budget(definition)


def _work_dir(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """The directory the studies go in, checked: --resume needs the interrupted run's, a new run an empty one."""
    if args.resume and args.work_dir is None:
        parser.error("--resume needs the --work-dir of the run to go on with")
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="ppo-tune-quality-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    if any(work_dir.glob("tq-*.db")) and not args.resume:
        parser.error(f"--work-dir {work_dir} holds tq-*.db studies already; give an empty directory, or --resume")
    return work_dir


def _write_studies(parser: argparse.ArgumentParser, definitions: list[dict[str, Any]], work_dir: Path,
                   settings: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each study's file written in ``work_dir`` and its job (file, name, storage, budget, validation seeds, their
    evaluation's responses per prompt); a resumed study defined otherwise is refused."""
    for definition in definitions:
        written = work_dir / f"{definition['name']}.yaml"
        # A study resumed under other settings would mix two experiments in one result.
        if written.exists() and yaml.safe_load(written.read_text()) != definition:
            parser.error(f"--resume: {written} is not the study these arguments define (another --task-seed, "
                         f"--budget-updates or --quick?); give the interrupted run's arguments")
    jobs = []
    for definition in definitions:
        path = work_dir / f"{definition['name']}.yaml"
        path.write_text(yaml.safe_dump(definition, sort_keys=False))
        budget = budget_of(method_of(definition["name"]), settings["budget_updates"])
        jobs.append((str(path), definition["name"], definition["storage"], budget, settings["validation_seeds"],
                     settings["eval_samples"]))
    return jobs


def _print_report(settings: dict[str, Any], reference: dict[str, Any], total_wall: float, resumed: bool,
                  table: str, pairs: dict[str, Any], frontier_pairs: dict[str, Any] | None, per_study: str) -> None:
    print(f"Budget {settings['budget_updates']} PPO updates per default/random study; {settings['sampler_seeds']} "
          f"sampler seed(s); {settings['validation_seeds']} validation seeds per chosen config; best tuning value of "
          f"any default/random study {_number(reference['best_tuning_value'])} (5% below: "
          f"{_number(reference['threshold'])}); "
          f"wall {total_wall / 60:.1f} min ({settings['workers']} worker(s))"
          f"{', this call of a resumed run' if resumed else ''}.\n")
    print(table + "\n")
    if pairs["sampler_seeds"]:
        print(f"Paired by sampler seed, default minus random, validated held-out gold: "
              f"{_numbers(pairs['validated_difference'])}; mean {_number(pairs['mean'])} "
              f"[{_number(pairs['ci_low'])}, {_number(pairs['ci_high'])}] (95% t interval)\n")
    if frontier_pairs is not None:
        print(f"Paired by sampler seed, frontier at {FRONTIER_SHARE:.0%} of the budget minus random at all of it, "
              f"validated held-out gold: {_numbers(frontier_pairs['validated_difference'])}; mean "
              f"{_number(frontier_pairs['mean'])} [{_number(frontier_pairs['ci_low'])}, "
              f"{_number(frontier_pairs['ci_high'])}] (95% t interval)\n")
    print(per_study)


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    for name in FULL:  # the counts: a run of none of them is no run
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1, got {value}")
    if args.eval_samples is not None and args.eval_samples < 1:
        parser.error(f"--eval-samples: must be at least 1, got {args.eval_samples}")
    out = results_path(args.out, RESULTS / "tuning_quality" / "tuning_quality.json", args.quick)
    quickstart, notes, own_budget = _read_study(parser, args)
    settings = {**(QUICK if args.quick else FULL), **({} if own_budget is None else {"budget_updates": own_budget}),
                **{k: v for k, v in vars(args).items() if k in FULL and v is not None},
                "eval_samples": args.eval_samples}
    work_dir = _work_dir(parser, args)
    started = time.perf_counter()
    facts = machine_facts("cpu")
    overrides = {**(QUICK_BASE if args.quick else {}),
                 **({} if args.task_seed is None else {"task_seed": args.task_seed})}
    if args.methods is not None and "frontier" in args.methods:
        args.frontier = True
    definitions = study_definitions(quickstart, work_dir, settings["sampler_seeds"], overrides, args.frontier,
                                    args.methods)
    for note in notes:
        print(note, file=sys.stderr)
    jobs = _write_studies(parser, definitions, work_dir, settings)
    studies: list[dict[str, Any]] = []
    for definition, result in zip(definitions, run_jobs(tune_and_validate, jobs, settings["workers"]), strict=True):
        name = definition["name"]
        seed = definition["sampler"]["seed"] if method_of(name) in SEARCHES else None
        studies.append({"name": name, "method": method_of(name), "sampler_seed": seed,
                        "storage": definition["storage"], "definition": definition, **result})
    methods, reference = summarise(studies, settings["validation_seeds"])
    pairs = paired(studies)
    frontier_pairs = paired(studies, "frontier") if args.frontier else None
    total_wall = time.perf_counter() - started
    table, per_study = markdown_table(methods), studies_table(studies)
    _print_report(settings, reference, total_wall, args.resume, table, pairs, frontier_pairs, per_study)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe({
        "command": command_line("benchmarks.tuning_quality", argv),
        "machine": facts,
        "settings": {**settings, "threads_per_study": 1, "quick": args.quick,
                     "work_dir": str(work_dir), "resume": args.resume},
        "objective": quickstart["objectives"][0], "notes": notes, "reference": reference,
        "wall_s": {"total": round(total_wall, 1)},
        "sampler_seeds": sorted({s["sampler_seed"] for s in studies if s["sampler_seed"] is not None}),
        "task_seed": args.task_seed, "paired": pairs,
        "paired_frontier": frontier_pairs, "frontier_share": FRONTIER_SHARE if args.frontier else None,
        "methods": methods, "table": table, "studies_table": per_study,
        "studies": studies,
    }), indent=2, default=str))
    print(f"\nwrote {out}", file=sys.stderr)

if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    run_as_process(main)
