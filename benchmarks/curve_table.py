"""A table of real PPO learning curves: configurations of the quickstart's search space, each trained to the end on
several seeds, every evaluation kept, for replaying tuning strategies without training (benchmarks.replay).

    python -m benchmarks.curve_table [--configs 240] [--seeds 3] [--workers 2] [--task-seed 0] [--out FILE]
                                     [--space benchmarks/table_space.yaml] [--quick]
    python -m benchmarks.curve_table --space benchmarks/text_table_space.yaml --configs 60 --seeds 2 \
                                     --out benchmarks/results/curve_tables/curve_table_text.jsonl  # the text table

Configurations are drawn by Optuna's RandomSampler (seed 0) over ``--space``'s search space (by default
``benchmarks/table_space.yaml``: the quickstart's when the graph tables were built, kept apart from the shipped
study since; the file beside a table, ``<table>.space.json``, records the space it was drawn from, and a build that
would go on with another space is refused: a changed space is a new table), mapped
to configs as a study maps them (``tuner.search.space.suggest_params`` on the study's base), so a replayed proposal
lands in the same space. Each (configuration, seed) pair trains with no KL guard and no pruner, to its last update,
one CPU thread a run, and evaluates on the held-out prompts at every eighth of the run (``eval_steps: 0.125``): the
rungs a multi-fidelity strategy can stop at. Each run is one JSON line: the point (``params``, as a sampler proposes
it), the training seed, and per update the training KL and proxy score, per evaluation the held-out gold, KL and
proxy. The file is appended to, so an interrupted build resumes where it stopped: runs already in it are skipped.

The full table (240 configurations x 3 seeds, about 35 s a run at one thread) is a large CPU job: about 3.5 hours
on 2 cores, minutes on a 16-core machine (``--workers 16``). ``--quick``: 2 configurations x 1 seed of 2 updates on
the tiny task, one after the other in the command's own process, into ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.common.pool import each_result
from tools.quick_mode import add_quick_argument, results_path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "studies" / "quickstart.yaml"
"""The shipped quickstart study, whose file the transfer benchmarks start from."""
TABLE_SPACE = ROOT / "benchmarks" / "table_space.yaml"
"""The space (and base, objective, constraints) every curve table was drawn from: the quickstart's as it stood when
they were built, kept apart so that changing the shipped study does not change what the tables' rows are."""
TABLE = ROOT / "benchmarks" / "results" / "curve_tables" / "curve_table.jsonl"
EVAL_STEPS = 0.125
"""Eight held-out evaluations a run: the rungs of successive halving, and what a pruner reads."""
TRAIN_METRICS = ("objective/kl", "objective/scores")
EVAL_METRICS = ("eval/gold_score", "eval/kl", "eval/score")
SAMPLER_SEED = 0
QUICK_EVAL_STEPS = 0.5
QUICK_BASE = {"total_episodes": 32, "num_eval_samples": 2, "eval_steps": QUICK_EVAL_STEPS}
QUICK_TASKS = {"shortest_path": "shortest_path_tiny", "fortunes": "fortunes_tiny"}
"""--quick runs a space's task as its tiny variant."""


def space_record(table: Path) -> Path:
    """Which space a table was drawn from, beside it: ``<table>.space.json``, the space file's name and SHA-256."""
    return table.with_name(table.name + ".space.json")


