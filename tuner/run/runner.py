"""``ppo-tune run``: run K workers on this machine and follow the study with a progress bar.

K workers are K processes (``python -m tuner.run.worker``). A single worker with this process's environment runs in this
process instead, the same worker code on the same command line: a process less for the common case, and its imports
and fork server not paid twice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ppo_core.errors import Terminated
from tuner.run.failure_streak import SAME_FAILURES_TO_STOP, failure_streak
from tuner.run.savings import update_savings
from tuner.run.worker import FINISHED, open_study
from tuner.run.worker import main as worker_main
from tuner.search.kl_target_notice import reach_notice
from tuner.store.database import GRACE_HEARTBEATS, create_engine
from tuner.store.records import create_tables
from tuner.study.edge_findings import edge_findings, format_edge_findings
from tuner.study.reports import best_figure, best_trials, trial_reason, trials_frame
from tuner.study.spec import StudySpec
from tuner.study.values import StudyConfigError
from tuner.trial.launch import describe_exit

if TYPE_CHECKING:  # only --launcher ray makes one
    from tuner.trial.ray_launch import RayCluster

POLL_SECONDS = 1.0
WORKER_COMMAND = [sys.executable, "-m", "tuner.run.worker"]


# The device nodes through which torch reaches a GPU: NVIDIA's driver on Linux, WSL 2's GPU paravirtualisation, and
# AMD's ROCm (whose torch answers torch.cuda too).
GPU_DEVICE_NODES = ("nvidiactl", "nvidia0", "dxg", "kfd")


def gpu_driver_present(dev: Path = Path("/dev")) -> bool:
    """Whether any GPU driver's device node is in ``dev``: without one, torch can see no GPU."""
    return any((dev / node).exists() for node in GPU_DEVICE_NODES)


def visible_gpus() -> list[str]:
    """GPU indices this machine exposes (honouring an existing CUDA_VISIBLE_DEVICES). Without a GPU driver there are
    none, and torch is not imported to say so: its import costs ``ppo-tune run`` seconds of CPU before any trial."""
    if not gpu_driver_present():
        return []
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:  # a broken CUDA install must not stop a CPU study
        count = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [index for index in visible.split(",") if index.strip()][:count]
    return [str(index) for index in range(count)]


def gpu_groups(gpus: Sequence[str], workers: int, processes_per_trial: int) -> list[list[str]]:
    """The GPU ids each worker's trials see (its CUDA_VISIBLE_DEVICES), from the ids this machine exposes.

    Without GPUs every worker gets none: trials run on the CPU, several processes of one trial over gloo. With one
    process per trial each worker gets one GPU, shared round-robin when there are more workers than GPUs. With N
    processes per trial each worker gets N GPUs of its own (one process per GPU, as NCCL requires), so the machine
    needs N x workers of them; GPUs left over stay idle.

    Example::

        gpu_groups(["0", "1", "2", "3"], workers=2, processes_per_trial=2)  # [["0", "1"], ["2", "3"]]
    """
    if not gpus:
        return [[] for _ in range(workers)]
    if processes_per_trial == 1:
        return [[gpus[index % len(gpus)]] for index in range(workers)]
    if len(gpus) < processes_per_trial:
        raise StudyConfigError(f"processes_per_trial: {processes_per_trial} processes per trial need "
                               f"{processes_per_trial} GPUs, this machine has {len(gpus)}")
    if len(gpus) < processes_per_trial * workers:
        raise StudyConfigError(f"processes_per_trial: {workers} workers x {processes_per_trial} processes need "
                               f"{processes_per_trial * workers} GPUs, this machine has {len(gpus)} "
                               f"(run with --workers {len(gpus) // processes_per_trial})")
    return [list(gpus[index * processes_per_trial:(index + 1) * processes_per_trial]) for index in range(workers)]


