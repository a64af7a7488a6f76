"""The worker's side of a trial's process: start it, wait for it (within ``trial_timeout``), kill it, and say how
it ended.

One process per trial keeps whatever a trial does (a CUDA out-of-memory error, a reward that calls ``os._exit``,
a segfault, fragmented GPU memory) from reaching the worker. With one process per trial the process is forked
from a fork server that imported torch, transformers and the trainer once, when the worker started: on 2 cores a
trial then costs about 0.35 s more than it did inside the worker, where a fresh ``python -m`` costs 6 s more. The
server never touches CUDA, so its children may. With ``processes_per_trial`` above 1 the trial runs under
``accelerate launch``, a fresh start each time.

Each trial's processes form a process group of their own, so the worker can end them all at once; they in turn
end themselves if the worker dies (see ``tuner.trial.process``).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from typing import Protocol

from optuna.storages import BaseStorage

from tuner.trial.protocol import Outcome, TrialJob, read_outcome

TRIAL_MODULE = "tuner.trial.process"
# What the fork server imports once for every trial: the trial module (torch, transformers, accelerate, the trainer),
# then what a trial would otherwise import each time because its importer defers it: datasets (ppo_core reads prompts
# with it) and what Optuna's RDB storage loads when one is opened (alembic, its table models). Each saves about 0.4 s
# per trial on 2 cores; a name that fails to import is skipped.
PRELOAD = [TRIAL_MODULE, "datasets", "optuna.storages._rdb.models", "alembic.command", "alembic.config",
           "alembic.migration", "alembic.script", "tuner.trial.fork_server_freeze"]


def trial_command(job: TrialJob, processes: int) -> list[str]:
    """The command line that runs ``job`` in a fresh process, or in ``processes`` of them under accelerate launch.

    ``--multi_gpu`` is what makes accelerate start several processes at all (on a machine without GPUs they talk
    over gloo); port 0 lets it pick a free port, so the trials of two workers on one machine cannot collide.
    """
    trial = ["-m", TRIAL_MODULE, *job.arguments()]
    if processes == 1:
        return [sys.executable, *trial]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"]
    if job.threads:
        launch += ["--num_cpu_threads_per_process", str(job.threads)]
    return launch + trial


def fork_server_available() -> bool:
    return "forkserver" in multiprocessing.get_all_start_methods()


def start_fork_server() -> None:
    """Start this process's fork server now, importing the trial module (torch, transformers, the trainer) while the
    worker opens its study; the first trial would otherwise wait for those imports."""
    if fork_server_available():
        multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
        from multiprocessing import forkserver

        forkserver.ensure_running()


class TrialProcess(Protocol):
    """A started trial process: its pid (also its process group's id) and a way to wait for its exit status."""

    pid: int

    def wait(self, timeout: float | None) -> int | None:
        """The exit status (minus the signal number if a signal ended it), or None if still running at timeout."""


class _Forked:
    def __init__(self, job: TrialJob) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        self.process = context.Process(target=_forked_main, args=(job.arguments(), dict(os.environ)),
                                       name=f"trial-{job.trial_id}")
        self.process.start()
        assert self.process.pid is not None  # set by start()
        self.pid = self.process.pid

    def wait(self, timeout: float | None) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode


class _Launched:
    def __init__(self, command: list[str], cwd: str | None = None, env: dict[str, str] | None = None) -> None:
        # A session of its own: the worker's Ctrl-C does not reach it, and one killpg ends it.
        self.popen = subprocess.Popen(command, start_new_session=True, cwd=cwd, env=env)
        self.pid = self.popen.pid

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def _forked_main(argv: list[str], environment: dict[str, str]) -> None:
    """A forked trial process: the worker's environment of the moment (the fork server's is from when it started),
    then the trial module's ``main``, as ``python -m tuner.trial.process`` would run it."""
    os.setpgid(0, 0)  # first of all, so that killing the group reaches whatever it starts
    os.environ.clear()
    os.environ.update(environment)
    # By name, as a command line names it; the fork server imported it already.
    sys.exit(importlib.import_module(TRIAL_MODULE).main(argv))


def start_trial_process(job: TrialJob, processes: int) -> TrialProcess:
    if processes == 1 and fork_server_available():
        return _Forked(job)
    return _Launched(trial_command(job, processes))


def launch_trial_command(job: TrialJob, processes: int, cwd: str | None = None,
                         env: dict[str, str] | None = None) -> TrialProcess:
    """``job`` as a fresh ``python -m`` process (or under accelerate launch), in a session of its own, with ``cwd``
    and ``env``: how a process with no fork server runs a trial (a Ray task, ``tuner.trial.ray_task``)."""
    return _Launched(trial_command(job, processes), cwd, env)


# The longest single wait on a trial's process. A signal may land on a thread other than the main one (the kernel
# picks any thread that does not block it), and Python runs its handler in the main thread only when that thread
# next runs Python: waiting in slices bounds how late a Ctrl-C or SIGTERM is acted on.
WAIT_SLICE_S = 0.5
# How long a SIGKILLed trial process may take to be reaped before the worker goes on without it: a process stuck in
# the kernel (a hung GPU driver, a dead network file system) may never go, and must not hold the worker forever.
REAP_TIMEOUT_S = 60.0


def wait_in_slices(process: TrialProcess, timeout: float | None) -> int | None:
    """``process.wait(timeout)``, one slice of at most :data:`WAIT_SLICE_S` at a time: the exit status, or None if
    still running at ``timeout`` (None: no limit)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
        returncode = process.wait(max(remaining, 0.0))
        if returncode is not None or (deadline is not None and time.monotonic() >= deadline):
            return returncode


def kill_process_group(process: TrialProcess) -> None:
    """SIGKILL the trial's process group (the process alone, if it has not made its group yet) and reap it, or,
    should it not end within :data:`REAP_TIMEOUT_S`, say so and go on."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    if wait_in_slices(process, REAP_TIMEOUT_S) is None:
        print(f"trial process {process.pid} did not end {REAP_TIMEOUT_S:g} s after SIGKILL (stuck in the kernel?); "
              "going on without it", file=sys.stderr)


def describe_exit(returncode: int) -> str:
    """Why a process that recorded no outcome ended, from its exit status."""
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    if returncode > 0:
        return f"exit status {returncode}"
    return "the trial's process ended without reporting how the trial went"


def run_trial_process(job: TrialJob, processes: int, timeout: float | None, storage: BaseStorage) -> Outcome:
    """Run ``job`` in its own process(es) and return how it ended; never raises for anything the trial did.

    The outcome the process recorded wins; without one, the timeout, the signal or the exit status says why.
    A KeyboardInterrupt while waiting kills the trial's processes first, then goes on up.
    """
    returncode = wait_or_kill(start_trial_process(job, processes), timeout)
    return ended_outcome(storage, job.trial_id, returncode, timeout)


def wait_or_kill(process: TrialProcess, timeout: float | None) -> int | None:
    """The trial process's exit status, or None when it ran past ``timeout`` and was killed. A KeyboardInterrupt
    while waiting kills the trial's processes first, then goes on up."""
    returncode = None
    try:
        returncode = wait_in_slices(process, timeout)
    finally:
        if returncode is None:  # past trial_timeout, or interrupted
            kill_process_group(process)
    return returncode


def ended_outcome(storage: BaseStorage, trial_id: int, returncode: int | None, timeout: float | None) -> Outcome:
    """How the trial ended: the outcome its process recorded, else why it recorded none (the timeout, the signal or
    the exit status)."""
    outcome = read_outcome(storage, trial_id)
    if outcome is not None:
        return outcome
    if returncode is None:
        assert timeout is not None  # wait(None) returns only with a status
        return Outcome("fail", reason=f"trial_timeout: exceeded {timeout:g} s")
    return Outcome("fail", reason=describe_exit(returncode))
