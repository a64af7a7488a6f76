"""The real-model study, end to end: tune a study file with the CLI, validate its winner on fresh seeds, and set the
winner beside the untuned model and TRL GRPOConfig's defaults on the same seeds, paired seed by seed.

    python -m benchmarks.real_model_study --work-dir DIR      # benchmarks/studies/smollm2.yaml: 2 workers, 3 seeds
    python -m benchmarks.real_model_study --work-dir DIR                  # again: goes on where it stopped
    python -m benchmarks.real_model_study --quick --out /tmp/rms.json     # the companion policy, a few updates

Each step resumes: the study and its validation live in ``DIR/study.db`` (``ppo-tune run`` and ``ppo-tune
validate`` go on with what is stored there), and each baseline run is appended to ``DIR/baselines.jsonl`` as it
finishes, so an interrupted measurement loses at most the runs in flight. The seconds reported are each step's wall
time summed over the sessions that ran it (``DIR/steps.json``).

The three arms, on each fresh seed s the validation drew (so the held-out prompts and the evaluation's sampling
streams are the same for all three):

- **tuned**: the study's winner, as ``ppo-tune validate NAME --top-k 1`` retrains it on seed s;
- **TRL GRPO defaults**: the study's base with the searched knobs at TRL GRPOConfig's defaults, read from the
  installed TRL (``learning_rate`` 1e-6, ``beta`` 0.0), trained on seed s;
- **untuned**: the starting policy itself, evaluated (``PPOTrainer.evaluate``) at the updates where a trained run
  evaluates, on seed s;
- **guidance middle**: the study's base at the seed guidance's starting point (:data:`GUIDANCE_MIDDLE`), trained on
  seed s (not in a re-measure, whose arms stay the three its earlier runs have).

Each arm's score is the study's first objective (held-out gold, reduced as the study reduces it); the report gives
tuned minus each baseline, per seed and as a mean with its 95% t interval.

**Re-measured with a larger held-out evaluation** (``--eval-samples N --seeds K``, after the steps above): the
validated winner and both baselines run again in this benchmark's runner, on K further seeds from ``--first-seed``,
with every held-out evaluation drawing N responses per prompt instead of the study's ``num_eval_samples``. The study
keeps its cheap evaluation for choosing; this measures what it chose with less of the evaluation's noise. On
SmolLM2, 4x the responses cut the untuned arm's seed-to-seed SD from 0.013 to 0.004, while a trained run still varied
by 0.019 from its training (benchmarks/README.md, "History: the real-model study on the first text task", the fourth
look).
``--eval-prompts P`` widens the prompts too, up to the task's held-out split. The runs are appended to
``DIR/remeasure_PxN.jsonl`` (or ``--runs FILE``) as they finish, so this step resumes too.

A re-measure may take its winner from an earlier result instead (``--winner-from RESULT.json``, one this benchmark
wrote): its study definition and validated configuration are read from that file and nothing is tuned or validated
again. With ``--runs`` naming a file kept in the repository, a long re-measure resumes on another machine from the
runs committed so far (the sixth look's, benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common.machine import cpu_model, machine_facts
from benchmarks.common.pool import each_result
from ppo_core.config.ppo_config import PPOConfig
from tools.provenance import commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STUDY = ROOT / "benchmarks" / "studies" / "smollm2.yaml"
QUICK_STUDY: dict[str, Any] = {
    "n_trials": 2, "timeout": None,
    "base": {"task": "fortunes_tiny", "sft_model_path": None, "total_episodes": 16, "num_eval_prompts": 4,
             "num_eval_samples": 1, "num_sample_generations": 0},
}
"""--quick: the study file's search on the text task's tiny variant and its companion policy (no SmolLM2), two
trials of 2 updates; one validation seed."""
FIRST_REMEASURE_SEED = 2000
"""--eval-samples' first seed: past the validation's (tuner.production.validation.FIRST_VALIDATION_SEED, 1000 on), so
that the re-measure's seeds are fresh for the winner as well."""
TRL_KNOBS = ("learning_rate", "beta")
"""The knobs the TRL-defaults arm takes from TRL's GRPOConfig; every other knob is the study's base."""
GUIDANCE_MIDDLE: dict[str, Any] = {"learning_rate": 7.1e-6, "beta": 0.045, "cliprange": 0.2}
"""The seed guidance's starting point (../shared/seeds/ppo-hyperparameters-for-llms.txt): the geometric middles of
its recommended ranges, policy learning rate 1e-6 to 5e-5 (sqrt(5e-11) = 7.1e-6) and fixed KL coefficient 0.01 to
0.2 (sqrt(0.002) = 0.045), and its common starting clip of 0.2; every other knob is the study's base."""


