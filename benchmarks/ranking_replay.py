"""How a race ranks its configurations, replayed: the tuner at a base commit against the tuner as it is, on every
curve table, repeat by repeat.

A race's winner is the first of ``tuner.study.seed_policy.ranked``. This runs ``python -m benchmarks.replay`` twice
per table, with the same strategies, repeats and seeds: once importing ``tuner`` as ``--base`` has it (extracted
beside the repository), once as the working tree has it. Repeat r of one run and repeat r of the other propose the
same trials until their rankings first differ, so the two are paired. For each table and strategy it reports the
mean paired difference in final regret (the best TRUE value minus the winner's; lower is better), current minus
base, with its 95% t interval, the same for updates to the target, and how many repeats chose another winner.

    python -m benchmarks.ranking_replay --base 44cc791   # writes results/ranking_replay/ranking_replay.json
    python -m benchmarks.ranking_replay --base HEAD --quick --out /tmp/ranking.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scipy import stats  # type: ignore[import-untyped]

from benchmarks.common.machine import cpu_model
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, ROOT, add_quick_argument, results_path

OUT = RESULTS / "ranking_replay" / "ranking_replay.json"
TABLES = RESULTS / "curve_tables"
PAIRS: dict[str, str] = {
    "curve_table.jsonl": "table_space.yaml",
    "curve_table_task1.jsonl": "table_space.yaml",
    "curve_table_task2.jsonl": "table_space.yaml",
    "curve_table_task3.jsonl": "table_space.yaml",
    "curve_table_text.jsonl": "text_table_space.yaml",
    "curve_table_smollm2_v3.jsonl": "smollm2_v3_table_space.yaml",
    "curve_table_smollm2_v5.jsonl": "smollm2_v5_table_space.yaml",
    "curve_table_smollm2_v6.jsonl": "smollm2_v6_table_space.yaml",
    "curve_table_smollm2_v7.jsonl": "smollm2_v7_table_space.yaml",
}
"""Every stored curve table, with the study file (under benchmarks/) whose space it was drawn from."""
STRATEGIES = ("tpe_multivariate_race_late_s3", "frontier_race_late_s3", "racing")
"""The racing strategies that run a configuration on three seeds, where the ranking changed. With two seeds at most
(the default seed policy) the two rankings agree by construction: among configurations on two seeds, shrinking by
one factor keeps the means' order, and those on one seed rank after them in both."""


def base_tree(commit: str, directory: Path) -> Path:
    """``tuner`` as ``commit`` has it, extracted under ``directory`` (ahead of the repository on the path)."""
    directory.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit, "tuner"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
    return directory


def replay(tree: Path | None, table: Path, space: Path, strategies: Sequence[str], repeats: int,
           out: Path, quick: bool) -> dict[str, Any]:
    """One ``benchmarks.replay`` run, importing ``tuner`` from ``tree`` first when given."""
    path = os.pathsep.join([*([str(tree)] if tree else []), str(ROOT)])
    command = [sys.executable, "-m", "benchmarks.replay", "--table", str(table), "--space", str(space),
               "--repeats", str(repeats), "--seed", "0", "--workers", "1", "--strategies", *strategies,
               "--format", "json", "--out", str(out), *(["--quick"] if quick else [])]
    finished = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": path}, capture_output=True,
                              text=True, check=False)
    if finished.returncode != 0:
        raise SystemExit(f"replay of {table.name} failed:\n{finished.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def paired(now: Sequence[float], before: Sequence[float]) -> dict[str, float]:
    """The mean of now - before with its 95% t interval."""
    differences = [a - b for a, b in zip(now, before, strict=True)]
    mean = statistics.fmean(differences)
    spread = statistics.stdev(differences) if len(differences) > 1 else 0.0
    half = float(stats.t.ppf(0.975, len(differences) - 1)) * spread / math.sqrt(len(differences)) \
        if len(differences) > 1 else math.nan
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half}


def compare(now: dict[str, Any], before: dict[str, Any], strategy: str) -> dict[str, Any]:
    a, b = now["strategies"][strategy]["repeats"], before["strategies"][strategy]["repeats"]
    return {"repeats": len(a), "winner_changed": sum(x["winner"] != y["winner"] for x, y in zip(a, b, strict=True)),
            "regret": paired([x["regret"] for x in a], [y["regret"] for y in b]),
            "updates_to_target": paired([x["updates_to_target"] for x in a], [y["updates_to_target"] for y in b]),
            "regret_mean": {"now": statistics.fmean(x["regret"] for x in a),
                            "base": statistics.fmean(y["regret"] for y in b)}}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ranking_replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the commit whose tuner to compare with")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--tables", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--out", default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    out = results_path(args.out, OUT, args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    tables = args.tables[:1] if args.quick else args.tables
    done: dict[str, Any] = json.loads(out.read_text()).get("tables", {}) if out.exists() and not args.quick else {}
    with tempfile.TemporaryDirectory() as work:
        tree = base_tree(args.base, Path(work) / "base")
        for name in tables:
            if name in done:  # a long measurement resumes: tables already compared are kept
                continue
            table, space = TABLES / name, ROOT / "benchmarks" / PAIRS[name]
            repeats = 2 if args.quick else args.repeats
            before = replay(tree, table, space, STRATEGIES, repeats, Path(work) / f"base_{name}.json", args.quick)
            now = replay(None, table, space, STRATEGIES, repeats, Path(work) / f"now_{name}.json", args.quick)
            done[name] = {strategy: compare(now, before, strategy) for strategy in STRATEGIES}
            result = {"command": command_line("benchmarks.ranking_replay", argv), "commit": commit_at_start(),
                      "base": args.base, "machine": cpu_model(), "tables": done}
            out.write_text(json.dumps(result, indent=1) + "\n")
            print(name, {s: (c["winner_changed"], round(c["regret"]["mean"], 4)) for s, c in done[name].items()},
                  flush=True)


if __name__ == "__main__":
    main()
