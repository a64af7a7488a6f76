"""``ppo-tune dashboard``: start the Streamlit app on this machine.

The storage URL reaches the app through the ``PPO_TUNE_STORAGE`` environment variable rather than the
command line, so a PostgreSQL password in it does not show in ``ps``. ``streamlit run
dashboard/app.py -- --storage URL`` works as well.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

# Only the standard library and tuner.store.default_storage: every ``ppo-tune`` command imports this module to build
# its parser.
from tuner.store.default_storage import DEFAULT_STUDIES_DIR

STORAGE_ENV = "PPO_TUNE_STORAGE"  # read by dashboard.study_reader.storage_urls
APP_PATH = Path(__file__).resolve().parent / "app.py"
DEFAULT_HOST = "127.0.0.1"


def add_dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage", default=None,
                        help=f"Optuna storage URL (default: every {DEFAULT_STUDIES_DIR}/*.db in this directory).")
    parser.add_argument("--port", type=int, default=None,
                        help="Port to serve on (default: Streamlit's 8501, or the next free one).")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"Address to bind (default {DEFAULT_HOST}: this machine only; 0.0.0.0 for all).")


def streamlit_command(args: argparse.Namespace) -> list[str]:
    """The ``python -m streamlit run`` command line for these arguments."""
    command = [
        sys.executable, "-m", "streamlit", "run", str(APP_PATH),
        "--server.address", args.host,
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        # The app's files do not change under a user; watching them costs CPU beside running trials.
        "--server.fileWatcherType", "none",
        "--client.toolbarMode", "viewer",  # no developer menu or Deploy button: this is a tool, not a project
    ]
    if args.port is not None:
        command += ["--server.port", str(args.port)]
    return command


class Terminated(Exception):
    """SIGTERM reached ``ppo-tune dashboard``."""


def _terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def check_storages(storage: str | None) -> None:
    """Refuse, before any server starts, a ``--storage`` the app could not read (raises ``StorageError``); of the
    databases found under ``studies/``, name each unreadable one in a line on stderr (the app shows the others)."""
    # Here, not at the top: every ``ppo-tune`` command imports this module, and these load SQLAlchemy and Optuna.
    from ppo_core.errors import first_line
    from tuner.store.database import StorageError, check_readable
    from tuner.store.default_storage import storage_urls

    for url in storage_urls(storage):
        try:
            check_readable(url)
        except StorageError as error:
            if storage:
                raise
            print(f"ppo-tune dashboard: warning: {first_line(error)}; not shown", file=sys.stderr)


def dashboard_command(args: argparse.Namespace) -> int:
    """Run the dashboard until it is stopped; returns its exit status (130 on Ctrl-C, 143 on SIGTERM, which stops
    the server too)."""
    if args.port is not None and not 0 < args.port < 65536:
        print(f"ppo-tune dashboard: error: --port: must be 1-65535, got {args.port}", file=sys.stderr)
        return 2
    check_storages(args.storage)
    environment = dict(os.environ)
    if args.storage:
        environment[STORAGE_ENV] = args.storage
    where = args.storage or f"{DEFAULT_STUDIES_DIR}/*.db"
    print(f"ppo-tune dashboard: studies from {where}; press Ctrl-C to stop", file=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        process = subprocess.Popen(streamlit_command(args), env=environment)
        try:
            return process.wait()
        except KeyboardInterrupt:
            # From a terminal Streamlit got the same SIGINT; from anything else pass it on. Then let it close.
            stop(process, signal.SIGINT)
            return 130
        except Terminated:
            # A SIGTERM goes to this process alone (a service manager's stop, ``kill``): the server would go on
            # serving without it.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the stopping short
            stop(process, signal.SIGTERM)
            return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 10) -> None:
    """Send the server ``sig`` and wait for it to close; kill it if it is still running after ``timeout`` s."""
    process.send_signal(sig)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