def trl_grpo_defaults() -> dict[str, Any]:
    """TRL GRPOConfig's own defaults for :data:`TRL_KNOBS`, read from the installed TRL."""
    from trl import GRPOConfig

    defaults = {field.name: field.default for field in dataclasses.fields(GRPOConfig)}
    return {name: defaults[name] for name in TRL_KNOBS}


def study_file(source: Path, quick: bool) -> dict[str, Any]:
    """The study file as this benchmark runs it: the file itself, or under --quick its tiny version."""
    definition = yaml.safe_load(source.read_text())
    if quick:
        base = {**definition["base"], **QUICK_STUDY["base"]}
        definition = {**definition, **QUICK_STUDY, "base": {k: v for k, v in base.items() if v is not None}}
        definition = {k: v for k, v in definition.items() if v is not None}
    return definition


class Steps:
    """Each step's wall seconds, summed over the sessions that ran it, and whether it finished: ``steps.json``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.record: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}

    def done(self, name: str, seeds: int | None = None) -> bool:
        """Whether an earlier session finished the step, for at least ``seeds`` seeds where the step has seeds."""
        entry = self.record.get(name, {})
        return bool(entry.get("done")) and (seeds is None or int(entry.get("seeds", 0)) >= seeds)

    def seconds(self, name: str) -> float:
        return float(self.record.get(name, {}).get("seconds", 0.0))

    def run(self, name: str, action: Callable[[], None], seeds: int | None = None) -> None:
        """Run ``action`` unless an earlier session finished it (for at least ``seeds`` seeds: a step done for 3
        runs again for 10, and the action keeps what it finished before); its seconds count even when it is
        interrupted, summed over the sessions."""
        if self.done(name, seeds):
            return
        started, finished = time.perf_counter(), False
        try:
            action()
            finished = True
        finally:
            entry = self.record.setdefault(name, {"seconds": 0.0})
            entry["seconds"] = round(entry["seconds"] + time.perf_counter() - started, 1)
            entry["done"] = finished
            if seeds is not None and finished:
                entry["seeds"] = seeds
            self.path.write_text(json.dumps(self.record, indent=1))


def cli(*args: str) -> str:
    """Run ``ppo-tune ARGS`` as a user would; its standard output. A failing command stops the benchmark with its
    message, since a step that did not succeed must not be reported."""
    command = [sys.executable, "-m", "ppo_tune", *args]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:])} exited with {done.returncode}")
    return done.stdout


@dataclasses.dataclass(frozen=True)
class BaselineJob:
    arm: str
    seed: int
    values: dict[str, Any]
    objective: dict[str, Any]
    train: bool


def run_baseline(job: BaselineJob) -> dict[str, Any]:
    """One baseline run on one thread: trained (``job.train``) or only evaluated where a trained run would be; its
    score under the study's objective and its final held-out KL."""
    import torch

    from ppo_core import PPOTrainer
    from ppo_core.config.io import build_config
    from ppo_core.models.quiet import quiet_hugging_face
    from ppo_core.run.evaluation import is_evaluation_update
    from tuner.study.reduction import reduce_history
    from tuner.study.spec import Objective

    torch.set_num_threads(1)
    quiet_hugging_face()
    started = time.perf_counter()
    trainer = PPOTrainer(build_config({**job.values, "seed": job.seed, "num_sample_generations": 0}))
    if job.train:
        history = [m for m in trainer.train().metrics if "eval/gold_score" in m]
    else:
        updates = [u for u in range(1, trainer.num_updates + 1)
                   if is_evaluation_update(u, trainer.num_updates, trainer.eval_interval)]
        history = [trainer.evaluate(u) for u in updates]
    objective = Objective(**job.objective)
    score = reduce_history([float(m[objective.metric]) for m in history], objective)
    return {"arm": job.arm, "seed": job.seed, "score": score, "final_kl": float(history[-1]["eval/kl"]),
            "updates": trainer.num_updates if job.train else 0, "seconds": round(time.perf_counter() - started, 1),
            "evaluated": [trainer.config.num_eval_prompts, trainer.config.num_eval_samples], "cpu": cpu_model()}


