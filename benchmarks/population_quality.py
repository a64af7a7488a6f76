"""Does a population beat the default search at equal compute? Six arms on the graph task, each judged by its winner
replayed from scratch on fresh seeds, paired by sampler seed.

    python -m benchmarks.population_quality [--sampler-seeds 17] [--validation-seeds 5] [--task-seed T]
                                            [--workers 2] [--work-dir DIR] [--resume] [--quick]

The arms share the quickstart's base, objective (held-out ``eval/gold_score``, the mean of the last two evaluations),
KL budget and search space (``studies/quickstart.yaml``), with two changes a population needs and every arm gets, so
that the arms differ in how they search and nothing else: the rollout is fixed at 32 episodes (48 updates a run: a
population ranks its members at the same update) and the evaluations come every 12 updates (the quickstart's
quarters, as a whole number of updates):

- ``population``: 8 members ranked every 12 updates (4 generations), perturbing the learning rate and the KL
  coefficient (``population: {size: 8, segment: 12}``), its first generation from the default sampler;
- ``select_only``: the same population with its perturbations off (``perturb: [1.0], resample: 0``): what copying
  alone buys, the control that tells a schedule from picking a lucky run;
- ``default``: the quickstart's search as shipped, with its seed policy and KL guard;
- ``random``: random search, no pruner, no KL guard, one seed per configuration;
- ``backtrack``: the ``population`` arm going back to its elite, the best earlier segment end of any lineage
  (``backtrack: 1.0``, Orion's ``BacktrackExploit`` rule: a recipient goes back whenever the elite is ahead of the
  generation's best donor), a fifth arm registered after the first run's result (the results page says when);
- ``proxy``: the ``population`` arm ranking its members on the proxy it trains on (``exploit_on: eval/score``), its
  winner still chosen on gold: what ranking on the held-out gold buys, the sixth arm (registered as the fifth was).

Equal compute: every arm trains 8 runs' worth of updates (384), and each evaluates at the same updates with the same
responses, so updates, evaluation responses and (at one thread a trial) seconds match; the searches stop once their
trials have run 384 updates (``benchmarks.tuning_quality.BudgetStop``). The one exception is ``backtrack``: a member
that goes back trains from the elite's update to its generation's stop, so that arm may spend more (its
``updates_spent`` says how many, and more updates favour it). Each arm's winner (``ppo-tune validate
--top-k 1``: for a population, its winning member's schedule, replayed from update 0) is retrained on the same fresh
seeds, and the arms are compared by sampler seed: per seed, the difference of validated means, their mean and its 95%
t interval.

The power of each comparison is computed before the run from the number of pairs (:func:`power`), for a difference of
0.02 gold and the paired standard deviation of 0.027 that ``benchmarks.tuning_quality`` measured between two searches
of this task: 17 pairs give 80%. The rule registered in advance (benchmarks/results/population_quality/README.md) is
that a population becomes the default only where its paired interval against the default lies above zero at a design
with that power, on task seeds it was not designed on.

``--study FILE`` runs the arms on another study file instead (``studies/text.yaml``: SmolLM2 on the text task), as
it stands: its base, objective, constraints and space, each run as long as its base says, a population ranked at its
``eval_steps`` (which must divide the run into whole segments); under ``--quick`` its task is the text task's tiny
variant with its companion policy. Its studies are named after it (``pq-<name>-<arm>-s<seed>``).

``--arms`` runs some of the arms only (``--arms population default``: the primary comparison, at half the compute a
pair). ``--resume`` goes on with an interrupted run in its ``--work-dir``: finished studies are read, an unfinished one
continues, and finished validation runs are kept. ``--quick`` is a smoke run of every step: 2 members of 2 updates,
1 sampler seed, 1 validation seed.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common.json_safe import json_safe
from benchmarks.common.machine import machine_facts
from benchmarks.common.work_dir import add_work_dir_arguments, prepared_work_dir
from benchmarks.real_model_study import QUICK_STUDY
from benchmarks.tuning_quality import QUICKSTART, RESULTS, run_jobs, tune_and_validate, validate
from ppo_core.metric_names import EVAL_SCORE
from tools.provenance import command_line
from tools.quick_mode import add_quick_argument, results_path
from tuner.production.confidence import mean_interval

ARMS = ("population", "select_only", "default", "random", "backtrack", "proxy")
POPULATIONS = ("population", "select_only", "backtrack", "proxy")
COMPARISONS = (("population", "default"), ("population", "random"), ("population", "select_only"),
               ("default", "random"), ("backtrack", "default"), ("backtrack", "population"), ("population", "proxy"))
"""The registered comparisons, (ours, theirs): each is reported where both arms ran."""
MEMBERS, SEGMENT, UPDATES = 8, 12, 48
SIGMA_D, DELTA = 0.027, 0.02
"""The paired standard deviation of two searches' validated means that tuning_quality measured on this task, and
the difference the design must see."""
FULL = {"sampler_seeds": 17, "validation_seeds": 5, "workers": 2}
QUICK = {"sampler_seeds": 1, "validation_seeds": 1, "workers": 1}
QUICK_BASE = {"total_episodes": 64, "eval_steps": 1, "num_eval_samples": 2}
"""--quick: 2 updates a run (rollouts of 32), an evaluation at each of 2 responses a held-out prompt."""


def power(pairs: int, delta: float = DELTA, sigma: float = SIGMA_D, alpha: float = 0.05) -> float:
    """The power of a two-sided paired t-test on ``pairs`` pairs at level ``alpha`` for a mean difference ``delta``
    with standard deviation ``sigma``: P(|T| > t_{1-alpha/2, n-1}) for T noncentral t with n - 1 degrees of freedom
    and noncentrality delta sqrt(n) / sigma."""
    from scipy import stats  # type: ignore[import-untyped]

    if pairs < 2:
        return float("nan")
    freedom, shift = pairs - 1, delta * math.sqrt(pairs) / sigma
    critical = stats.t.ppf(1 - alpha / 2, freedom)
    return float(stats.nct.sf(critical, freedom, shift) + stats.nct.cdf(-critical, freedom, shift))


@dataclass(frozen=True)
class Design:
    """What every arm of one run shares: the base and space, a population's segment and a run's updates, the prefix
    of its studies' names."""

    base: dict[str, Any]
    space: dict[str, Any]
    segment: int
    updates: int
    prefix: str