def space_identity(path: Path) -> dict[str, str]:
    """A space file's name and the SHA-256 of its text: what a table's record holds."""
    return {"space": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def space_and_base(path: Path = TABLE_SPACE) -> tuple[dict[str, Any], dict[str, Any]]:
    """The study file's search space (parsed as a study parses it) and its base."""
    from tuner.study.study_file import load_study_spec

    spec = load_study_spec(path)
    return spec.search_space, dict(spec.base)


def sample_points(count: int, path: Path = TABLE_SPACE, seed: int = SAMPLER_SEED) -> list[dict[str, Any]]:
    """``count`` points of the study's space drawn by Optuna's RandomSampler: each the sampler's ``params`` and the
    config fields they set, as a study's trial would get them."""
    import optuna

    from tuner.search.space import suggest_params

    space, base = space_and_base(path)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    points = []
    for index in range(count):
        trial = study.ask()
        fields = suggest_params(trial, space, base)
        study.tell(trial, 0.0)
        points.append({"config_id": index, "params": dict(trial.params), "fields": fields})
    return points


def run_curve(job: dict[str, Any]) -> dict[str, Any]:
    """Train one (configuration, seed) to the end on one thread; its curve as one table row. A run that diverges
    (a non-finite metric) keeps what it reported before, with the reason."""
    import torch

    from ppo_core import PPOConfig, PPOTrainer
    from ppo_core.models.quiet import quiet_hugging_face
    from ppo_core.run.callbacks import TrainerCallback

    quiet_hugging_face()
    torch.set_num_threads(1)
    seen: list[dict[str, float]] = []

    class Keep(TrainerCallback):
        def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
            seen.append(metrics)
            return None

    config = PPOConfig(**{**job["base"], **job["fields"], "seed": job["seed"], "eval_steps": job["eval_steps"],
                          "task_seed": job["task_seed"], "output_dir": job["output_dir"], "report_to": "none"})
    started, failure = time.perf_counter(), None
    trainer = PPOTrainer(config, callbacks=[Keep()])
    try:
        trainer.train()
    except Exception as error:  # a diverged run is a row too: its curve up to the failure
        failure = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    train = {name: [m.get(name) for m in seen] for name in TRAIN_METRICS}
    evals = [{"update": update, **{name: m[name] for name in EVAL_METRICS if name in m}}
             for update, m in enumerate(seen, start=1) if "eval/gold_score" in m]
    return {"config_id": job["config_id"], "seed": job["seed"], "task_seed": job["task_seed"],
            "params": job["params"], "updates": len(seen), "planned_updates": trainer.num_updates,
            "failure": failure, "train": train,
            "evals": evals, "seconds": round(time.perf_counter() - started, 1)}


def append_runs(path: Path, work: list[dict[str, Any]], workers: int) -> None:
    """Run ``work`` (:func:`finished_runs`) and append each row to the JSON-lines file ``path`` as its run ends (a
    rerun that skips the rows already there resumes after the last); progress, and a diverged run's reason, on
    stderr."""
    with path.open("a") as rows:
        for count, row in enumerate(finished_runs(work, workers), start=1):
            rows.write(json.dumps(row) + "\n")
            rows.flush()  # a row is kept as soon as its run ends: an interrupted build resumes after it
            print(f"[{count}/{len(work)}] config {row['config_id']} seed {row['seed']}: {row['updates']} updates, "
                  f"{row['seconds']} s{', ' + row['failure'] if row['failure'] else ''}", file=sys.stderr)


def done_runs(path: Path) -> set[tuple[int, int, int]]:
    """(config_id, seed, task_seed) of every run already in the table."""
    if not path.exists():
        return set()
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {(row["config_id"], row["seed"], row["task_seed"]) for row in rows}


def jobs(points: list[dict[str, Any]], seeds: int, task_seed: int, base: dict[str, Any], done: set[Any],
         output_dir: str, eval_steps: float) -> Iterator[dict[str, Any]]:
    for point in points:
        for seed in range(seeds):
            if (point["config_id"], seed, task_seed) not in done:
                yield {**point, "seed": seed, "task_seed": task_seed, "base": base, "output_dir": output_dir,
                       "eval_steps": eval_steps}


def finished_runs(work: list[dict[str, Any]], workers: int) -> Iterator[dict[str, Any]]:
    """Each job's row (:func:`run_curve`) as its run ends, ``workers`` runs at a time
    (:func:`benchmarks.common.pool.each_result`: fresh interpreters, no forked torch state; one worker runs here)."""
    return each_result(run_curve, [(job,) for job in work], workers, ordered=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.curve_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=240)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="Runs at a time (default 2; --quick 1).")
    parser.add_argument("--task-seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--space", type=Path, default=TABLE_SPACE,
                        help="The study file whose search space and base the table draws from (default "
                             "benchmarks/table_space.yaml, the graph tables'; benchmarks/text_table_space.yaml: the "
                             "text task's).")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers: must be at least 1, got {args.workers}")
    if not args.space.is_file():
        parser.error(f"--space: no file {args.space}")
    if args.quick:
        args.configs, args.seeds = 2, 1
    workers = args.workers or (1 if args.quick else 2)
    out = results_path(args.out, TABLE, args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    identity, record = space_identity(args.space), space_record(out)
    if record.exists() and json.loads(record.read_text()) != identity:
        parser.error(f"--space: {out} was drawn from another space ({record}); a changed space is a new table, so "
                     "give another --out")
    # The graph tables were built before tables kept a record: rows without one are the default space's.
    if not record.exists() and done_runs(out) and args.space.resolve() != TABLE_SPACE.resolve():
        parser.error(f"--space: {out} has rows of the default space ({TABLE_SPACE.name}), not of {args.space}")
    _, base = space_and_base(args.space)
    eval_steps = EVAL_STEPS
    if args.quick:
        base = {**base, **QUICK_BASE, "task": QUICK_TASKS.get(str(base.get("task")), base.get("task"))}
        eval_steps = QUICK_EVAL_STEPS
    record.write_text(json.dumps(identity) + "\n")
    work = list(jobs(sample_points(args.configs, args.space), args.seeds, args.task_seed, base, done_runs(out),
                     str(out.parent / "curve_runs"), eval_steps))
    print(f"{len(work)} runs to go into {out}", file=sys.stderr)
    append_runs(out, work, workers)
    print(json.dumps({"table": str(out), "runs": len(done_runs(out))}))


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    run_as_process(main)
