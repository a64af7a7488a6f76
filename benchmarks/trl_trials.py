"""ppo_core's GRPO against TRL's own GRPOTrainer (a ``trainer: trl-grpo`` trial) on the same configuration, seeds and
episodes, on the graph task and the text task: learning curves of held-out gold and KL, and the paired differences.

    python -m benchmarks.trl_trials --work-dir DIR [--seeds 5] [--tasks graph text] [--workers 2]
    python -m benchmarks.trl_trials --quick --out /tmp/trl_trials.json      # one seed of 2 updates on the tiny task

Each configuration is checked against the trl-grpo target first (``tuner.study.target.target_problem``): ppo_core
must compute what GRPOTrainer computes, so that what differs is the trainer (its sampling, its loop, its dropout and
numerics), not a setting. Both sides evaluate with ppo_core's own held-out evaluation (the same prompts, sampling
streams and KL estimator). Every (task, trainer, seed) run is a process of its own with one thread, and each
finished run is a line of ``DIR/runs.jsonl``: a rerun with the same ``--work-dir`` skips them (the runs resume).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.json_safe import json_safe
from benchmarks.common.machine import machine_facts
from benchmarks.common.pool import each_result
from ppo_core.run.callbacks import TrainerCallback
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import add_quick_argument, results_path

ROOT = Path(__file__).resolve().parent.parent
TRAINERS = ("ppo_core", "trl-grpo")
FIRST_SEED = 1000
# The configurations: GRPO with 4 responses a prompt, one epoch, a KL loss of beta 0.04 (the GRPO paper's), a
# constant learning rate that moves each policy in its run. Not tuned: the same numbers go to both trainers.
COMMON = {"advantage_estimator": "grpo", "num_generations": 4, "beta": 0.04, "num_ppo_epochs": 1, "cliprange": 0.2,
          "lr_scheduler_type": "constant", "eval_steps": 0.25}
TASKS: dict[str, dict[str, Any]] = {
    "graph": {**COMMON, "task": "shortest_path", "total_episodes": 1536, "per_device_train_batch_size": 16,
              "learning_rate": 1e-4, "temperature": 0.7, "num_eval_samples": 8},
    "text": {**COMMON, "task": "fortunes", "total_episodes": 256, "per_device_train_batch_size": 8,
             "learning_rate": 3e-4, "temperature": 1.0, "num_eval_prompts": 32, "num_eval_samples": 2},
}
QUICK_TASKS = {"graph": {**TASKS["graph"], "task": "shortest_path_tiny", "total_episodes": 32,
                         "num_eval_samples": 2}}


class EvaluationRecorder(TrainerCallback):
    """A ppo_core callback that keeps each evaluation update's held-out metrics."""

    def __init__(self) -> None:
        self.evaluations: list[dict[str, float]] = []

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        if "eval/kl" in metrics:
            self.evaluations.append({"update": update, "gold": metrics.get("eval/gold_score", float("nan")),
                                     "kl": metrics["eval/kl"], "score": metrics["eval/score"]})
        return None


def check_same_computation(values: dict[str, Any]) -> None:
    """Refuse a configuration that GRPOTrainer would compute differently from ppo_core."""
    from ppo_core.config.io import build_config
    from ppo_core.config.ppo_config import ConfigError
    from tuner.study.target import target_problem
    from tuner.trl_trial.arguments import trial_arguments

    config = build_config(values)
    problem = target_problem("trl-grpo", config.to_dict())
    try:
        trial_arguments("trl-grpo", config)
    except ConfigError as error:
        problem = problem or str(error)
    if problem is not None:
        raise SystemExit(f"benchmarks.trl_trials: the configuration is not what GRPOTrainer computes: {problem}")


def run_job(task: str, values: dict[str, Any], trainer: str, seed: int) -> dict[str, Any]:
    """One run in this (fresh, one-thread) process: its held-out evaluations and its wall seconds."""
    import torch

    from ppo_core.config.io import build_config
    from ppo_core.models.quiet import quiet_hugging_face

    torch.set_num_threads(1)
    quiet_hugging_face()
    config = build_config({**values, "seed": seed})
    recorder = EvaluationRecorder()
    started = time.perf_counter()
    if trainer == "ppo_core":
        from ppo_core.run.trainer import PPOTrainer

        PPOTrainer(config, [recorder]).train()
    else:
        from tuner.trl_trial.run import run_trl_trial

        run_trl_trial(trainer, config, [recorder])
    return {"task": task, "trainer": trainer, "seed": seed, "seconds": round(time.perf_counter() - started, 1),
            "evaluations": recorder.evaluations}