def cpu_threads_per_worker(workers: int) -> int:
    """Each of ``workers`` local workers' share of the CPU threads: the cores this process may run on (its affinity,
    which a Slurm or taskset allocation sets; not the machine's count) split evenly, at most ``OMP_NUM_THREADS``
    when that is set to a number (torch's own default for a process's threads, which a user sets to say how many)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # not on macOS
    share = max(1, usable // workers)
    cap = os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(share, int(cap)) if cap.isdigit() and int(cap) > 0 else share


def worker_commands(spec: StudySpec, n_trials: int | None, timeout: float | None, workers: int,
                    stored: bool = False, ray: RayCluster | None = None) -> list[tuple[list[str], dict[str, str]]]:
    """The command line and environment of each worker: its GPUs, or its share of the CPU threads. ``stored``:
    the workers read the study's stored definition instead of a study file (a validation study has none). With
    ``ray`` the workers run their trials on that cluster, which gives each its GPUs; the threads are a share of the
    cluster's CPUs."""
    if ray is not None:
        ray_threads = ray.threads_per_process(workers, spec.processes_per_trial)
        groups: list[list[str]] = [[] for _ in range(workers)]
        threads = ray_threads * spec.processes_per_trial if ray_threads else None
    else:
        groups = gpu_groups(visible_gpus(), workers, spec.processes_per_trial)
        threads = cpu_threads_per_worker(workers)
    commands = []
    for index, gpus in enumerate(groups):
        command = [*WORKER_COMMAND, spec.name if stored else str(spec.path),
                   "--storage", spec.storage, "--worker-index", str(index), *(["--stored"] if stored else [])]
        if ray is not None:
            command += ["--ray-address", ray.address]
        if n_trials is not None:
            command += ["--n-trials", str(n_trials)]
        if timeout is not None:
            command += ["--timeout", str(timeout)]
        env = dict(os.environ)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        elif threads is not None:
            command += ["--threads", str(threads)]
        commands.append((command, env))
    return commands


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


def _best_text(study: optuna.Study) -> str:
    """The progress line's best: its figure as every view shows it (``tuner.study.reports.best_figure``); a Pareto
    front's first trial's values."""
    best = best_trials(study)
    figure = best_figure(study, best)
    if figure is not None:
        return f"best {figure.words()} (trial {figure.trial})"
    return f"best {', '.join(f'{v:.4f}' for v in best[0].values)} (trial {best[0].number})" if best else "best -"


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


def runs_here(commands: Sequence[tuple[list[str], dict[str, str]]], ray: RayCluster | None) -> bool:
    """Whether the workers' one command runs in this process: a single local worker whose environment is this
    process's (one given a subset of the GPUs, or a Ray driver, stays a process of its own)."""
    return ray is None and len(commands) == 1 and commands[0][1] == dict(os.environ)


