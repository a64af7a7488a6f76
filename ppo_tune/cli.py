"""``ppo-tune``: one parser built from each part's subcommands, one place that turns every error into one line.

Bad input exits 2, a divergence or a failure at run time (a full disk) exits 1, Ctrl-C exits 130 and SIGTERM 143,
each with one line
on stderr. Anything else is a bug: one line says where its traceback was written, and ``--debug`` prints it instead.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback

from dashboard.serve import add_dashboard_arguments, dashboard_command
from ppo_core.cli import add_train_command
from ppo_core.errors import (
    InputError,
    NonFiniteError,
    RunFailure,
    Terminated,
    context_of,
    first_line,
    sigterm_as_interrupt,
)
from ppo_core.models.quiet import quiet_hugging_face
from ppo_tune.show_frontier import show_with_frontier
from tuner.cli import add_study_commands
from tuner.trial.frozen_heap import run_as_process

EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 1
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
EXIT_TERMINATED = 143  # 128 + SIGTERM
DEBUG_HELP = "On an unexpected error, print the full traceback rather than write it to a file."


def build_parser() -> argparse.ArgumentParser:
    """``train`` (ppo_core), ``run``/``list``/``show``/``best`` (tuner) and ``dashboard``; each sets ``handler``."""
    parser = argparse.ArgumentParser(prog="ppo-tune", description="Find PPO (RLHF) hyperparameters that work.")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    add_train_command(commands)
    add_study_commands(commands)
    commands.choices["show"].set_defaults(handler=show_with_frontier)  # the tuner's show, and the page's reading
    dashboard = commands.add_parser("dashboard", help="Explore studies in a browser (Streamlit).")
    add_dashboard_arguments(dashboard)
    dashboard.set_defaults(handler=dashboard_command)
    for command in commands.choices.values():
        # ``ppo-tune train x.yaml --debug`` as well as ``ppo-tune --debug train x.yaml``; SUPPRESS keeps the top
        # level's value when the flag comes before the command.
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def entry_point() -> int:
    """``ppo-tune`` as a process of its own (the console script, ``python -m ppo_tune``): :func:`main` with the
    process's heap frozen (``tuner.trial.frozen_heap``), which a caller of :func:`main` in-process must not have."""
    return run_as_process(main)


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; its exit status, with one line on stderr for anything that went wrong."""
    quiet_hugging_face()
    args = build_parser().parse_args(argv)
    sigterm_as_interrupt()  # a scheduler's SIGTERM stops children and re-queues work, as Ctrl-C does
    try:
        return int(args.handler(args))
    except (Exception, KeyboardInterrupt) as error:
        return report(error, f"ppo-tune {args.command}", args.debug)


def report(error: BaseException, prefix: str, debug: bool) -> int:
    """Print ``error`` as one line on stderr, after its traceback with ``debug``; the exit status it calls for."""
    if debug:
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    if isinstance(error, InputError):
        line, status = f"error: {first_line(error)}", EXIT_BAD_INPUT
    elif isinstance(error, NonFiniteError):
        line, status = f"diverged: {first_line(error)}", EXIT_DIVERGED
    elif isinstance(error, Terminated):
        line, status = "; ".join(["terminated (SIGTERM)", *context_of(error)]), EXIT_TERMINATED
    elif isinstance(error, KeyboardInterrupt):
        line, status = "; ".join(["interrupted", *context_of(error)]), EXIT_INTERRUPTED
    elif isinstance(error, (RunFailure, OSError)):
        line, status = f"failed: {first_line(error)}", EXIT_FAILED
    else:
        line, status = f"unexpected error: {type(error).__name__}: {first_line(error)}", EXIT_FAILED
        if not debug:
            line += _write_traceback(error)
    print(f"{prefix}: {line}", file=sys.stderr)
    return status


def _write_traceback(error: BaseException) -> str:
    """Write the traceback of ``error`` to a new file in the temporary directory; where, for the error's line (or,
    when no file can be written, the traceback itself on stderr)."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        with tempfile.NamedTemporaryFile("w", prefix="ppo-tune-", suffix=".traceback.txt", delete=False,
                                         encoding="utf-8") as file:
            file.write(text)
    except OSError:
        print(text, end="", file=sys.stderr)
        return ""
    return f" (full traceback in {file.name}; --debug prints it)"


if __name__ == "__main__":
    sys.exit(entry_point())
