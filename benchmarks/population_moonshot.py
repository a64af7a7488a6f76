"""Does a population's schedule beat every constant? The population arm's winners against the best fixed
configuration of a curve table, each retrained from update 0 on fresh seeds.

    python -m benchmarks.population_moonshot [--table FILE] [--arms-file FILE] [--arms population ...]
                                             [--oracle-seeds 20] [--work-dir DIR] [--resume] [--quick]

The oracle is the curve table's best configuration (``benchmarks.replay``'s reading of a table: the best mean
objective over the table's seeds among the configurations that keep the study's constraints, in the space and with
the objective of ``benchmarks/table_space.yaml``, the space the table was drawn from). It was chosen on the table's
own runs, so its table value is biased up; what is compared is its retraining on fresh seeds, as every arm of
``benchmarks.population_quality`` is judged. No configuration searched once and held fixed can do better in
expectation than the best of the table it was drawn from, which is why a schedule that beats it beats every constant
of that space.

It runs as a study of one trial (the table's own base and guard, the configuration queued, at seed 0 as the
population's members ran), then ``ppo-tune validate --top-k 1`` of that trial on ``--oracle-seeds`` fresh seeds
(1000 on, the seeds every arm's winner was validated on first). The population arm's figures are read from the
population benchmark's results file (``--arms-file``): each sampler seed's winner validated on 5 fresh seeds.

The comparison (:func:`moonshot_interval`) is the population's mean validated value over its sampler seeds minus the
oracle's mean over its fresh seeds, with a Welch-Satterthwaite 95% t interval whose variance also counts the fresh
seeds the population's winners share; each arm named in ``--arms`` (the first is the registered comparison, the
others are read beside it) against the same oracle runs. ``--resume`` goes on in ``--work-dir``: the finished study
is read and finished validation runs are kept. ``--quick``: the oracle on the graph task's tiny variant (at that
variant's own task seed), 2 updates a run, 2 fresh seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common.json_safe import json_safe
from benchmarks.common.machine import machine_facts
from benchmarks.common.work_dir import add_work_dir_arguments, prepared_work_dir
from benchmarks.curve_table import QUICK_TASKS, TABLE_SPACE
from benchmarks.tuning_quality import RESULTS, tune_and_validate
from tools.provenance import command_line
from tools.quick_mode import add_quick_argument, results_path
from tuner.study.student_t import t_quantile

TABLE = RESULTS / "curve_tables" / "curve_table_task1.jsonl"
ARMS_FILE = RESULTS / "population_quality" / "population_quality_arms.json"
ORACLE_SEEDS = 20
QUICK_BASE = {"total_episodes": 64, "num_eval_samples": 2}
"""--quick: 2 updates a run (rollouts of 32), 2 responses a held-out prompt."""


def oracle(table: Path, space: Path) -> tuple[int, dict[str, Any], float, int]:
    """The table's best configuration (the best mean objective over the table's seeds among those that keep the
    space file's constraints, as ``benchmarks.replay`` reads a table): its id, point, table value and task seed."""
    from benchmarks.replay.table import load_table
    from tuner.study.study_file import load_study_spec

    spec = load_study_spec(str(space))
    read = load_table(table, spec.objectives[0], spec.constraints)
    feasible = [config for config in read.configs.values() if config.true_feasible and math.isfinite(config.true_value)]
    if not feasible:
        raise ValueError(f"--table: {table} has no configuration that keeps its constraints on every seed")
    best = max(feasible, key=lambda config: config.true_value)
    task_seeds = {task_seed for task_seed, _ in read.seeds}  # each run's seed key: (task seed, training seed)
    if len(task_seeds) != 1:
        raise ValueError(f"--table: {table} mixes task seeds {sorted(task_seeds)}; a table is of one task seed")
    return best.config_id, dict(best.params), best.true_value, task_seeds.pop()


def oracle_study(space: Path, params: Mapping[str, Any], task_seed: int, work_dir: Path, quick: bool
                 ) -> dict[str, Any]:
    """The study file that retrains the oracle: the space file's base (the table's), objective, constraints and
    guard, at the table's task seed, one trial of the queued configuration on a random sampler with no pruner."""
    definition = yaml.safe_load(space.read_text())
    base = {**definition["base"], "task_seed": task_seed}
    if quick:  # the tiny variant at its own seed: the one the suite's other runs have built already
        base = {**definition["base"], **QUICK_BASE, "task": QUICK_TASKS[definition["base"]["task"]]}
    name = f"moonshot-oracle-t{task_seed}"
    study = {**definition, "name": name, "storage": f"sqlite:///{work_dir / name}.db", "n_trials": 1, "base": base,
             "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"},
             "seed_policy": {"name": "single"}, "enqueue": [dict(params)]}
    study.pop("timeout", None)
    return study


def population_values(arms_file: Path, arm: str) -> dict[int, dict[int, float]]:
    """The arm's winners' completed validation values, by sampler seed and then fresh seed."""
    report = json.loads(arms_file.read_text())
    if arm not in report["arms"]:
        raise ValueError(f"--arms: {arms_file} has no arm {arm!r} (it has {', '.join(report['arms'])})")
    return {int(seed): {int(run["seed"]): float(run["value"]) for run in result["validation"]["runs"]
                        if run["state"] == "COMPLETE" and run["value"] is not None}
            for seed, result in report["arms"][arm].items()}


