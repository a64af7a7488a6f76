"""The landscape of a curve table, read at every held-out evaluation of every run: how much of KL and of gold the
step mass explains, where gold peaks in KL, and gold by KL. The figures the graph task's tables gave
(../shared/notes/tuning-landscape.md: R² 0.96 for log KL on log step mass, 0.47-0.63 for gold, gold best at 1-2
nats), computed the same way for any table, so another task family can be set beside them.

    python -m benchmarks.table_landscape --table benchmarks/results/curve_tables/curve_table_text.jsonl \\
        --space benchmarks/text_table_space.yaml [--out FILE] [--quick]

The step mass at an evaluation after u updates is lr · u · K · N (K epochs, N mini-batches: the tuner's own,
``tuner.search.kl_model.mass_factors``), the point's values over the space's base as a trial gets them. A run that
diverged contributes the evaluations it finished. Results: ``--out`` (default
``benchmarks/results/table_landscape/table_landscape_<table>.json``) and a markdown table on stdout. ``--quick``: the
table's first 40 rows, results in ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from benchmarks.common.json_safe import json_safe
from benchmarks.common.landscape import EvalPoint, landscape
from benchmarks.curve_table import TABLE_SPACE
from benchmarks.replay.table import table_rows
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path
from tuner.search.kl_model import mass_factors

KL_EDGES = (-math.inf, 1.0, 2.0, 5.0, 10.0, 20.0, math.inf)
"""Nats: the bins gold is averaged over (the SmolLM2 study's, beside the graph task's 1-2 nats); the first takes the
estimates below zero of a policy that has barely moved."""
QUICK_ROWS = 40
GOLD, KL = "eval/gold_score", "eval/kl"


def eval_points(row: dict[str, Any], base: dict[str, Any]) -> list[EvalPoint]:
    """Every held-out evaluation of one table row with a finite gold and KL, at its step mass so far."""
    factors = mass_factors(row["params"], base)
    per_update = factors["learning_rate"] * factors["num_ppo_epochs"] * factors["num_mini_batches"]
    points = []
    for evaluation in row.get("evals") or []:
        gold, kl, update = evaluation.get(GOLD), evaluation.get(KL), evaluation.get("update")
        if isinstance(gold, (int, float)) and isinstance(kl, (int, float)) and math.isfinite(gold) \
                and math.isfinite(kl) and isinstance(update, int) and update > 0:
            points.append(EvalPoint(math.log10(per_update * update), float(kl), float(gold)))
    return points


def table_landscape(table: Path, base: dict[str, Any], rows: int | None = None) -> dict[str, Any]:
    read = table_rows(table, rows)
    points = [point for row in read for point in eval_points(row, base)]
    found = landscape(points, KL_EDGES)
    # An open end is null in the JSON (strict JSON has no infinity).
    found["gold_by_kl"] = [{**b, **{end: None for end in ("kl_low", "kl_high") if math.isinf(b[end])}}
                           for b in found["gold_by_kl"]]  # type: ignore[attr-defined]
    return {"table": table.name, "rows": len(read), **found}


def _bin(low: float | None, high: float | None) -> str:
    return f"< {high:g}" if low is None else f"> {low:g}" if high is None else f"{low:g}-{high:g}"


def markdown(result: dict[str, Any]) -> str:
    best = result["best_gold"] or {}
    bins = "; ".join(f"{_bin(b['kl_low'], b['kl_high'])}: {b['mean_gold']:.3f} ({b['n']})"
                     for b in result["gold_by_kl"])
    return "\n".join([
        "| table | rows | evaluations | R² log KL on log step mass | R² gold on log step mass (quadratic) | highest "
        "gold, at KL | mean gold by KL (nats) |",
        "|---|---|---|---|---|---|---|",
        f"| {result['table']} | {result['rows']} | {result['points']} | {result['r2_log_kl_on_mass']:.2f} | "
        f"{result['r2_gold_on_mass_quadratic']:.2f} | {best.get('gold', math.nan):.3f} at "
        f"{best.get('kl', math.nan):.2f} | {bins} |",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.table_landscape", description=__doc__.split("\n")[0])
    parser.add_argument("--table", type=Path, required=True, help="A curve table (JSON lines).")
    parser.add_argument("--space", type=Path, default=TABLE_SPACE,
                        help="The study file the table was drawn from (its base); default the graph tables'.")
    parser.add_argument("--out", default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if not args.table.is_file():
        print(f"--table: no such file: {args.table}", file=sys.stderr)
        return 2
    from tuner.study.study_file import load_study_spec

    base = load_study_spec(args.space).base
    result = {"command": command_line("benchmarks.table_landscape", argv),
              "code": commit_at_start(), "quick": args.quick,
              **table_landscape(args.table, base, QUICK_ROWS if args.quick else None)}
    out = results_path(args.out, RESULTS / "table_landscape" / f"table_landscape_{args.table.stem}.json", args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(result), indent=2) + "\n")
    print(markdown(result))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