def design(definition: dict[str, Any], own: bool, quick: bool) -> Design:
    """The arms' shared design on the quickstart (``own`` False: the rollout fixed at 32 episodes, evaluations every
    :data:`SEGMENT` updates) or on a study file of the user's as it stands (ranked at its ``eval_steps``); under
    ``quick`` runs of 2 updates ranked at each (a study file of the user's on the text task's tiny variant)."""
    from tuner.search.kl_model import mass_factors

    base, space = dict(definition["base"]), dict(definition["search_space"])
    if not own:
        base.update({"gradient_accumulation_steps": 2, "eval_steps": SEGMENT})
        space.pop("rollout_batch_size", None)
        segment, updates, prefix = SEGMENT, UPDATES, "pq"
    else:
        updates = int(mass_factors({}, base)["updates"])
        every = base.get("eval_steps")
        if not isinstance(every, int) or every < 1 or updates % every:
            raise ValueError(f"--study: its base's eval_steps ({every}) must be a whole number of updates that "
                             f"divides the run's {updates}: a population is ranked at each evaluation")
        segment, prefix = every, f"pq-{definition['name']}"
    if quick:
        if own:  # the tiny variant's own policy: the study's model path goes
            base = {key: value for key, value in {**base, **QUICK_STUDY["base"], "eval_steps": 1}.items()
                    if value is not None}
        else:
            base.update(QUICK_BASE)
        segment, updates = 1, 2
    return Design(base, space, segment, updates, prefix)


