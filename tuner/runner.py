"""``ppo-tune run``: start K worker processes on this machine and follow the study with a progress bar."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
from optuna.trial import FrozenTrial
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tuner.database import create_engine
from tuner.reports import best_trials, trial_reason
from tuner.study_config import StudySpec
from tuner.trial_records import create_tables
from tuner.worker import FINISHED, open_study

POLL_SECONDS = 1.0


def visible_gpus() -> list[str]:
    """GPU indices this machine exposes (honouring an existing CUDA_VISIBLE_DEVICES)."""
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:  # a broken CUDA install must not stop a CPU study
        count = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [index for index in visible.split(",") if index.strip()][:count]
    return [str(index) for index in range(count)]


def worker_commands(spec: StudySpec, n_trials: int | None, timeout: float | None,
                    workers: int) -> list[tuple[list[str], dict[str, str]]]:
    """The command line and environment of each worker: one per GPU, or CPU threads shared out."""
    gpus = visible_gpus()
    threads = max(1, (os.cpu_count() or 1) // workers)
    commands = []
    for index in range(workers):
        command = [sys.executable, "-m", "tuner.worker", str(spec.path), "--storage", spec.storage,
                   "--worker-index", str(index)]
        if n_trials is not None:
            command += ["--n-trials", str(n_trials)]
        if timeout is not None:
            command += ["--timeout", str(timeout)]
        env = dict(os.environ)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
        else:
            command += ["--threads", str(threads)]
        commands.append((command, env))
    return commands


def describe(trial: FrozenTrial) -> str:
    values = ", ".join(f"{v:.4f}" for v in trial.values) if trial.values else "-"
    reason = trial_reason(trial)
    return f"trial {trial.number:>3} {trial.state.name:<8} value {values}" + (f"  ({reason})" if reason else "")


def _best_text(study: optuna.Study) -> str:
    best = best_trials(study)
    if not best:
        return "best -"
    return f"best {', '.join(f'{v:.4f}' for v in best[0].values)} (trial {best[0].number})"


def run_study(spec: StudySpec, n_trials: int | None, timeout: float | None, workers: int,
              console: Console | None = None) -> int:
    """Create or resume the study, run ``workers`` processes, and return an exit status (130 on Ctrl-C)."""
    console = console or Console(stderr=True)
    study = open_study(spec, heartbeat=False)
    create_tables(create_engine(spec.storage))
    already = len(study.get_trials(deepcopy=False, states=FINISHED))
    if already:
        console.print(f"resuming study {spec.name!r}: {already} trials already finished")
    processes = [subprocess.Popen(command, env=env) for command, env in worker_commands(spec, n_trials, timeout,
                                                                                         workers)]
    reported = {trial.number for trial in study.get_trials(deepcopy=False) if trial.state.is_finished()}
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=console)
    try:
        with progress:
            task = progress.add_task(spec.name, total=n_trials, completed=already, best=_best_text(study))
            while True:
                running = any(process.poll() is None for process in processes)
                trials = study.get_trials(deepcopy=False)
                for trial in trials:
                    if trial.state.is_finished() and trial.number not in reported:
                        reported.add(trial.number)
                        progress.console.print(describe(trial))
                finished = sum(t.state in FINISHED for t in trials)
                progress.update(task, completed=finished, best=_best_text(study))
                if not running:
                    break
                time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in processes:
            process.wait()
        console.print(f"interrupted: finished trials are saved; rerun the same command to resume {spec.name!r}")
        return 130
    failed_workers = [process.returncode for process in processes if process.returncode not in (0, 130)]
    return 1 if failed_workers else 0
