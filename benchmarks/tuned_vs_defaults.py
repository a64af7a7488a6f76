"""Does tuning pay? Retrain a study's best config and TRL's defaults on several seeds, same task and budget.

    python -m benchmarks.tuned_vs_defaults --study quickstart --storage sqlite:///studies/quickstart.db

The best trial was picked as the maximum over many trials, so its own objective value is optimistic;
retraining both configs on fresh seeds removes that selection bias.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import optuna

from ppo_core import PPOTrainer
from ppo_core.config_io import build_config, read_mapping
from ppo_core.quiet import quiet_hugging_face
from tuner.database import open_storage
from tuner.reports import best_trials, trial_config

ROOT = Path(__file__).resolve().parent.parent


def final_gold(values: dict, seed: int, last_k: int = 5) -> float:
    config = build_config({**values, "seed": seed, "num_sample_generations": 0})
    metrics = PPOTrainer(config).train().metrics
    return statistics.fmean(m["objective/gold_score"] for m in metrics[-last_k:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--study", default="quickstart")
    parser.add_argument("--storage", default=f"sqlite:///{ROOT / 'studies' / 'quickstart.db'}")
    parser.add_argument("--baseline", default=str(ROOT / "studies" / "trl_defaults.yaml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    quiet_hugging_face()
    study = optuna.load_study(study_name=args.study, storage=open_storage(args.storage))
    best = best_trials(study)[0]
    candidates = {
        f"best trial {best.number}": {k: v for k, v in trial_config(best).items() if k != "seed"},
        "TRL defaults": {k: v for k, v in read_mapping(args.baseline).items() if k != "seed"},
    }
    print(f"{'config':<18} " + " ".join(f"seed {s:<4}" for s in args.seeds) + "  mean gold (last 5 updates)")
    for label, values in candidates.items():
        golds = [final_gold(values, seed) for seed in args.seeds]
        print(f"{label:<18} " + " ".join(f"{g:<9.3f}" for g in golds) + f"  {statistics.fmean(golds):.3f}")


if __name__ == "__main__":
    main()
