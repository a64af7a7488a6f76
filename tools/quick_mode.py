"""Quick modes: the ``--quick`` every runnable benchmark has, and where its results may go.

A quick run is a smoke run of the full one: tiny sizes and a few updates, seconds rather than minutes, through the
same code and producing every figure the full run reports (test_benchmark_quick_modes.py, under
tests/test_benchmarks_and_tools/, checks that each figure is there and finite). Its numbers mean nothing, so it never
writes into ``benchmarks/results/`` (the committed results) or into a README: it writes to ``--out`` when given, else
to a temporary directory.

    python -m benchmarks.trl_comparison --quick --out /tmp/bench.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

QUICK_HELP = ("a smoke run in seconds: tiny sizes, a few updates, every figure of the full run; results go to --out "
              "or a temporary directory, never to benchmarks/results/ or a README")


def add_quick_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)


def under_results(path: Path) -> bool:
    return path.resolve().is_relative_to(RESULTS.resolve())


def results_path(out: Path | str | None, default: Path, quick: bool) -> Path:
    """Where a run writes its results: ``out`` when given, else ``default`` (under benchmarks/results/); for a quick
    run ``out`` or a new temporary directory, and never a path under benchmarks/results/."""
    if not quick:
        return Path(out) if out is not None else default
    if out is not None:
        if under_results(Path(out)):
            raise SystemExit(f"--quick: {out} is under benchmarks/results/, which holds the committed results of "
                             "full runs; write a quick run elsewhere")
        return Path(out)
    return Path(tempfile.mkdtemp(prefix="ppo-bench-quick-")) / default.name