def arm_studies(definition: dict[str, Any], work_dir: Path, seed: int, task_seed: int | None, quick: bool,
                own: bool = False) -> dict[str, dict[str, Any]]:
    """Each arm's study file for sampler seed ``seed`` (see the module's docstring), each in its own SQLite file:
    on the quickstart, or (``own``) on the study file ``definition`` as it stands."""
    shape = design(definition, own, quick)
    base = {**shape.base, **({} if task_seed is None else {"task_seed": task_seed})}
    shared = {**copy.deepcopy(definition), "base": base, "search_space": shape.space}
    for key in ("n_trials", "timeout"):
        shared.pop(key, None)
    population = {"size": 2 if quick else MEMBERS, "segment": shape.segment, "seed": seed}
    # The study's own sampler and its settings (the text study's within_budget), drawn at this pair's seed.
    sampler = {**definition.get("sampler", {}), "seed": seed}
    studies = {
        "population": {**shared, "sampler": sampler, "population": population,
                       "seed_policy": {"name": "single"}},
        "select_only": {**shared, "sampler": sampler, "seed_policy": {"name": "single"},
                        "population": {**population, "perturb": [1.0], "resample": 0.0}},
        "backtrack": {**shared, "sampler": sampler, "seed_policy": {"name": "single"},
                      "population": {**population, "backtrack": 1.0}},
        "proxy": {**shared, "sampler": sampler, "seed_policy": {"name": "single"},
                  "population": {**population, "exploit_on": EVAL_SCORE}},
        "default": {**shared, "sampler": sampler},
        "random": {**shared, "sampler": {"name": "random", "seed": seed}, "pruner": {"name": "none"},
                   "seed_policy": {"name": "single"},
                   "kl_guard": {**definition.get("kl_guard", {}), "enabled": False}},
    }
    for arm, study in studies.items():
        study["name"] = f"{shape.prefix}-{arm}-s{seed}"
        study["storage"] = f"sqlite:///{work_dir / study['name']}.db"
    return studies


def copy_gaps(trials: list[Any]) -> list[float]:
    """For every copy a population made (a segment of origin ``exploit``): the donor's first objective minus the
    recipient's own at the ranking that made it (each the value of its segment ending there), where both completed.
    Ranked on its first objective with no margin a population copies only donors ahead (every gap >= 0); a gap below
    0 is a copy of a member behind on the objective, which a population ranked on another metric can make."""
    from optuna.trial import TrialState

    from tuner.store.segments import generation_slots, segment_of

    by_number = {t.number: t for t in trials}
    gaps = []
    for trial in trials:
        segment = segment_of(trial)
        if segment is None or segment.origin != "exploit" or segment.parent is None:
            continue
        own = generation_slots(trials, segment.generation - 1).get(segment.member)
        donor = by_number.get(segment.parent)
        if own is not None and donor is not None and all(t.state == TrialState.COMPLETE and t.values
                                                          for t in (own, donor)):
            gaps.append(donor.values[0] - own.values[0])
    return gaps


def copy_summary(studies: list[dict[str, Any]]) -> dict[str, Any]:
    """An arm's copies over its studies (:func:`copy_gaps`): how many, how many of a donor behind on the objective,
    and the donors' mean lead."""
    gaps = [gap for study in studies for gap in study.get("copy_gaps", [])]
    return {"copies": len(gaps), "behind": sum(gap < 0 for gap in gaps),
            "mean_gap": statistics.fmean(gaps) if gaps else math.nan}


def feasible_summary(studies: list[dict[str, Any]]) -> dict[str, Any]:
    """An arm's validation runs over its studies: how many ended, and how many of those kept the study's constraints
    (its KL budget). A winner whose replays pass the budget gains gold the budget was meant to forbid, so the share
    is read beside the comparison of validated means, which counts every run."""
    validations = [study.get("validation", {}) for study in studies]
    runs = sum(v.get("n", 0) for v in validations)
    feasible = sum(v.get("feasible_runs") or 0 for v in validations)
    return {"runs": runs, "feasible": feasible, "share": feasible / runs if runs else math.nan}


def trained_updates(trials: list[Any]) -> int:
    """The PPO updates a population's trials trained. A segment's KL history includes the updates it copied from its
    lineage, so each counts from its segment's start; a segment pruned before it trained (queued twice, or nothing
    queued for its worker) trained none, though it starts past update 0."""
    from tuner.store.segments import segment_of
    from tuner.study.reports import updates_run

    return sum(max(0, updates_run(t) - (segment.start if (segment := segment_of(t)) is not None else 0))
               for t in trials)