def moonshot_interval(ours: Mapping[int, Mapping[int, float]], oracle_runs: Sequence[float],
                      confidence: float = 0.95) -> dict[str, float]:
    """The population's mean validated value minus the oracle's, with a Welch-Satterthwaite t interval.

    With r_k the mean of sampler seed k's winner over its fresh seeds (K of them), c_j the mean over the winners of
    fresh seed j (J_c seeds, shared by every winner) and o_i the oracle's runs (J_o):

        d = mean_k r_k - mean_i o_i
        SE^2 = s_r^2 / K + s_o^2 / J_o + s_c^2 / J_c
        df = SE^4 / ((s_r^2/K)^2/(K-1) + (s_o^2/J_o)^2/(J_o-1) + (s_c^2/J_c)^2/(J_c-1)),  floored
        d +- t_{(1+confidence)/2, df} SE

    The third term is there because the winners share their fresh seeds: a seed that is easy for every winner moves
    their mean together, which s_r cannot see. s_c^2 also holds the runs' own noise over K, so it overstates that
    shared part, and the interval errs wide. NaN where a variance cannot be estimated (a group of one)."""
    rows = [statistics.fmean(runs.values()) for runs in ours.values() if runs]
    fresh = sorted({seed for runs in ours.values() for seed in runs})
    columns = [statistics.fmean(runs[seed] for runs in ours.values() if seed in runs) for seed in fresh]
    nan = {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "se": math.nan, "df": math.nan}
    if not rows or not oracle_runs:
        return nan
    mean = statistics.fmean(rows) - statistics.fmean(oracle_runs)
    groups = [(rows, len(rows)), (list(oracle_runs), len(oracle_runs)), (columns, len(columns))]
    if any(n < 2 for _, n in groups):
        return {**nan, "mean": mean}
    parts = [statistics.variance(values) / n for values, n in groups]
    variance = sum(parts)
    freedom = math.floor(variance ** 2 / sum(part ** 2 / (n - 1) for part, (_, n) in zip(parts, groups, strict=True)))
    half = t_quantile((1 + confidence) / 2, freedom) * math.sqrt(variance)
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "se": math.sqrt(variance),
            "df": float(freedom)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.population_moonshot",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--table", type=Path, default=TABLE, help="The curve table the oracle is the best row of.")
    parser.add_argument("--space", type=Path, default=TABLE_SPACE, help="The space file the table was drawn from.")
    parser.add_argument("--arms-file", type=Path, default=ARMS_FILE,
                        help="benchmarks.population_quality's results file holding the arm.")
    parser.add_argument("--arms", nargs="+", default=["population"], metavar="ARM",
                        help="The arms whose winners are compared with the oracle (default population).")
    parser.add_argument("--oracle-seeds", type=int, default=None, help="Fresh seeds for the oracle (default 20).")
    add_work_dir_arguments(parser, "The oracle's study file and database")
    parser.add_argument("--out", default=None, help="Results file (default "
                        "benchmarks/results/population_quality/population_moonshot.json).")
    add_quick_argument(parser)
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = _parser()
    args = parser.parse_args(argv)
    for flag, path in (("--table", args.table), ("--space", args.space), ("--arms-file", args.arms_file)):
        if not path.is_file():
            parser.error(f"{flag}: no file {path}")
    seeds = args.oracle_seeds if args.oracle_seeds is not None else (2 if args.quick else ORACLE_SEEDS)
    if seeds < 2:
        parser.error(f"--oracle-seeds: {seeds}; the oracle's spread needs at least 2 fresh seeds")
    out = results_path(args.out, RESULTS / "population_quality" / "population_moonshot.json", args.quick)
    try:
        config_id, params, table_value, task_seed = oracle(args.table, args.space)
        arms = {arm: population_values(args.arms_file, arm) for arm in args.arms}
    except ValueError as error:
        parser.error(str(error))
    work_dir = prepared_work_dir(args, out.parent / "moonshot_work")
    study = oracle_study(args.space, params, task_seed, work_dir, args.quick)
    path = work_dir / f"{study['name']}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    started = time.perf_counter()
    result = tune_and_validate(str(path), study["name"], study["storage"], None, seeds)
    oracle_runs = [run["value"] for run in result["validation"]["runs"]
                   if run["state"] == "COMPLETE" and run["value"] is not None]
    # Each arm's own mean beside its difference from the oracle (the interval's "mean").
    comparisons = {arm: {"sampler_seeds": len(ours), "arm_mean": statistics.fmean(
        statistics.fmean(runs.values()) for runs in ours.values() if runs), **moonshot_interval(ours, oracle_runs)}
        for arm, ours in arms.items()}
    oracle_mean = statistics.fmean(oracle_runs) if oracle_runs else None
    report: dict[str, Any] = {
        "command": command_line("benchmarks.population_moonshot", argv), "machine": machine_facts("cpu"),
        "settings": {"table": str(args.table), "space": str(args.space), "arms_file": str(args.arms_file),
                     "arms": args.arms, "oracle_seeds": seeds, "quick": args.quick},
        "wall_s": round(time.perf_counter() - started, 1),
        "oracle": {"config_id": config_id, "params": params, "table_value": table_value, "task_seed": task_seed,
                   "validation": result["validation"],
                   "mean": oracle_mean,
                   "feasible_runs": sum(bool(run.get("feasible")) for run in result["validation"]["runs"])},
        "comparisons": comparisons,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(report), indent=2) + "\n")
    print(f"oracle: configuration {config_id} of {args.table.name} (table value {table_value:.4f}), "
          f"{len(oracle_runs)} fresh seeds, mean {oracle_mean}")
    for arm, comparison in comparisons.items():
        print(f"{arm} - oracle: {comparison['mean']:+.4f} [{comparison['ci_low']:+.4f}, {comparison['ci_high']:+.4f}]"
              f" (df {comparison['df']:.0f})")
    print(f"results: {out}")
    return report


if __name__ == "__main__":
    main()
