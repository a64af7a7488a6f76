"""Following a study while its workers run: first the trials of workers that died retried, then each trial's line as
it ends, a progress bar with the best so far, and the workers' ends and the signals that stop them."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ppo_core.errors import Terminated
from tuner.run.commands import WORKER_COMMAND, runs_here
from tuner.run.worker import FINISHED
from tuner.run.worker import main as worker_main
from tuner.store.database import GRACE_HEARTBEATS
from tuner.study.reports import trial_reason
from tuner.study.spec import StudySpec
from tuner.study.winner import read_winner

if TYPE_CHECKING:  # only --launcher ray makes one
    from tuner.trial.ray_launch import RayCluster

POLL_SECONDS = 1.0  # how often ppo-tune run looks at the study: the progress bar, and the heartbeats of trials that ran


def recover_dead_trials(study: optuna.Study, heartbeat_interval: int, console: Console,
                        poll_seconds: float = POLL_SECONDS) -> None:
    """Fail (and queue again) the RUNNING trials whose workers died, before any worker counts them as running.

    A trial whose heartbeat is already older than the grace period is failed at once. One whose worker died moments
    ago still looks alive: it is watched for up to one grace period, and failed when its heartbeats have not come
    back. A trial still RUNNING after that has a live worker (elsewhere) and is left to it.
    """
    fail_stale_trials(study)
    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    if not running:
        return
    grace = GRACE_HEARTBEATS * heartbeat_interval
    console.print(f"trial(s) {', '.join(map(str, running))} were RUNNING: waiting up to {grace} s for their "
                  "heartbeats before retrying them")
    deadline = time.monotonic() + grace + poll_seconds
    while running and time.monotonic() < deadline:
        time.sleep(poll_seconds)
        fail_stale_trials(study)
        running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]


def pause_until_a_worker_ends(processes: Sequence[subprocess.Popen[bytes]], seconds: float) -> None:
    """The progress loop's pause: ``seconds``, or less when the first worker still running ends, so that a study
    whose last worker has ended is reported at once rather than after the pause."""
    running = [process for process in processes if process.poll() is None]
    if running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            running[0].wait(seconds)


def describe(trial: FrozenTrial) -> str:
    values = ", ".join(f"{v:.4f}" for v in trial.values) if trial.values else "-"
    reason = trial_reason(trial)
    return f"trial {trial.number:>3} {trial.state.name:<8} value {values}" + (f"  ({reason})" if reason else "")


def best_text(study: optuna.Study) -> str:
    """The progress line's best: its figure as every view shows it (``tuner.study.winner``); a Pareto front's first
    trial's values."""
    winner = read_winner(study)
    if winner.figure is not None:
        return f"best {winner.figure.words()} (trial {winner.figure.trial})"
    best = winner.best
    return f"best {', '.join(f'{v:.4f}' for v in best.values)} (trial {best.number})" if best else "best -"


class _Follower:
    """The progress loop: prints each trial as it finishes and moves the bar, until ``done()``, pausing between looks
    with ``pause(seconds)``."""

    def __init__(self, study: optuna.Study, spec: StudySpec, progress: Progress, total: int | None,
                 already: int) -> None:
        self.study, self.progress = study, progress
        self.task = progress.add_task(spec.name, total=total, completed=already, best=best_text(study))
        self.reported = {trial.number for trial in study.get_trials(deepcopy=False) if trial.state.is_finished()}

    def look(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        for trial in trials:
            if trial.state.is_finished() and trial.number not in self.reported:
                self.reported.add(trial.number)
                self.progress.console.print(describe(trial))
        finished = sum(t.state in FINISHED for t in trials)
        self.progress.update(self.task, completed=finished, best=best_text(self.study))

    def follow(self, done: Callable[[], bool], pause: Callable[[float], object]) -> None:
        while True:
            ended = done()
            self.look()  # once more after the end: the last trials are reported
            if ended:
                return
            pause(POLL_SECONDS)


def _run_here(command: list[str], follower: _Follower) -> int:
    """The worker's command run in this process (its main thread, where Ctrl-C and SIGTERM land, as they would in
    its own process), followed from a thread; its exit status."""
    ended = threading.Event()
    following = threading.Thread(target=follower.follow, args=(ended.is_set, ended.wait), daemon=True)
    following.start()
    try:
        return worker_main(command[len(WORKER_COMMAND):])
    finally:
        ended.set()
        following.join()


def run_workers(commands: list[tuple[list[str], dict[str, str]]], ray: RayCluster | None, study: optuna.Study,
                 spec: StudySpec, n_trials: int | None, already: int,
                 console: Console) -> tuple[int | None, list[int]]:
    """Run the workers (one in this process, or each its own) while the progress display follows the study; the
    status they were stopped with (130 after Ctrl-C, 143 after SIGTERM), else None, and each worker's exit status."""
    here = runs_here(commands, ray)
    processes = [] if here else [subprocess.Popen(command, env=env) for command, env in commands]
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=console)
    try:
        with progress:
            follower = _Follower(study, spec, progress, n_trials, already)
            if here:
                status = _run_here(commands[0][0], follower)
                # The worker took the signal: it killed its trial and queued it again.
                return (status if status in (130, 143) else None), [status]
            follower.follow(lambda: all(process.poll() is not None for process in processes),
                            lambda seconds: pause_until_a_worker_ends(processes, seconds))
    except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM (ppo_core.errors.Terminated)
        # Each worker takes the signal as Ctrl-C: it kills its trial's processes and queues the trial again. SIGTERM
        # is passed on as SIGTERM: a worker started in the background may ignore SIGINT, never SIGTERM.
        forwarded = signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT
        for process in processes:
            if process.poll() is None:
                process.send_signal(forwarded)
        for process in processes:
            process.wait()
        return (143 if isinstance(interrupt, Terminated) else 130), [process.returncode for process in processes]
    return None, [process.returncode for process in processes]
