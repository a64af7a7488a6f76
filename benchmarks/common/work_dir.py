"""A resumable measurement's work directory: ``--work-dir`` and ``--resume``, and the refusal to mix a new run into
an earlier one's files."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_work_dir_arguments(parser: argparse.ArgumentParser, holds: str) -> None:
    """``--work-dir`` (``holds``: what the directory keeps) and ``--resume``."""
    parser.add_argument("--work-dir", default=None, help=f"{holds} (kept for --resume).")
    parser.add_argument("--resume", action="store_true", help="Go on with an interrupted run in --work-dir.")


def prepared_work_dir(args: argparse.Namespace, default: Path) -> Path:
    """``--work-dir`` (``default`` when not given), made; one holding an earlier run is refused without
    ``--resume``, since a new run would mix its studies with that run's."""
    work_dir = Path(args.work_dir) if args.work_dir else default
    if work_dir.exists() and any(work_dir.iterdir()) and not args.resume:
        raise SystemExit(f"--work-dir: {work_dir} holds an earlier run; add --resume to go on with it")
    work_dir.mkdir(parents=True, exist_ok=True)
    return work_dir
