"""Does tuning pay? Retrain a study's best config and TRL's defaults on several seeds, same task and budget.

    python -m benchmarks.tuned_vs_defaults --study quickstart --storage sqlite:///studies/quickstart.db
    python -m benchmarks.tuned_vs_defaults --quick --study NAME --storage URL --out /tmp/tuned.json

The best trial was picked as the maximum over many trials, so its own objective value is optimistic;
retraining both configs on fresh seeds removes that selection bias. ``--quick`` retrains both on one seed for 2
updates (a smoke run of the same steps; it still needs a study with a completed trial).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import optuna

from benchmarks.common.machine import machine_facts
from ppo_core import PPOTrainer
from ppo_core.config.io import build_config, read_mapping
from ppo_core.errors import InputError
from ppo_core.models.quiet import quiet_hugging_face
from tools.provenance import command_line
from tools.quick_mode import add_quick_argument, results_path
from tuner.store.database import open_read_only_storage
from tuner.study.reports import trial_config
from tuner.study.winner import best_trials

ROOT = Path(__file__).resolve().parent.parent
LAST_K = 5
"""The score of a run: its mean training gold score over its last LAST_K updates."""
QUICK: dict[str, Any] = {"seeds": [1], "values": {"total_episodes": 32, "num_eval_samples": 2}}
"""--quick: one seed, 2 updates of 16 episodes, 2 responses per held-out prompt at each evaluation."""


def final_gold(values: dict[str, Any], seed: int, last_k: int = LAST_K) -> float:
    config = build_config({**values, "seed": seed, "num_sample_generations": 0})
    metrics = PPOTrainer(config).train().metrics
    return statistics.fmean(m["objective/gold_score"] for m in metrics[-last_k:])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tuned_vs_defaults",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", default="quickstart")
    parser.add_argument("--storage", default=f"sqlite:///{ROOT / 'studies' / 'quickstart.db'}")
    parser.add_argument("--baseline", default=str(ROOT / "benchmarks" / "studies" / "trl_defaults.yaml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="Default 1 2 3 (--quick 1).")
    parser.add_argument("--out", default=None, help="Write the results as JSON here too (--quick: always, by default "
                                                    "into a temporary directory).")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    seeds = args.seeds or (QUICK["seeds"] if args.quick else [1, 2, 3])
    overrides = QUICK["values"] if args.quick else {}
    out = results_path(args.out, Path("tuned_vs_defaults.json"), args.quick) if args.out or args.quick else None
    quiet_hugging_face()
    # Both configs are read before any training, so that bad input is refused in one line.
    try:
        baseline = read_mapping(args.baseline, "--baseline")
    except InputError as error:
        parser.error(str(error))
    try:
        study = optuna.load_study(study_name=args.study, storage=open_read_only_storage(args.storage))
    except InputError as error:
        parser.error(f"--storage: {error}")
    except KeyError:  # optuna's word for a study name the storage does not hold
        parser.error(f"--study: no study named {args.study!r} in {args.storage}")
    ranked = best_trials(study)
    if not ranked:
        parser.error(f"--study: {args.study!r} has no finished trial to retrain")
    best = ranked[0]
    candidates = {
        f"best trial {best.number}": {k: v for k, v in trial_config(best).items() if k != "seed"},
        "TRL defaults": {k: v for k, v in baseline.items() if k != "seed"},
    }
    print(f"{'config':<18} " + " ".join(f"seed {s:<4}" for s in seeds) + f"  mean gold (last {LAST_K} updates)")
    results: dict[str, Any] = {}
    for label, values in candidates.items():
        golds = [final_gold({**values, **overrides}, seed) for seed in seeds]
        results[label] = {"gold_per_seed": dict(zip(map(str, seeds), golds, strict=True)),
                          "mean_gold": statistics.fmean(golds), "values": values}
        print(f"{label:<18} " + " ".join(f"{g:<9.3f}" for g in golds) + f"  {statistics.fmean(golds):.3f}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"command": command_line("benchmarks.tuned_vs_defaults", argv),
                                   "machine": machine_facts("cpu"), "study": args.study,
                                   "storage": args.storage, "seeds": seeds, "last_k": LAST_K,
                                   "overrides": overrides, "quick": args.quick, "configs": results}, indent=2))
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    run_as_process(main)
