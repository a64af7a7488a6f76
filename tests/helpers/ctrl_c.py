"""Ctrl-C in tests: start a command as a terminal would, and interrupt it, however the tests themselves were started.

A shell without job control (a script's ``pytest &``, ``nohup pytest &`` from one) starts a background command with
SIGINT ignored, and an ignored signal stays ignored across fork and exec: a command the tests start with a plain
``Popen`` then never sees the Ctrl-C they send it, and runs to its end. ``start_in_terminal`` gives it SIGINT's
default action back, as an interactive shell gives every command it starts.
"""

from __future__ import annotations

import os
import signal
import subprocess


def default_sigint() -> None:
    """SIGINT's default action, whatever the parent had (a ``preexec_fn``: it runs in the child, before exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ignore_sigint() -> None:
    """SIGINT ignored, as a shell without job control starts a background command (a ``preexec_fn``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_in_terminal(command: list[str]) -> subprocess.Popen[bytes]:
    """Start ``command`` as an interactive shell would: in a process group of its own, which ``ctrl_c`` reaches all
    at once, with SIGINT's default action; stdout and stderr together in ``stdout``."""
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=default_sigint)


def ctrl_c(process: subprocess.Popen[bytes]) -> None:
    """What a terminal's Ctrl-C does: SIGINT to the whole process group ``process`` leads."""
    os.killpg(process.pid, signal.SIGINT)