def run_population(path: str, name: str, storage: str, validation_seeds: int) -> dict[str, Any]:
    """A population study run to its end in this process (one thread a trial; a finished one is only read), then its
    winner validated."""
    import optuna

    from ppo_core.models.quiet import quiet_hugging_face
    from tuner.run.worker import run_worker
    from tuner.study.study_file import load_study_spec

    quiet_hugging_face()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_study_spec(path)
    started = time.perf_counter()
    run_worker(spec, None, None, threads=1)
    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    gaps = copy_gaps(trials)
    return {"wall_s": round(time.perf_counter() - started, 1), "updates_spent": trained_updates(trials),
            "copies": len(gaps), "copies_behind": sum(gap < 0 for gap in gaps), "copy_gaps": gaps,
            "run_s": round(sum(t.duration.total_seconds() for t in trials if t.duration), 1),
            "validation": validate(name, storage, validation_seeds)}


def run_arm(arm: str, path: str, name: str, storage: str, budget: int, validation_seeds: int) -> dict[str, Any]:
    """One arm's study, tuned (or trained, for a population) and then validated, in this process."""
    if arm in POPULATIONS:
        return run_population(path, name, storage, validation_seeds)
    result = tune_and_validate(path, name, storage, budget, validation_seeds)
    return {**result, "updates_spent": sum(t["updates"] for t in result["trials"])}


def validated_mean(result: dict[str, Any], within_budget: bool = False) -> float | None:
    """The mean first objective of a winner's completed validation runs; ``within_budget``, of those that kept the
    study's constraints only (a run stored before runs carried ``feasible`` counts as kept)."""
    values = [run["value"] for run in result["validation"].get("runs", [])
              if run["state"] == "COMPLETE" and run["value"] is not None
              and (not within_budget or run.get("feasible", True))]
    return statistics.fmean(values) if values else None