def run_baselines(jobs: Sequence[BaselineJob], out: Path, workers: int) -> None:
    """Each job not yet in ``out`` (JSON lines), appended as it finishes, ``workers`` at a time
    (:func:`benchmarks.common.pool.each_result`)."""
    done = {(r["arm"], r["seed"]) for r in read_lines(out)}
    todo = [job for job in jobs if (job.arm, job.seed) not in done]
    if not todo:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    for record in each_result(run_baseline, [(job,) for job in todo], min(workers, len(todo))):
        with out.open("a") as handle:
            handle.write(json.dumps(record) + "\n")


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def paired(tuned: dict[int, float], other: dict[int, float]) -> dict[str, Any]:
    """Tuned minus the other arm on each seed both have, and the mean difference's 95% and 99% t intervals (the
    sixth look is judged on the 99%: benchmarks/README.md)."""
    from tuner.production.confidence import mean_interval

    seeds = sorted(set(tuned) & set(other))
    differences = [tuned[s] - other[s] for s in seeds]
    mean, low, high = mean_interval(differences)
    _, low99, high99 = mean_interval(differences, 0.99)
    return {"seeds": seeds, "differences": differences, "mean": mean, "ci_low": low, "ci_high": high,
            "ci99_low": low99, "ci99_high": high99}


