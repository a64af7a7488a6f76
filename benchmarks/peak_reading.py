"""What the Frontier page and Health's advice read from stored runs: where gold peaks in KL, or why no peak is named.

It reads each study in each ``--study-db`` (an Optuna database the tuner wrote) and the run directories given with
``--runs`` (each a ``ppo-tune train`` output with its ``metrics.jsonl``, read as one trial each, all together as one
study), through the one reading of a peak (``tuner.search.peak_reading.read_metrics_peak``: the sampler aims by it, the
page and the advice report it): the status ("peak", "rising", "falling", "unclear", "none"), the peak's KL and its
interval over resampled trials, the curve's rise and fall against the runs' noise, the page's headline in words, the
advice's title, each trial's own gold peak, and the trials whose own path rose and fell clearly
(``tuner.search.peak_reading.own_turns``).

    python -m benchmarks.peak_reading --study-db benchmarks/results/real_model_study/real_model_study_v5/study.db \\
        --runs benchmarks/results/overoptimisation_curve/v5/runs/seed_* \\
        --out benchmarks/results/overoptimisation_curve/v5/peak_reading_v5.json
    python -m benchmarks.peak_reading --quick --out /tmp/peak_reading.json

``--quick`` writes three tiny run directories whose gold rises to a peak at 4 nats and falls past it, and reads them.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy

from benchmarks.common.json_safe import json_safe
from dashboard.advice import peak_advice
from dashboard.frontier_reading import gold_peaks, headline
from dashboard.study_reader import StudyRef, open_reader, study_names
from ppo_core.metric_names import EVAL_GOLD_SCORE, EVAL_KL, EVAL_SCORE
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path
from tuner.search.frontier_points import frontier_source, trajectories
from tuner.search.peak_reading import read_peak

OUT = RESULTS / "overoptimisation_curve" / "peak_reading.json"


def runs_metrics(run_dirs: Sequence[Path]) -> pd.DataFrame:
    """The metrics of ``run_dirs`` as a study's metrics frame: run i is trial i, its rows its ``metrics.jsonl``."""
    frames = []
    for number, run in enumerate(run_dirs):
        frame = pd.read_json(run / "metrics.jsonl", lines=True)
        frames.append(frame.assign(trial_number=number, trial_id=number + 1))
    return pd.concat(frames, ignore_index=True)


def reading_record(metrics: pd.DataFrame) -> dict[str, Any]:
    """The dashboard's reading of one study's metrics (``read_metrics_peak``'s, its trajectories read once), as
    numbers and the words the page and the advice show; NaN as null."""
    source = frontier_source(metrics)
    if not source.has_gold:
        return {"status": "no gold"}
    paths = trajectories(metrics, source)
    reading = read_peak(paths)
    peak, clearance = reading.peak, reading.clearance
    own = gold_peaks(paths)
    return json_safe({
        "status": reading.status, "tuner_status": peak.status, "kl": peak.kl, "kl_low": peak.kl_low,
        "kl_high": peak.kl_high, "inside": peak.inside, "kl_min": peak.kl_min, "kl_max": peak.kl_max,
        "trials": peak.trials, "points": peak.points,
        "rise": clearance.rise, "fall": clearance.fall, "noise": clearance.noise,
        "headline": headline(reading).words, "advice": [item.what for item in peak_advice(reading)],
        "own_turns": [{"trial": turn.trial, "kl": turn.kl, "gold": turn.gold, "rise": turn.rise, "fall": turn.fall}
                      for turn in reading.own],
        "own_peaks": [{"trial": int(trial), "update": int(update), "kl": float(kl), "gold": float(gold)}
                      for trial, update, kl, gold in own[["trial", "update", "kl", "gold"]].to_numpy(dtype=float)],
    })


def study_db_readings(path: Path) -> dict[str, dict[str, Any]]:
    """Each study in the database at ``path``, by name, read as the page reads it."""
    url = f"sqlite:///{path}"
    names = study_names(sqlalchemy.create_engine(url))
    return {name: reading_record(open_reader(StudyRef(url, name)).metrics()) for name in names}


def write_quick_runs(root: Path) -> list[Path]:
    """Three run directories whose held-out gold is 0.7 - 0.1 (ln KL - ln 4)^2 plus a seed's offset, evaluated at
    KL 0.5 to 32 nats: a clear peak at 4 nats."""
    runs = []
    for seed, offset in enumerate((-0.01, 0.0, 0.01)):
        run = root / f"seed_{seed}"
        run.mkdir(parents=True)
        rows = [{"update": float(update), EVAL_KL: kl,
                 EVAL_GOLD_SCORE: 0.7 + offset - 0.1 * (math.log(kl) - math.log(4.0)) ** 2, EVAL_SCORE: math.log(kl)}
                for update, kl in enumerate((0.5 * 1.2 ** (i + seed / 3) for i in range(24)), start=1)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        runs.append(run)
    return runs


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peak_reading", description=__doc__.splitlines()[0])
    parser.add_argument("--study-db", type=Path, nargs="*", default=[], help="SQLite study databases to read")
    parser.add_argument("--runs", type=Path, nargs="*", default=[], help="run directories, read as one study")
    parser.add_argument("--out", type=Path, default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if not args.quick and not args.study_db and not args.runs:
        parser.error("give --study-db, --runs or --quick")
    for path in args.study_db:
        if not path.is_file():
            parser.error(f"--study-db: {path} is not a file")
    for run in args.runs:
        if not (run / "metrics.jsonl").is_file():
            parser.error(f"--runs: {run} has no metrics.jsonl; expected a ppo-tune train output directory")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    runs = list(args.runs)
    if args.quick:
        runs = write_quick_runs(Path(tempfile.mkdtemp(prefix="peak-reading-quick-")))
    result: dict[str, Any] = {
        "command": command_line("benchmarks.peak_reading", argv), "code": commit_at_start(), "quick": args.quick,
        "studies": {str(path): study_db_readings(path) for path in args.study_db},
        "runs": {"dirs": [str(run) for run in runs], "reading": reading_record(runs_metrics(runs))} if runs else None,
    }
    out = results_path(args.out, OUT, args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    read = [(f"{source} {name}", record) for source, readings in result["studies"].items()
            for name, record in readings.items()]
    read += [("runs", result["runs"]["reading"])] if runs else []
    for what, record in read:
        print(f"{what}: {record['status']}; {record.get('headline', '')}")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