def compared(results: dict[str, dict[int, dict[str, Any]]], ours: str, theirs: str,
             within_budget: bool = False) -> dict[str, Any]:
    """``ours`` against ``theirs`` by sampler seed: per seed the difference of validated means (``within_budget``:
    of the runs that kept the study's constraints); their mean with its 95% t interval, their SD, and the power
    (:func:`power`) at that many pairs, for the planned SD and for the one measured."""
    seeds = sorted(set(results.get(ours, {})) & set(results.get(theirs, {})))
    differences = []
    for seed in seeds:
        mine = validated_mean(results[ours][seed], within_budget)
        other = validated_mean(results[theirs][seed], within_budget)
        if mine is not None and other is not None:
            differences.append(mine - other)
    mean, low, high = mean_interval(differences)
    sd = statistics.stdev(differences) if len(differences) > 1 else math.nan
    return {"pairs": len(differences), "differences": differences, "mean": mean, "ci_low": low, "ci_high": high,
            "sd": sd, "power_for_0.02": power(len(differences)),
            "power_at_observed_sd": power(len(differences), sigma=sd) if math.isfinite(sd) and sd > 0 else math.nan}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.population_quality", description=__doc__.split("\n")[0])
    parser.add_argument("--sampler-seeds", type=int, default=None, help="Pairs: sampler seeds (default 17).")
    parser.add_argument("--validation-seeds", type=int, default=None, help="Fresh seeds per winner (default 5).")
    parser.add_argument("--task-seed", type=int, default=None, help="Another draw of the graph task (task_seed).")
    parser.add_argument("--study", type=Path, default=QUICKSTART,
                        help="The study file the arms share (default studies/quickstart.yaml, with the rollout and "
                             "evaluations fixed as above; another as it stands).")
    parser.add_argument("--workers", type=int, default=None, help="Studies at a time (default 2).")
    add_work_dir_arguments(parser, "The studies' files and databases")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), metavar="ARM",
                        help="Run only these arms (default all six); comparisons need both of their arms.")
    parser.add_argument("--out", default=None, help="Results file (default "
                        "benchmarks/results/population_quality/population_quality.json).")
    add_quick_argument(parser)
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = _parser()
    args = parser.parse_args(argv)
    sizes = {**(QUICK if args.quick else FULL), **{key: value for key, value in (
        ("sampler_seeds", args.sampler_seeds), ("validation_seeds", args.validation_seeds),
        ("workers", args.workers)) if value is not None}}
    if not args.study.is_file():
        parser.error(f"--study: no file {args.study}")
    definition = yaml.safe_load(args.study.read_text())
    own = args.study.resolve() != QUICKSTART.resolve()
    try:
        shape = design(definition, own, args.quick)
    except ValueError as error:
        parser.error(str(error))
    budget = (2 if args.quick else MEMBERS) * shape.updates
    out = results_path(args.out, RESULTS / "population_quality" / "population_quality.json", args.quick)
    work_dir = prepared_work_dir(args, out.parent / "work")
    jobs, keys = [], []
    for seed in range(sizes["sampler_seeds"]):
        for arm, study in arm_studies(definition, work_dir, seed, args.task_seed, args.quick, own).items():
            if arm not in args.arms:
                continue
            path = work_dir / f"{study['name']}.yaml"
            path.write_text(yaml.safe_dump(study, sort_keys=False))
            jobs.append((arm, str(path), study["name"], study["storage"], budget, sizes["validation_seeds"]))
            keys.append((arm, seed))
    started = time.perf_counter()
    done = run_jobs(run_arm, jobs, sizes["workers"])
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for (arm, seed), result in zip(keys, done, strict=True):
        results.setdefault(arm, {})[seed] = {**result, "validated_mean": validated_mean(result)}
    pairs = [(ours, theirs) for ours, theirs in COMPARISONS if ours in results and theirs in results]
    comparisons = {f"{ours}-{theirs}": compared(results, ours, theirs) for ours, theirs in pairs}
    # Read beside the registered comparisons, not instead of them: each winner's runs within the study's budget only.
    within_budget = {f"{ours}-{theirs}": compared(results, ours, theirs, within_budget=True) for ours, theirs in pairs}
    copies = {arm: copy_summary(list(results[arm].values())) for arm in POPULATIONS if arm in results}
    feasible = {arm: feasible_summary(list(by_seed.values())) for arm, by_seed in results.items()}
    report = {
        "command": command_line("benchmarks.population_quality", argv), "machine": machine_facts("cpu"),
        "settings": {**sizes, "arms": list(args.arms), "budget_updates": budget, "task_seed": args.task_seed,
                     "study": str(args.study),
                     "quick": args.quick, "members": MEMBERS, "segment": shape.segment, "sigma_d": SIGMA_D,
                     "delta": DELTA,
                     "power_planned": power(sizes["sampler_seeds"])},
        "wall_s": round(time.perf_counter() - started, 1),
        "comparisons": comparisons,
        "comparisons_within_budget": within_budget,
        "copies": copies,
        "feasible": feasible,
        "arms": {arm: {str(seed): result for seed, result in by_seed.items()} for arm, by_seed in results.items()},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(report), indent=2) + "\n")
    for arm, summary in copies.items():
        print(f"{arm}: {summary['copies']} copies, {summary['behind']} of a donor behind on the objective")
    for arm, summary in feasible.items():
        print(f"{arm}: {summary['feasible']} of {summary['runs']} validation runs within the study's constraints")
    for name, comparison in comparisons.items():
        print(f"{name}: {comparison['mean']:+.4f} [{comparison['ci_low']:+.4f}, {comparison['ci_high']:+.4f}] over "
              f"{comparison['pairs']} pairs (power for 0.02: {comparison['power_for_0.02']:.2f})")
    for name, comparison in within_budget.items():
        print(f"{name}, the runs within the study's constraints only: {comparison['mean']:+.4f} "
              f"[{comparison['ci_low']:+.4f}, {comparison['ci_high']:+.4f}] over {comparison['pairs']} pairs")
    print(f"results: {out}")
    return report


if __name__ == "__main__":
    main()
