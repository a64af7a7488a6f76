"""What KL-blow-up pruning saves: the quickstart study with and without the KL guard, same sampler seed.

    python -m benchmarks.pruning_saving [--study studies/quickstart.yaml] [--workers 2]
    python -m benchmarks.pruning_saving --quick --out /tmp/pruning_saving.json   # 1 trial of 2 updates per study

Both studies run in fresh SQLite files under a temporary directory (or ``--keep DIR``) with every
other setting equal, the study's pruner included if it names one. Reported: updates run, wall time, trials
finished and pruned, and the best gold score; the JSON adds the command and the machine, its commit among them.
With two workers the order in which trials finish varies, so the two studies see the same seed but not identical
trial sequences.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

from benchmarks.common.machine import machine_facts
from ppo_core.config.io import read_mapping
from ppo_core.errors import InputError
from tools.provenance import command_line
from tools.quick_mode import add_quick_argument, results_path
from tuner.run.commands import cpu_threads_per_worker
from tuner.run.runner import run_study
from tuner.run.worker import run_worker
from tuner.store.attrs import KL_HISTORY_ATTR, PRUNE_REASON_ATTR
from tuner.store.database import open_storage
from tuner.study.study_file import load_study_spec

ROOT = Path(__file__).resolve().parent.parent
QUICK_STUDY: dict[str, Any] = {"n_trials": 1, "base": {"total_episodes": 32, "num_eval_samples": 2}}
"""--quick: each study runs 1 trial of 2 updates (16 episodes each), with 2 responses per held-out prompt."""


def run_variant(study_file: Path, directory: Path, guard_enabled: bool, workers: int,
                overrides: dict[str, Any] | None = None) -> dict[str, object]:
    # Workers read the study from its file, so each variant gets a file of its own.
    data = read_mapping(study_file, "study")
    overrides = overrides or {}
    data.update({key: value for key, value in overrides.items() if key != "base"})
    data["base"] = {**data.get("base", {}), **overrides.get("base", {})}
    data["name"] = f"{data['name']}-{'guard' if guard_enabled else 'noguard'}"
    data.pop("storage", None)
    data["kl_guard"] = {**data.get("kl_guard", {}), "enabled": guard_enabled}
    variant_file = directory / f"{data['name']}.yaml"
    variant_file.write_text(yaml.safe_dump(data, sort_keys=False))
    spec = load_study_spec(variant_file)
    label = "with KL guard" if guard_enabled else "without KL guard"
    started = time.perf_counter()
    if workers == 1:  # what ppo-tune's one worker would do, here: one fork server serves both variants
        run_worker(spec, spec.n_trials, spec.timeout, threads=cpu_threads_per_worker(1))
    else:
        run_study(spec, spec.n_trials, spec.timeout, workers)
    wall = time.perf_counter() - started
    trials = optuna.load_study(study_name=spec.name, storage=open_storage(spec.storage)).get_trials()
    kl_pruned = [t for t in trials if "objective/kl" in str(t.user_attrs.get(PRUNE_REASON_ATTR, ""))]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    return {
        "variant": label,
        "trials finished": sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials),
        "pruned for KL": len(kl_pruned),
        "pruned by median": sum(t.state == TrialState.PRUNED for t in trials) - len(kl_pruned),
        "updates run": sum(len(t.user_attrs.get(KL_HISTORY_ATTR, [])) for t in trials),
        "wall s": round(wall, 1),
        "best gold": round(max(t.values[0] for t in complete), 4) if complete else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pruning_saving", description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", default=str(ROOT / "studies" / "quickstart.yaml"))
    parser.add_argument("--workers", type=int, default=None, help="Default 2 (--quick 1).")
    parser.add_argument("--keep", default=None, help="Directory for the two study databases.")
    parser.add_argument("--out", default=None, help="Default benchmarks/results/pruning_saving/pruning_saving.json "
                                                    "(--quick: a temporary directory).")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers: must be at least 1, got {args.workers}")
    try:  # the study as given, read before anything is written: a bad one is refused in one line
        load_study_spec(args.study)
    except InputError as error:
        parser.error(f"--study: {error}")
    out = results_path(args.out, ROOT / "benchmarks" / "results" / "pruning_saving" / "pruning_saving.json", args.quick)
    workers = args.workers or (1 if args.quick else 2)
    directory = Path(args.keep or tempfile.mkdtemp(prefix="ppo-tune-pruning-"))
    directory.mkdir(parents=True, exist_ok=True)
    overrides = QUICK_STUDY if args.quick else None
    rows = [run_variant(Path(args.study), directory, enabled, workers, overrides) for enabled in (True, False)]
    header = list(rows[0])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in header) + " |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": command_line("benchmarks.pruning_saving", argv),
                               "machine": machine_facts("cpu"), "study": args.study,
                               "workers": workers, "quick": args.quick, "rows": rows}, indent=2))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    run_as_process(main)
