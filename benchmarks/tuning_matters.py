"""Whether the knobs matter on a task: over a curve table of random configurations, each run on several seeds, how
far the best configuration's mean lies above the median configuration's, against the seeds' own spread.

    python -m benchmarks.tuning_matters --table benchmarks/results/curve_tables/curve_table_smollm2_v3.jsonl \
        [--out FILE] [--quick]

A run's score is the mean held-out gold of its last ``--last`` evaluations (a study's ``mean_last_k``); a run that
failed or stopped early scores its last evaluations as it ran them, and one with no evaluation is left out. Per
configuration, the mean over its seeds; reported: the best and the median configuration's means, their difference,
the pooled seed-to-seed standard deviation (the root of the mean over configurations of each one's variance over
its seeds) and the ratio of the difference to it. The pre-registered goal (benchmarks/README.md, "Pre-registered:
the tuner on the third text task"): a difference of at least 0.05 and at least twice the seed SD. ``--quick``: a
table of 3 configurations x 2 seeds written here, no training.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

GOAL_GAP = 0.05
GOAL_SEED_MULTIPLE = 2.0


def run_score(run: dict[str, Any], last: int) -> float | None:
    """Mean held-out gold over the run's last ``last`` evaluations; None for a run with none."""
    golds = [point["eval/gold_score"] for point in run.get("evals", []) if "eval/gold_score" in point]
    return statistics.fmean(golds[-last:]) if golds else None


def pooled_seed_sd(scores: dict[int, list[float]]) -> float:
    """sqrt(mean over configurations with two or more seeds of the sample variance over their seeds)."""
    variances = [statistics.variance(values) for values in scores.values() if len(values) > 1]
    return math.sqrt(statistics.fmean(variances)) if variances else math.nan


def summarise(runs: list[dict[str, Any]], last: int) -> dict[str, Any]:
    """Per configuration, its seeds' scores and mean; the best and median means, their gap and the seed SD."""
    scores: dict[int, list[float]] = defaultdict(list)
    for run in runs:
        score = run_score(run, last)
        if score is not None:
            scores[int(run["config_id"])].append(score)
    means = {config: statistics.fmean(values) for config, values in sorted(scores.items())}
    best = max(means, key=means.__getitem__)
    median = statistics.median(means.values())
    seed_sd = pooled_seed_sd(scores)
    gap = means[best] - median
    return {
        "configs": len(means), "runs": sum(len(values) for values in scores.values()),
        "scores": {str(config): values for config, values in sorted(scores.items())},
        "means": {str(config): value for config, value in means.items()},
        "best_config": best, "best_mean": means[best], "median_mean": median, "gap": gap, "seed_sd": seed_sd,
        "gap_over_seed_sd": gap / seed_sd if seed_sd > 0 else math.inf,
        "goal_met": gap >= GOAL_GAP and gap >= GOAL_SEED_MULTIPLE * seed_sd,
    }


def quick_table(directory: Path) -> Path:
    """3 configurations x 2 seeds with made-up evaluations: the reading, not a measurement."""
    path = directory / "table.jsonl"
    rows = [{"config_id": config, "seed": seed, "evals": [{"update": 8, "eval/gold_score": 0.3},
                                                          {"update": 16, "eval/gold_score": 0.3 + 0.1 * config
                                                           + 0.01 * seed}]}
            for config in range(3) for seed in range(2)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tuning_matters", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=None)
    parser.add_argument("--last", type=int, default=2, help="evaluations a run's score averages (default 2)")
    parser.add_argument("--out", type=Path, default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    table = quick_table(Path(tempfile.mkdtemp())) if args.quick else args.table
    if table is None or not table.is_file():
        parser.error(f"--table: no file {table}")
    runs = [json.loads(line) for line in table.read_text().splitlines() if line.strip()]
    if not runs:
        parser.error(f"--table: {table} holds no runs")
    result = {"command": command_line("benchmarks.tuning_matters", argv), "code": commit_at_start(),
              "table": str(table), "last": args.last, **summarise(runs, args.last)}
    out = results_path(args.out, RESULTS / "tuning_matters" / "tuning_matters.json", args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['configs']} configurations, {result['runs']} runs: best {result['best_mean']:.4f} (configuration "
          f"{result['best_config']}), median {result['median_mean']:.4f}, gap {result['gap']:+.4f}; seed SD "
          f"{result['seed_sd']:.4f} ({result['gap_over_seed_sd']:.1f}x); goal met: {result['goal_met']}")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
