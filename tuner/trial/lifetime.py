"""A process that never outlives the one it serves: a trial its worker, a pool's worker the measurement that started
it. Standard library only, so that a process can ask before its heavy imports, and a pool can name it as its
workers' initializer without making them import the trainer."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def end_now() -> None:
    """SIGKILL this process's group if it leads one (a trial and what it started), else this process alone."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent dies: the worker for ``python -m``, the launcher under
    accelerate launch (which the worker kills at ``trial_timeout``), or whoever started a pool's worker. Linux only;
    elsewhere a trial's watch of its worker does.

    ``parent``: the pid this process was started by, when the call may come late (a pool's worker makes it after
    seconds of imports); by default the parent it has now. A parent already gone ends this process at once.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid() if parent is None else parent
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0 and os.getppid() != parent:
        end_now()  # the parent died before the request took effect