class _Follower:
    """The progress loop: prints each trial as it finishes and moves the bar, until ``done()``, pausing between looks
    with ``pause(seconds)``."""

    def __init__(self, study: optuna.Study, spec: StudySpec, progress: Progress, total: int | None,
                 already: int) -> None:
        self.study, self.progress = study, progress
        self.task = progress.add_task(spec.name, total=total, completed=already, best=_best_text(study))
        self.reported = {trial.number for trial in study.get_trials(deepcopy=False) if trial.state.is_finished()}

    def look(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        for trial in trials:
            if trial.state.is_finished() and trial.number not in self.reported:
                self.reported.add(trial.number)
                self.progress.console.print(describe(trial))
        finished = sum(t.state in FINISHED for t in trials)
        self.progress.update(self.task, completed=finished, best=_best_text(self.study))

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


def run_study(spec: StudySpec, n_trials: int | None, timeout: float | None, workers: int,
              console: Console | None = None, allow_changes: bool = False, validation: bool = False,
              ray: RayCluster | None = None) -> int:
    """Create or resume the study, run ``workers`` workers, and return an exit status (130 on Ctrl-C, 143 on
    SIGTERM: either stops every worker and its trial, and queues the running trials again). With ``ray`` the
    workers run their trials as tasks on that cluster (``tuner.trial.ray_launch``). ``validation``: the study is a
    validation (``tuner.production.validation``): its workers run its queue from its stored definition (it has no file),
    and every run trains to the end, so there is no search to report on (the reach notice, pruning's savings) and a
    configuration failing on every seed is a result, not a reason to stop."""
    # soft_wrap: an event is one line however long, so that output piped to a file or a pager is not cut at 80
    # columns (rich's width when stderr is no terminal); a terminal wraps it for the eye.
    console = console or Console(stderr=True, soft_wrap=True)
    # First: too few GPUs creates no study.
    commands = worker_commands(spec, n_trials, timeout, workers, stored=validation, ray=ray)
    study, already = _open(spec, allow_changes, validation, console)
    stopped, returncodes = _run_workers(commands, ray, study, spec, n_trials, already, console)
    if stopped is not None:
        how = "terminated (SIGTERM)" if stopped == 143 else "interrupted"
        console.print(f"{how}: finished trials are saved; rerun the same command to resume {spec.name!r}",
                      soft_wrap=True, markup=False)
        return stopped
    failed_workers = [(index, code) for index, code in enumerate(returncodes) if code not in (0, 130, 143)]
    for index, code in failed_workers:
        console.print(f"worker {index} was {describe_exit(code)}" if code < 0
                      else f"worker {index} ended with {describe_exit(code)}", soft_wrap=True)
    _print_summary(study, spec, validation, console)
    return _exit_status(study.get_trials(deepcopy=False), bool(failed_workers), validation, console)


def _open(spec: StudySpec, allow_changes: bool, validation: bool, console: Console) -> tuple[optuna.Study, int]:
    """The study created or resumed, what its definition says printed, its tables made and its dead trials
    retried; with the number of trials already finished."""
    study, messages = open_study(spec, allow_changes=allow_changes)
    notice = None if validation else reach_notice(spec.search_space, spec.base)  # a validation fixes each config
    for message in [*messages, *([notice] if notice else [])]:
        console.print(message, soft_wrap=True, markup=False)
    create_tables(create_engine(spec.storage))
    already = len(study.get_trials(deepcopy=False, states=FINISHED))
    if already:
        console.print(f"resuming study {spec.name!r}: {already} trials already finished")
    recover_dead_trials(study, spec.heartbeat_interval, console)
    return study, already


def _run_workers(commands: list[tuple[list[str], dict[str, str]]], ray: RayCluster | None, study: optuna.Study,
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


def _print_summary(study: optuna.Study, spec: StudySpec, validation: bool, console: Console) -> None:
    """What the finished search says: the searched ranges whose best trials crowd a bound, and what pruning and the
    KL guard saved (a validation runs every run to the end: nothing)."""
    trials = study.get_trials(deepcopy=False)
    findings = format_edge_findings(edge_findings(trials, spec.search_space, study.directions))
    if findings:
        console.print(findings, soft_wrap=True, markup=False)
    savings = None if validation else update_savings(trials_frame(study))
    if savings is not None:
        console.print(savings.line(), soft_wrap=True, markup=False)


def _exit_status(trials: list[FrozenTrial], failed_workers: bool, validation: bool, console: Console) -> int:
    """1 when the study stopped on a run of identical failures (not in a validation, where a configuration failing
    on every seed is a result), when no trial completed, or when a worker failed; else 0. The first two say why in
    one unbroken line whatever the terminal's width: it is what a user (or a script) greps for."""
    completed = any(trial.state == TrialState.COMPLETE for trial in trials)
    streak = None if validation else failure_streak(trials)
    if streak is not None:
        console.print(("" if completed else "no trial completed; ")
                      + f"stopped after {SAME_FAILURES_TO_STOP} trials in a row failed with: {streak}",
                      soft_wrap=True, markup=False)
        return 1
    if not completed:
        reasons = Counter(trial_reason(trial) or "no reason recorded" for trial in trials
                          if trial.state == TrialState.FAIL)
        common = reasons.most_common(1)
        console.print("no trial completed" + (f"; {common[0][1]} failed with: {common[0][0]}" if common else ""),
                      soft_wrap=True, markup=False)
        return 1
    return 1 if failed_workers else 0