def parse_arguments(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_model_study",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=DEFAULT_STUDY,
                        help="The study file (default benchmarks/studies/smollm2.yaml).")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="Where the study, its validation and the baselines are kept; run again to resume.")
    parser.add_argument("--workers", type=int, default=2, help="Workers of the study and the baselines (default 2).")
    parser.add_argument("--validation-workers", type=int, default=None,
                        help="Workers of the validation (default: one per seed, so that its runs share the cores "
                             "rather than wait for each other).")
    parser.add_argument("--seeds", type=int, default=None, help="Fresh validation seeds (default 3; --quick 1).")
    parser.add_argument("--eval-samples", type=int, default=None, metavar="N",
                        help="Re-measure the validated winner and both baselines in this benchmark's runner, every "
                             "held-out evaluation drawing N responses per prompt, on --seeds seeds from --first-seed.")
    parser.add_argument("--eval-prompts", type=int, default=None, metavar="P",
                        help="With --eval-samples: the held-out prompts each evaluation draws from (default: the "
                             "study's num_eval_prompts; the task's held-out split caps it).")
    parser.add_argument("--first-seed", type=int, default=FIRST_REMEASURE_SEED,
                        help=f"With --eval-samples: the first seed of the re-measure (default {FIRST_REMEASURE_SEED}, "
                             "past the validation's).")
    parser.add_argument("--winner-from", type=Path, default=None, metavar="RESULT",
                        help="With --eval-samples: re-measure the validated winner of RESULT (a JSON this benchmark "
                             "wrote), with its study definition; nothing is tuned or validated again.")
    parser.add_argument("--runs", type=Path, default=None, metavar="FILE",
                        help="With --eval-samples: the JSON-lines file the re-measure's runs are appended to and "
                             "resumed from (default DIR/remeasure_PxN.jsonl).")
    parser.add_argument("--out", default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if not args.study.is_file():
        parser.error(f"--study: no file {args.study}")
    for flag, value in (("--workers", args.workers), ("--validation-workers", args.validation_workers),
                        ("--seeds", args.seeds), ("--eval-samples", args.eval_samples),
                        ("--eval-prompts", args.eval_prompts)):
        if value is not None and value < 1:
            parser.error(f"{flag}: must be >= 1, got {value}")
    for flag, value in (("--eval-prompts", args.eval_prompts), ("--winner-from", args.winner_from),
                        ("--runs", args.runs)):
        if value is not None and args.eval_samples is None:
            parser.error(f"{flag}: only with --eval-samples (a re-measure); the study's own runs keep its file's")
    if args.winner_from is not None and not args.winner_from.is_file():
        parser.error(f"--winner-from: no file {args.winner_from}")
    return parser, args


def earlier_winner(path: Path, definition: dict[str, Any]) -> dict[str, Any] | str:
    """The validated winner recorded in an earlier result of this benchmark, or why it cannot be re-measured here:
    the file is not such a result, or it tuned another study than ``definition`` (then its arms would not pair)."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return f"--winner-from: {path} is not a result of this benchmark ({type(error).__name__})"
    if not isinstance(result, dict) or not isinstance(result.get("winner"), dict) \
            or not isinstance(result["winner"].get("config"), dict):
        return f"--winner-from: {path} holds no validated winner with its config"
    if result.get("study") != definition:
        return f"--winner-from: {path} tuned another study than --study's; give the study file it ran"
    return {**result["winner"], "from": {"path": str(path), "commit": result.get("commit")}}


@dataclasses.dataclass(frozen=True)
class Arms:
    """The runs this invocation adds beside the validation: their step's name in ``steps.json``, the JSON-lines file
    they are appended to, and the jobs; ``evaluation`` is the re-measure's held-out evaluation, else None."""

    step: str
    records: Path
    jobs: list[BaselineJob]
    evaluation: dict[str, int] | None


def arm_jobs(args: argparse.Namespace, definition: dict[str, Any], work: Path, tuned: dict[int, float],
             winner: dict[str, Any], trl_defaults: dict[str, Any], seeds: int) -> Arms:
    """The baselines on the validation's seeds, or under ``--eval-samples`` all three arms on the re-measure's."""
    base, objective = definition["base"], definition["objectives"][0]
    trl_values = {**base, **trl_defaults}
    if args.eval_samples is None:
        jobs = [BaselineJob("TRL GRPO defaults", seed, trl_values, objective, True) for seed in sorted(tuned)]
        jobs += [BaselineJob("untuned", seed, base, objective, False) for seed in sorted(tuned)]
        jobs += [BaselineJob("guidance middle", seed, {**base, **GUIDANCE_MIDDLE}, objective, True)
                 for seed in sorted(tuned)]
        return Arms("baselines", work / "baselines.jsonl", jobs, None)
    evaluation = {"num_eval_prompts": args.eval_prompts or base.get("num_eval_prompts", PPOConfig.num_eval_prompts),
                  "num_eval_samples": args.eval_samples}
    step = f"remeasure_{evaluation['num_eval_prompts']}x{args.eval_samples}"
    records = args.runs or work / f"{step}.jsonl"
    values = {"tuned": {**winner["config"], **evaluation}, "TRL GRPO defaults": {**trl_values, **evaluation},
              "untuned": {**base, **evaluation}}
    # Seed by seed, so that an interrupted re-measure leaves whole seeds, each with its three arms.
    jobs = [BaselineJob(arm, seed, arm_values, objective, arm != "untuned")
            for seed in range(args.first_seed, args.first_seed + seeds) for arm, arm_values in values.items()]
    return Arms(step, records, jobs, evaluation)


def main(argv: list[str] | None = None) -> None:
    parser, args = parse_arguments(argv)
    # Read first, so that a missing TRL stops the run now and not after the study (regression: a fresh install
    # without the trl extra tuned for 40 minutes, then failed with ModuleNotFoundError at the baselines).
    try:
        trl_defaults = trl_grpo_defaults()
    except ImportError:
        parser.error("TRL is not installed, and its GRPOConfig's defaults are one of the arms: "
                     "pip install 'ppo-tune[trl]'")
    seeds = args.seeds or (1 if args.quick else 3)
    out = results_path(args.out, RESULTS / "real_model_study" / "real_model_study.json", args.quick)
    work = args.work_dir or (out.parent / "real_model_study" if args.quick else None)
    if work is None:
        parser.error("--work-dir is needed for a full run (it is where the run resumes from)")
    work.mkdir(parents=True, exist_ok=True)
    definition = study_file(args.study, args.quick)
    name = str(definition["name"])
    written = work / "study.yaml"
    if written.exists() and yaml.safe_load(written.read_text()) != definition:
        parser.error(f"--work-dir {work} holds another study's run ({written} differs); give an empty directory")
    written.write_text(yaml.safe_dump(definition, sort_keys=False))
    steps = Steps(work / "steps.json")
    remeasure = args.eval_samples is not None
    if args.winner_from is not None:
        validated = earlier_winner(args.winner_from, definition)
        if isinstance(validated, str):
            parser.error(validated)
        tuned: dict[int, float] = {}
    else:
        tuned, validated = tune_and_validate(args, steps, work / "study.db", str(written), name, seeds)
    added = arm_jobs(args, definition, work, tuned, validated, trl_defaults, seeds)
    steps.run(added.step, lambda: run_baselines(added.jobs, added.records, args.workers), seeds)
    arms: dict[str, dict[int, float]] = {} if remeasure else {"tuned": tuned}
    for record in read_lines(added.records):
        arms.setdefault(record["arm"], {})[int(record["seed"])] = float(record["score"])
    command = "python -m benchmarks.real_model_study" + (" --quick" if args.quick else "")
    if added.evaluation is not None:
        command += (f" --eval-samples {args.eval_samples} --eval-prompts {added.evaluation['num_eval_prompts']}"
                    f" --seeds {seeds} --first-seed {args.first_seed}")
        command += "".join(f" {flag} {value}" for flag, value in (("--winner-from", args.winner_from),
                                                                   ("--runs", args.runs)) if value is not None)
    result = {
        "command": command, "commit": commit_at_start(), "machine": machine_facts("cpu"), "study": definition,
        "trl_grpo_defaults": trl_defaults, "winner": validated, "remeasured_evaluation": added.evaluation,
        "seconds": {step: steps.seconds(step) for step in ("study", "validation", added.step)},
        "arms": {arm: {str(s): v for s, v in sorted(values.items())} for arm, values in arms.items()},
        "baseline_runs": read_lines(added.records),
        "tuned_minus": {arm: paired(arms.get("tuned", {}), values) for arm, values in arms.items()
                        if arm != "tuned"},
        "runs": run_figures(name, f"sqlite:///{(work / 'study.db').resolve()}", int(validated["trial"]))
        if args.winner_from is None else None,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    print_report(result)
    print(f"written: {out}")


def tune_and_validate(args: argparse.Namespace, steps: Steps, database: Path, study: str, name: str,
                      seeds: int) -> tuple[dict[int, float], dict[str, Any]]:
    """The study tuned and its winner validated, each step skipped where an earlier session finished it; the
    winner's score on each validation seed, and its validation summary."""
    storage = f"sqlite:///{database.resolve()}"
    workers = ["--workers", str(args.workers)]
    steps.run("study", lambda: print(cli("run", study, "--storage", storage, *workers), end=""))
    # A re-measure needs the winner validated, on whatever seeds that was done: it runs seeds of its own.
    validation_seeds = None if args.eval_samples is not None and steps.done("validation") else seeds
    validation_workers = ["--workers", str(args.validation_workers or seeds)]
    steps.run("validation", lambda: print(cli("validate", name, "--top-k", "1", "--seeds", str(seeds), "--storage",
                                              storage, *validation_workers), end=""), validation_seeds)
    return validated_runs(name, storage)


def validated_runs(name: str, storage: str) -> tuple[dict[int, float], dict[str, Any]]:
    """The validated winner's score on each fresh seed, and its validation summary with its configuration."""
    import optuna
    from optuna.trial import TrialState

    from tuner.production.validation import load_validation, validation_results
    from tuner.store.attrs import SEED_ATTR, VALIDATES_ATTR
    from tuner.store.database import open_storage
    from tuner.study.reports import trial_config

    opened = open_storage(storage)
    study = optuna.load_study(study_name=name, storage=opened)
    validation = load_validation(name, opened)
    results = validation_results(study, validation)
    if not results or validation is None:
        raise SystemExit(f"{name}: no validated configuration in {storage}")
    winner = results[0]
    runs = {int(t.user_attrs[SEED_ATTR]): float(t.values[0]) for t in validation.get_trials(deepcopy=False)
            if t.state == TrialState.COMPLETE and t.values and t.user_attrs.get(VALIDATES_ATTR) == winner.trial}
    config = trial_config(study.trials[winner.trial])
    return runs, {**winner.to_dict(), "config": config}


def run_figures(name: str, storage: str, winner: int) -> dict[str, Any]:
    """What the study's and the validation's trials measured beside their objective: the winner's held-out KL at
    its last evaluation on each seed it raced and each fresh seed (against the study's KL budget), and each completed
    trial's held-out evaluation seconds over its wall-clock seconds (loading and set-up included)."""
    import optuna
    from optuna.trial import TrialState

    from ppo_core.metric_names import EVAL_KL, EVAL_SECONDS
    from tuner.production.validation import validation_study_name
    from tuner.store.attrs import RACE_OF_ATTR, SEED_ATTR, VALIDATES_ATTR
    from tuner.store.database import create_engine, open_storage
    from tuner.store.records import read_metrics

    opened, engine = open_storage(storage), create_engine(storage)
    figures: dict[str, Any] = {"winner_kl": {}, "eval_share": {}}
    for part, study_name in (("study", name), ("validation", validation_study_name(name))):
        metrics = read_metrics(engine, study_name)
        evaluated = metrics.dropna(subset=[EVAL_KL]).groupby("trial_number")
        last_kl, eval_seconds = evaluated[EVAL_KL].last(), evaluated[EVAL_SECONDS].sum()
        shares, kls = [], {}
        for trial in optuna.load_study(study_name=study_name, storage=opened).get_trials(deepcopy=False):
            if trial.state != TrialState.COMPLETE or trial.number not in eval_seconds.index:
                continue
            assert trial.datetime_start is not None and trial.datetime_complete is not None
            shares.append(float(eval_seconds[trial.number])
                          / (trial.datetime_complete - trial.datetime_start).total_seconds())
            ours = trial.user_attrs.get(VALIDATES_ATTR) if part == "validation" \
                else int(trial.user_attrs.get(RACE_OF_ATTR, trial.number))
            if ours == winner:
                kls[str(trial.user_attrs.get(SEED_ATTR, 0))] = float(last_kl[trial.number])
        figures["eval_share"][part] = shares
        figures["winner_kl"]["raced" if part == "study" else "fresh"] = kls
    return figures


def print_report(result: dict[str, Any]) -> None:
    print("seconds: " + ", ".join(f"{step} {seconds:.0f}" for step, seconds in result["seconds"].items()))
    for arm, values in result["arms"].items():
        print(f"{arm:<20} " + "  ".join(f"seed {s}: {v:.4f}" for s, v in values.items()))
    for arm, pair in result["tuned_minus"].items():
        print(f"tuned - {arm}: {pair['mean']:+.4f}, 95% [{pair['ci_low']:+.4f}, {pair['ci_high']:+.4f}], "
              f"99% [{pair['ci99_low']:+.4f}, {pair['ci99_high']:+.4f}] over seeds {pair['seeds']}")


if __name__ == "__main__":
    main()
