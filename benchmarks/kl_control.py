"""Adaptive against fixed KL control in the curve tables: does the adaptive controller steer KL in runs this short,
and does it buy gold a fixed coefficient does not?

    python -m benchmarks.kl_control [--table FILE ...] [--out FILE] [--quick]

For each table (default: task seeds 0, 1 and 2, ``benchmarks/results/curve_tables/curve_table*.jsonl``) every
configuration is judged as the replay judges it (``benchmarks.replay.table``: the space's objective averaged over the
table's seeds, its TRUE value) with its final held-out KL averaged alike. Reported per table:

- the Spearman correlation of the adaptive configurations' final KL with their ``kl_target`` (1: the target sets
  the KL; 0: it does not steer);
- the mean TRUE value of fixed and of adaptive configurations in each band of final KL (at the same KL, does the
  controller add anything?);
- how many of the configurations within 5% of the table's best are fixed, against the share of fixed ones in the
  table;
- the most the controller could have moved its coefficient over the table's runs
  (``ppo_core.algorithm.kl_reach.adaptive_reach``).

``--quick``: the first 24 configurations of table 0, results in ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.json_safe import json_safe
from benchmarks.curve_table import TABLE, TABLE_SPACE
from ppo_core.tasks.ranks import rank_correlation
from tools.provenance import commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

TABLES = (TABLE, TABLE.parent / "curve_table_task1.jsonl", TABLE.parent / "curve_table_task2.jsonl")
KL_BANDS = ((0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 5.0), (5.0, math.inf))
"""Bands of final held-out KL, in nats, the comparison is made within."""
WITHIN = 0.05
"""A configuration is among the best when its TRUE value is within this share of the table's best."""
QUICK_CONFIGS = 24


def band_means(rows: Sequence[tuple[str, float, float]]) -> list[dict[str, Any]]:
    """Per band of final KL and per control (``fixed``, ``adaptive``): the count and mean value of the rows
    (control, final KL, value) whose KL lies in [low, high) (an open top band's high is None)."""
    out = []
    for low, high in KL_BANDS:
        entry: dict[str, Any] = {"kl_low": low, "kl_high": high if math.isfinite(high) else None}  # JSON: no inf
        for control in ("fixed", "adaptive"):
            values = [value for name, kl, value in rows if name == control and low <= kl < high]
            entry[control] = {"n": len(values), "mean": float(np.mean(values)) if values else None}
        out.append(entry)
    return out


def table_summary(path: Path, configs: int | None = None) -> dict[str, Any]:
    """The comparison for one table (its first ``configs`` configurations, or all)."""
    from benchmarks.replay.table import load_table
    from ppo_core.algorithm.kl_reach import adaptive_reach
    from tuner.study.study_file import load_study_spec

    spec = load_study_spec(TABLE_SPACE)
    table = load_table(path, spec.objectives[0], spec.constraints, None, spec.base)
    chosen = [config for config in table.configs.values() if not math.isnan(config.true_value)]
    chosen = sorted(chosen, key=lambda config: config.config_id)[:configs]
    rows, targets, target_kls = [], [], []
    for config in chosen:
        kls = [run.evals[-1]["eval/kl"] for run in config.runs.values() if run.evals and "eval/kl" in run.evals[-1]]
        if not kls:
            continue
        control = config.params.get("kl_control", "fixed")
        final_kl = float(np.mean(kls))
        rows.append((control, final_kl, config.true_value))
        if control == "adaptive":
            targets.append(config.params["kl_target"])
            target_kls.append(final_kl)
    best = max(value for _, _, value in rows)
    top = [control for control, _, value in rows if value >= best - WITHIN * abs(best)]
    episodes, horizon = int(spec.base["total_episodes"]), int(spec.base["kl_horizon"])
    rollouts = sorted({int(config.params["rollout_batch_size"]) for config in chosen})
    return {
        "table": path.name, "configs": len(rows), "best": best,
        "spearman_final_kl_with_kl_target": rank_correlation(targets, target_kls),
        "adaptive_reach": max(adaptive_reach(episodes, n, horizon) for n in rollouts),
        "total_episodes": episodes, "kl_horizon": horizon,
        "top": len(top), "top_fixed": top.count("fixed"),
        "fixed_share": sum(control == "fixed" for control, _, _ in rows) / len(rows),
        "bands": band_means(rows),
    }


def markdown(results: list[dict[str, Any]]) -> str:
    def mean(cell: dict[str, Any]) -> str:
        return "-" if cell["mean"] is None else f"{cell['mean']:.3f} ({cell['n']})"

    lines = ["| table | configs | Spearman(final KL, kl_target) | reach | within 5%: fixed / all (fixed share) | "
             + " | ".join(f"KL {b[0]:g}-{b[1]:g}: fixed / adaptive" for b in KL_BANDS) + " |",
             "|---" * (5 + len(KL_BANDS)) + "|"]
    for r in results:
        bands = " | ".join(f"{mean(b['fixed'])} / {mean(b['adaptive'])}" for b in r["bands"])
        lines.append(f"| {r['table']} | {r['configs']} | {r['spearman_final_kl_with_kl_target']:.2f} | "
                     f"x{r['adaptive_reach']:.2f} | {r['top_fixed']} / {r['top']} ({r['fixed_share']:.2f}) | {bands} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kl_control", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, action="append", default=None,
                        help="A curve table (repeatable; default: task seeds 0, 1 and 2).")
    parser.add_argument("--out", default=None, help="Results file (default "
                                                    "benchmarks/results/kl_control/kl_control.json).")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    for path in args.table or []:
        if not path.is_file():
            parser.error(f"--table: no such file: {path}")
    tables = args.table or ([TABLE] if args.quick else list(TABLES))
    results = [table_summary(path, QUICK_CONFIGS if args.quick else None) for path in tables]
    out = results_path(args.out, RESULTS / "kl_control" / "kl_control.json", args.quick)
    out.write_text(json.dumps(json_safe({"code": commit_at_start(), "tables": results}), indent=2) + "\n")
    print(markdown(results))
    print(f"results: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
