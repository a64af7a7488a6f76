"""The ``ppo-tune`` command: ``train`` one run, and the study commands."""

from __future__ import annotations

import argparse
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    from ppo_core.cli import add_train_arguments

    parser = argparse.ArgumentParser(prog="ppo-tune", description="Find PPO (RLHF) hyperparameters that work.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_train_arguments(commands.add_parser("train", help="Run one PPO run from a config file."))
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    args = build_parser().parse_args(argv)
    if args.command == "train":
        from ppo_core.cli import train_command

        return train_command(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
