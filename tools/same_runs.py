"""Whether ppo_core trains the same at two commits: each config trained at BASE and at HEAD (each commit's own code,
unpacked from git), and their metrics compared update by update, key by key, to the last digit.

    python -m tools.same_runs BASE [--head REV] [--config FILE ...] [--set KEY=VALUE ...] [--out FILE]

A figure measured at an older commit still describes HEAD's trainer where its runs are the same at both: this is the
check an index row's "stands through" note cites (tools.stale_figures). Timings (``time/*``, ``perf/*`` and the
like, :data:`TIMING_PREFIXES`) differ between any two runs and are left out; so are the metrics one side has and the
other does not (a metric added later describes nothing the older figure read), which are listed. Runs use one thread
each and the same machine, so equal code gives equal numbers.

Exit status 0 when every config's runs are the same, 1 when one differs (the first difference is printed), 2 for
bad input (a revision git does not know, a config that does not exist).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.provenance import REPO_ROOT, command_line

TIMING_PREFIXES = ("time/", "perf/", "memory/", "throughput/")
"""Metric groups that measure the machine, not the optimisation: never compared. (``precision/*`` is compared:
a run that chose bf16 on one side and float32 on the other is not the same run.)"""
DEFAULT_CONFIGS = ("studies/train.yaml",)


@dataclass
class Comparison:
    """One config's runs at the two commits: the updates compared, the first difference (None when the same), and
    the metrics only one side reported."""

    config: str
    updates: int
    difference: str | None
    only_base: list[str] = field(default_factory=list)
    only_head: list[str] = field(default_factory=list)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compared(key: str) -> bool:
    return not key.startswith(TIMING_PREFIXES)


def first_difference(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> str | None:
    """The first update and key whose values differ (NaN equals NaN), or where the runs' lengths differ; None when
    every shared key of every update is equal."""
    if len(base) != len(head):
        return f"{len(base)} updates at the base, {len(head)} at the head"
    for number, (old, new) in enumerate(zip(base, head, strict=True), 1):
        for key in sorted(set(old) & set(new)):
            a, b = old[key], new[key]
            same = a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
            if compared(key) and not same:
                return f"update {number}, {key}: {a!r} at the base, {b!r} at the head"
    return None


def unpack(revision: str, into: Path) -> Path:
    """The tree of ``revision`` written into ``into`` (``git archive``, no worktree to clean up)."""
    archive = subprocess.run(["git", "archive", "--format=tar", revision], cwd=REPO_ROOT, capture_output=True,
                             check=True).stdout
    into.mkdir(parents=True)
    tar_path = into.with_suffix(".tar")
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    tar_path.unlink()
    return into


def train(tree: Path, config: str, overrides: list[str], output: Path) -> list[dict[str, Any]]:
    """One ``ppo-tune train`` run of ``config`` by the code in ``tree``, on one thread; its metrics."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "ppo_tune", "train", str(REPO_ROOT / config), "--output", str(output),
               "--quiet", *[part for item in overrides for part in ("--set", item)]]
    finished = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        raise RuntimeError(f"{config} at {tree.name}: exit {finished.returncode}: {finished.stderr.strip()[-400:]}")
    return read_metrics(output / "metrics.jsonl")


def same_runs(base: str, head: str, configs: list[str], overrides: list[str], work: Path) -> list[Comparison]:
    trees = {name: unpack(revision, work / name) for name, revision in (("base", base), ("head", head))}
    found = []
    for number, config in enumerate(configs):
        runs = {name: train(tree, config, overrides, work / f"{name}-run{number}") for name, tree in trees.items()}
        keys = {name: {key for row in rows for key in row if compared(key)} for name, rows in runs.items()}
        found.append(Comparison(config, len(runs["head"]), first_difference(runs["base"], runs["head"]),
                                sorted(keys["base"] - keys["head"]), sorted(keys["head"] - keys["base"])))
    return found


def resolved(revision: str) -> str | None:
    done = subprocess.run(["git", "rev-parse", "--short", f"{revision}^{{commit}}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.same_runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit a figure was measured at")
    parser.add_argument("--head", default="HEAD", help="the commit to compare it with (default HEAD)")
    parser.add_argument("--config", action="append", dest="configs", help="a run config, repeatable (default: "
                        + ", ".join(DEFAULT_CONFIGS) + ")")
    parser.add_argument("--set", action="append", dest="overrides", default=[], metavar="KEY=VALUE",
                        help="a PPOConfig field for every run, repeatable (e.g. total_episodes=64 for a short run)")
    parser.add_argument("--out", type=Path, help="also write the comparison here as JSON")
    args = parser.parse_args(argv)
    configs = args.configs or list(DEFAULT_CONFIGS)
    revisions = {name: resolved(getattr(args, name)) for name in ("base", "head")}
    for name, revision in revisions.items():
        if revision is None:
            print(f"same_runs: {name} {getattr(args, name)!r} is no commit of this repository", file=sys.stderr)
            return 2
    for config in configs:
        if not (REPO_ROOT / config).is_file():
            print(f"same_runs: no config {config!r} in the repository", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="same-runs-") as work:
        found = same_runs(str(revisions["base"]), str(revisions["head"]), configs, args.overrides, Path(work))
    for comparison in found:
        verdict = "the same" if comparison.difference is None else f"differ: {comparison.difference}"
        print(f"{comparison.config}: {comparison.updates} updates {verdict}")
        for side in ("base", "head"):
            extra = getattr(comparison, f"only_{side}")
            if extra:
                print(f"  only at the {side}, not compared: {', '.join(extra)}")
    if args.out:
        args.out.write_text(json.dumps({"command": command_line("tools.same_runs", argv), **revisions,
                                        "comparisons": [asdict(c) for c in found]}, indent=1) + "\n")
    return 0 if all(c.difference is None for c in found) else 1


if __name__ == "__main__":
    raise SystemExit(main())
