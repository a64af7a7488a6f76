"""``ppo-tune``: one parser built from each part's subcommands, one place that turns bad input into one line."""

from __future__ import annotations

import argparse
import sys

from dashboard.launch import add_dashboard_arguments, dashboard_command
from ppo_core.cli import add_train_command
from ppo_core.errors import InputError, NonFiniteError, first_line
from ppo_core.quiet import quiet_hugging_face
from tuner.cli import add_study_commands

EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 1


def build_parser() -> argparse.ArgumentParser:
    """``train`` (ppo_core), ``run``/``list``/``show``/``best`` (tuner) and ``dashboard``; each sets ``handler``."""
    parser = argparse.ArgumentParser(prog="ppo-tune", description="Find PPO (RLHF) hyperparameters that work.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_train_command(commands)
    add_study_commands(commands)
    dashboard = commands.add_parser("dashboard", help="Explore studies in a browser (Streamlit).")
    add_dashboard_arguments(dashboard)
    dashboard.set_defaults(handler=dashboard_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; its exit status, 2 with one line on stderr for bad input, 1 when training diverged."""
    quiet_hugging_face()
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except InputError as error:
        print(f"ppo-tune {args.command}: error: {first_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NonFiniteError as error:
        print(f"ppo-tune {args.command}: diverged: {first_line(error)}", file=sys.stderr)
        return EXIT_DIVERGED


if __name__ == "__main__":
    sys.exit(main())
