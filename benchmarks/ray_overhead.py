"""What ``--launcher ray`` costs against the local launcher: a trial's start-up latency, and a study's throughput.

    python -m benchmarks.ray_overhead                 # 12 tiny trials per launcher, 2 workers each
    python -m benchmarks.ray_overhead --quick --out /tmp/ray_overhead.json   # 1 trial of 2 updates, 1 worker each

One study of tiny trials (the built-in ``shortest_path_tiny`` task, 64 episodes a trial, random sampler) runs once
under each launcher, in fresh SQLite files, with the same workers, seed and threads. Ray's cluster is the one running
on this machine (``ray start``), else a local one started for the run, whose start is timed apart. Per trial:

- ``overhead_s``: its wall time (Optuna's start to its end) less the time its trainer reported for rollouts, updates
  and evaluations: starting its process, imports, loading models and data, and reporting its end; the start-up
  latency, teardown included;
- ``dispatch_s`` (Ray only): from Optuna's start of the trial to its task running on a Ray worker.

Per study: the wall time and the trials finished per minute.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState
from rich.console import Console

from tools.provenance import command_line
from tools.quick_mode import RESULTS, ROOT, add_quick_argument, results_path
from tuner.run.runner import run_study
from tuner.store.database import create_engine, open_storage
from tuner.store.records import read_metrics
from tuner.study.study_file import load_study_spec
from tuner.trial.ray_launch import RAY_TASK_ATTR, RayCluster, ray_cluster

TRAINER_TIME = ("time/rollout_s", "time/update_s", "time/eval_s")
STUDY: dict[str, Any] = {
    "sampler": {"name": "random", "seed": 0},
    "pruner": {"name": "none"},
    "objectives": [{"metric": "objective/scores", "direction": "maximize"}],
    "base": {"task": "shortest_path_tiny", "total_episodes": 64, "per_device_train_batch_size": 8,
             "num_ppo_epochs": 1, "num_sample_generations": 0},
    "search_space": {"learning_rate": {"type": "float", "low": 1.0e-5, "high": 1.0e-4, "log": True}},
}
QUICK_BASE = {"total_episodes": 16}
"""--quick: 2 updates of 8 episodes per trial."""


def write_study(directory: Path, launcher: str, n_trials: int, quick: bool) -> Path:
    data = {**STUDY, "name": f"overhead-{launcher}", "n_trials": n_trials,
            "base": {**STUDY["base"], **(QUICK_BASE if quick else {})}}
    path = directory / f"overhead-{launcher}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextlib.contextmanager
def launcher(name: str, storage: str, timings: dict[str, float]) -> Iterator[RayCluster | None]:
    if name == "local":
        yield None
        return
    started = time.perf_counter()
    with ray_cluster(None, storage, processes_per_trial=1) as cluster:
        timings["connect_s"] = time.perf_counter() - started
        yield cluster


def run_one(directory: Path, name: str, n_trials: int, workers: int, quick: bool) -> dict[str, Any]:
    """The study under launcher ``name``: its wall time, throughput, and each trial's overhead (and dispatch)."""
    spec = load_study_spec(write_study(directory, name, n_trials, quick))
    timings: dict[str, float] = {}
    with launcher(name, spec.storage, timings) as cluster:
        started = time.perf_counter()
        status = run_study(spec, n_trials, None, workers, console=Console(stderr=True), ray=cluster)
        wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"the {name} study ended with exit status {status}")
    study = optuna.load_study(study_name=spec.name, storage=open_storage(spec.storage))
    trials = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    metrics = read_metrics(create_engine(spec.storage), spec.name)
    trained = metrics.groupby("trial_number")[[c for c in TRAINER_TIME if c in metrics]].sum().sum(axis=1)
    overheads, dispatches = [], []
    for trial in trials:
        assert trial.datetime_start is not None and trial.datetime_complete is not None
        span = (trial.datetime_complete - trial.datetime_start).total_seconds()
        overheads.append(span - float(trained[trial.number]))
        task = trial.system_attrs.get(RAY_TASK_ATTR)
        if task is not None:
            dispatches.append(task["started"] - trial.datetime_start.timestamp())
    result: dict[str, Any] = {
        "trials": len(trials), "workers": workers, "wall_s": wall, "trials_per_min": 60 * len(trials) / wall,
        "overhead_s_mean": statistics.mean(overheads), "overhead_s_median": statistics.median(overheads),
        "trained_s_mean": float(trained.mean()), **timings,
    }
    if dispatches:
        result.update(dispatch_s_mean=statistics.mean(dispatches), dispatch_s_median=statistics.median(dispatches))
    return result


def commit() -> str:
    completed = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                               check=False)
    return completed.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12, help="Trials per launcher (default 12).")
    parser.add_argument("--workers", type=int, default=None,
                        help="Workers (concurrent trials) per launcher (default 2; --quick 1).")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"Results JSON (default {RESULTS.relative_to(ROOT)}/ray_overhead.json).")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    out = results_path(args.out, RESULTS / "ray_overhead" / "ray_overhead.json", args.quick)
    for flag, count in (("--workers", args.workers), ("--trials", args.trials)):
        if count is not None and count < 1:
            parser.error(f"{flag}: must be at least 1, got {count}")
    # --quick: one trial on one worker per launcher, the smallest run with every figure: each trial on Ray is a new
    # process that imports torch and transformers (about 7 s of CPU), and a second worker is another process.
    n_trials = 1 if args.quick else args.trials
    workers = args.workers if args.workers is not None else 1 if args.quick else 2
    results: dict[str, Any] = {
        "command": command_line("benchmarks.ray_overhead", argv),
        "commit": commit(), "cpus": os.cpu_count(), "python": platform.python_version(), "launchers": {},
    }
    with tempfile.TemporaryDirectory(prefix="ray-overhead-") as directory:
        for name in ("local", "ray"):
            results["launchers"][name] = run_one(Path(directory), name, n_trials, workers, args.quick)
            print(f"{name}: {json.dumps(results['launchers'][name])}")
    local, ray = results["launchers"]["local"], results["launchers"]["ray"]
    results["ray_minus_local_overhead_s"] = ray["overhead_s_mean"] - local["overhead_s_mean"]
    results["ray_over_local_throughput"] = ray["trials_per_min"] / local["trials_per_min"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    sys.exit(run_as_process(main))