def read_runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarise(runs: Sequence[dict[str, Any]], tasks: Sequence[str]) -> dict[str, Any]:
    """Per task: each trainer's mean curve over seeds, the final gold and KL by seed, and TRL minus ppo_core paired by
    seed (mean and 95% Student-t interval)."""
    from tuner.production.confidence import mean_interval

    summary: dict[str, Any] = {}
    for task in tasks:
        by = {(run["trainer"], run["seed"]): run for run in runs if run["task"] == task}
        seeds = sorted({seed for (_, seed) in by if all((trainer, seed) in by for trainer in TRAINERS)})
        part: dict[str, Any] = {"seeds": seeds, "curves": {}, "final": {}, "trl_minus_ppo_core": {}, "seconds": {}}
        for trainer in TRAINERS:
            evaluations = [by[(trainer, seed)]["evaluations"] for seed in seeds]
            updates = [point["update"] for point in evaluations[0]] if evaluations else []
            part["curves"][trainer] = [
                {"update": update,
                 **{key: sum(run[index][key] for run in evaluations) / len(evaluations) for key in ("gold", "kl")}}
                for index, update in enumerate(updates)]
            part["final"][trainer] = {key: [by[(trainer, seed)]["evaluations"][-1][key] for seed in seeds]
                                      for key in ("gold", "kl")}
            part["seconds"][trainer] = [by[(trainer, seed)]["seconds"] for seed in seeds]
        for key in ("gold", "kl"):
            differences = [trl - core for trl, core in zip(part["final"]["trl-grpo"][key],
                                                           part["final"]["ppo_core"][key], strict=True)]
            mean, low, high = mean_interval(differences)
            part["trl_minus_ppo_core"][key] = {"differences": differences, "mean": mean, "ci_low": low,
                                               "ci_high": high}
        summary[task] = part
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trl_trials", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, help="where finished runs are kept (runs.jsonl); rerun to resume")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--tasks", nargs="+", choices=tuple(TASKS), default=list(TASKS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.workers < 1:
        parser.error("--seeds and --workers must be >= 1")
    tasks = QUICK_TASKS if args.quick else {name: TASKS[name] for name in args.tasks}
    seeds = [FIRST_SEED] if args.quick else list(range(FIRST_SEED, FIRST_SEED + args.seeds))
    for values in tasks.values():
        check_same_computation(values)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="trl_trials_"))
    work_dir.mkdir(parents=True, exist_ok=True)
    runs_file = work_dir / "runs.jsonl"
    done = {(run["task"], run["trainer"], run["seed"]) for run in read_runs(runs_file)}
    # Seed by seed, the two trainers together, so that a stop leaves whole pairs behind.
    jobs = [(task, trainer, seed) for seed in seeds for task in tasks for trainer in TRAINERS
            if (task, trainer, seed) not in done]
    started = time.perf_counter()
    # One worker runs both trainers here, one after the other: the same evaluations as a pool's, to the last digit.
    for run in each_result(run_job, [(task, tasks[task], trainer, seed) for task, trainer, seed in jobs], args.workers,
                           ordered=False):
        with runs_file.open("a") as file:
            file.write(json.dumps(json_safe(run)) + "\n")
        print(f"{run['task']:5s} {run['trainer']:8s} seed {run['seed']}: gold "
              f"{run['evaluations'][-1]['gold']:.3f}, KL {run['evaluations'][-1]['kl']:.2f} "
              f"({run['seconds']:.0f} s)", flush=True)
    runs = [run for run in read_runs(runs_file) if run["task"] in tasks and run["seed"] in seeds]
    summary = summarise(runs, list(tasks))
    command = command_line("benchmarks.trl_trials", argv)
    result: dict[str, Any] = {"command": command, "commit": commit_at_start(), "machine": machine_facts("cpu"),
                              "configs": tasks, "seconds_this_session": round(time.perf_counter() - started, 1),
                              "tasks": summary}
    out = results_path(args.out, ROOT / "benchmarks" / "results" / "trl_trials" / "trl_trials.json", args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(result), indent=1) + "\n")
    for task, part in summary.items():
        for key in ("gold", "kl"):
            d = part["trl_minus_ppo_core"][key]
            print(f"{task}: final {key}, TRL minus ppo_core over {len(part['seeds'])} seeds: {d['mean']:+.3f} "
                  f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
