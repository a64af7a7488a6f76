"""From the small proxy model to a larger one: do a study's configurations rank alike at both sizes, where does gold
peak in KL at each, and how far from the larger model's best does the small model's winner land, carried by each
rule of ``tuner.production.horizon``?

    python -m benchmarks.size_transfer --source NAME=STORAGE [--configs 12] [--seeds 2] [--pilot-top 3]
                                       [--large-task shortest_path_wide] [--workers 2] [--work-dir DIR] [--out FILE]
                                       [--quick]

From the source study (a finished study of a built-in task, e.g. ``studies/quickstart.yaml``'s) ``--configs``
distinct completed configurations are taken, spread evenly over its ranking by the first objective, its best
first (:func:`spread`). Each trains to the end on ``--seeds`` fresh seeds (1000, 1001, ...) at both sizes: the
source's own task, and ``--large-task`` (the same task with a wider policy: ``shortest_path_wide`` has 4.3x the
parameters, other shapes alike, trained on the same walks for the same reward model), everything else unchanged;
one CPU thread a run, ``--workers`` at a time (``benchmarks.curve_table.run_curve``). Each run is judged as the
source study judges a trial (its first objective and its constraints over the run's held-out evaluations).

Reported:
- the rank correlation (Spearman) of the configurations' mean values at the two sizes;
- where held-out gold peaks in held-out KL at each size (``tuner.search.frontier_peak``, over every evaluation of every
run
  of that size), and the shift;
- the source's winner carried to the large model by each rule (``as_tuned``; ``kl_held``, which holds the KL its
  tuning run ended at; the length rules change nothing at the same length and share ``as_tuned``'s runs; and, once
  those have run, ``kl_pilot``, which takes the winner's ``as_tuned`` runs on the large model as its pilot and
  scales the learning rate to bring the KL back to where the tuning run ended): its mean there and its gap from the
  best of the configurations at the large size, (mean - best) / |best|. That best is the best of the ones run here,
  not a search of the large model. ``kl_pilot`` is also run for the source's next best, up to ``--pilot-top``: how
  often a KL-matched carry lands near the large model's best, not for one winner only.

``--quick``: a tiny source study of 3 fast learners on the tiny task (so that the winner's runs end at a KL above
zero for the KL rules), carried to the same tiny task (the code paths,
not a size change), 1 seed, in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common.json_safe import json_safe
from benchmarks.common.machine import machine_facts
from benchmarks.horizon_transfer import (
    FIRST_SEED,
    QUICK_LEARNER,
    QUICKSTART,
    SourceError,
    Winner,
    named_storage,
    ranked_configurations,
    run_value,
    search,
    study_spec,
)
from ppo_core.tasks.ranks import rank_correlation
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path
from tuner.production.confidence import mean_interval

LARGE_TASK = "shortest_path_wide"
FULL: dict[str, Any] = {"configs": 12, "seeds": 2, "workers": 2, "pilot_top": 3}
QUICK: dict[str, Any] = {"configs": 3, "seeds": 1, "workers": 1, "pilot_top": 1}
QUICK_TASK = "shortest_path_tiny"
QUICK_BASE = {"task": QUICK_TASK, "total_episodes": 32, "num_eval_samples": 2}
QUICK_LEARNING_RATES = (2e-4, 1.5e-4, 1e-4)
SIZES = ("small", "large")


def spread(ranked: Sequence[Any], count: int) -> list[Any]:
    """``count`` items of ``ranked`` (best first) at evenly spaced ranks, the first and the last included:
    index round(i (n - 1) / (count - 1)) for i = 0 .. count - 1; all of them when there are no more than ``count``."""
    n = len(ranked)
    if n <= count:
        return list(ranked)
    if count == 1:
        return [ranked[0]]
    return [ranked[round(i * (n - 1) / (count - 1))] for i in range(count)]


def configurations(name: str, storage: str, count: int) -> list[Winner]:
    """The source study's distinct completed configurations (constraints not applied: the ranking should span the
    study), ``count`` of them by :func:`spread` (``horizon_transfer.ranked_configurations``)."""
    found = ranked_configurations(name, storage, lambda ranked: spread(ranked, count), feasible_only=False)
    if len(found) < 2:
        raise SourceError(f"--source {name}: {len(found)} completed configuration(s); a ranking needs at least 2")
    return found


def size_jobs(found: Sequence[Winner], large_task: str, seeds: int, output_dir: str) -> Iterator[dict[str, Any]]:
    """One ``run_curve`` job per (configuration, size, seed), and for the winner (the first) one per rule whose
    config differs from ``as_tuned``'s at the large size."""
    from tuner.production.horizon import RULES

    for rank, winner in enumerate(found):
        small = dict(winner.config)
        large = {**small, "task": large_task}
        carried: dict[str, dict[str, Any]] = {"as_tuned": large}
        if rank == 0:
            for rule, carry in RULES.items():
                try:
                    config = carry(large, int(large["total_episodes"]), winner.final_kl).config
                except ValueError as error:
                    print(f"{winner.source} #{winner.trial}: {rule} does not apply: {error}", file=sys.stderr)
                    continue
                if config != large:
                    carried[rule] = config
        plans = [("small", "as_tuned", small), *(("large", rule, config) for rule, config in carried.items())]
        for size, rule, config in plans:
            for index in range(seeds):
                yield {"config_id": f"{winner.source}:{winner.trial}:{size}:{rule}",
                       "params": {"source": winner.source, "trial": winner.trial, "rank": rank, "size": size,
                                  "rule": rule},
                       "base": config, "fields": {}, "seed": FIRST_SEED + index,
                       "task_seed": config.get("task_seed", 0), "eval_steps": config["eval_steps"],
                       "output_dir": output_dir}


def pilot_jobs(winner: Winner, rank: int, rows: Sequence[dict[str, Any]], spec: Any, large_task: str, seeds: int,
               output_dir: str) -> list[dict[str, Any]]:
    """A configuration carried by ``kl_pilot``: its ``as_tuned`` runs on the large model are the pilot, whose mean
    final KL sets the learning rate (``tuner.production.horizon.kl_pilot``); none when the rule does not apply (a KL
    that is not positive), said in one line."""
    from tuner.production.horizon import kl_pilot

    pilots = [run_value(row, spec)[2] for row in rows if row["params"]["trial"] == winner.trial
              and row["params"]["size"] == "large" and row["params"]["rule"] == "as_tuned"]
    large = {**winner.config, "task": large_task}
    try:
        config = kl_pilot(large, int(large["total_episodes"]), winner.final_kl, statistics.fmean(pilots)).config
    except (ValueError, statistics.StatisticsError) as error:
        print(f"{winner.source} #{winner.trial}: kl_pilot does not apply: {error}", file=sys.stderr)
        return []
    return [{"config_id": f"{winner.source}:{winner.trial}:large:kl_pilot",
             "params": {"source": winner.source, "trial": winner.trial, "rank": rank, "size": "large",
                        "rule": "kl_pilot", "pilot_kl": statistics.fmean(pilots), "pilot_runs": len(pilots)},
             "base": config, "fields": {}, "seed": FIRST_SEED + index, "task_seed": config.get("task_seed", 0),
             "eval_steps": config["eval_steps"], "output_dir": output_dir} for index in range(seeds)]


def job_key(job: dict[str, Any]) -> tuple[int, str, str, int]:
    p = job["params"]
    return p["trial"], p["size"], p["rule"], job["seed"]


def ran(path: Path) -> dict[tuple[int, str, str, int], dict[str, Any]]:
    if not path.exists():
        return {}
    return {job_key(row): row for row in map(json.loads, path.read_text().splitlines()) if row}


def run_jobs(path: Path, jobs: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    """The rows of ``jobs``: those already in the JSON-lines file ``path`` as they are, the others run and appended
    (``curve_table.append_runs``), so that a rerun resumes."""
    from benchmarks.curve_table import append_runs

    done = ran(path)
    work = [job for job in jobs if job_key(job) not in done]
    print(f"{len(work)} runs to go ({len(jobs) - len(work)} done) in {path}", file=sys.stderr)
    append_runs(path, work, workers)
    rows = ran(path)
    return [rows[job_key(job)] for job in jobs]


def peak(rows: Sequence[dict[str, Any]], metric: str, maximize: bool) -> dict[str, Any]:
    """Where ``metric`` peaks in held-out KL over every evaluation of ``rows`` (each run its own path)."""
    from tuner.search.frontier_peak import frontier_peak

    trials, kls, values = [], [], []
    for index, row in enumerate(rows):
        for point in row["evals"]:
            if point.get("eval/kl") is not None and point.get(metric) is not None:
                trials.append(index)
                kls.append(point["eval/kl"])
                values.append(point[metric])
    found = frontier_peak(trials, kls, values, maximize=maximize)
    return {"status": found.status, "kl": found.kl, "kl_low": found.kl_low, "kl_high": found.kl_high,
            "value": found.value, "runs": found.trials, "points": found.points, "reason": found.reason}


def carried_by_rule(judged: Sequence[dict[str, Any]], trial: int, best_large: float) -> dict[str, dict[str, Any]]:
    """Per rule, a configuration's judged runs on the large model: mean, interval, gap from ``best_large``, final KL
    and the share within the constraints."""
    carried = {}
    for rule in sorted({r["params"]["rule"] for r in judged if r["params"]["trial"] == trial}):
        runs = [r for r in judged if r["params"]["trial"] == trial and r["params"]["size"] == "large"
                and r["params"]["rule"] == rule]
        if not runs:
            continue
        mean, low, high = mean_interval([r["value"] for r in runs])
        carried[rule] = {"mean": mean, "ci_low": low, "ci_high": high, "n": len(runs),
                         "gap": (mean - best_large) / abs(best_large),
                         "final_kl": statistics.fmean(r["final_kl"] for r in runs),
                         "within_constraints": statistics.fmean(r["kept"] for r in runs)}
    return carried


def summarise(rows: Sequence[dict[str, Any]], found: Sequence[Winner], spec: Any) -> dict[str, Any]:
    """The figures of the module's docstring from the judged runs."""
    import optuna

    maximize = spec.objectives[0].direction in ("maximize", optuna.study.StudyDirection.MAXIMIZE)
    sign = 1.0 if maximize else -1.0
    judged = []
    for row in rows:
        value, kept, final_kl = run_value(row, spec)
        judged.append({**row, "value": value, "kept": kept, "final_kl": final_kl})
    configs = []
    for rank, winner in enumerate(found):
        entry: dict[str, Any] = {"trial": winner.trial, "rank": rank, "tuning_value": winner.value,
                                 "tuning_final_kl": winner.final_kl}
        for size in SIZES:
            runs = [r for r in judged if r["params"]["trial"] == winner.trial and r["params"]["size"] == size
                    and r["params"]["rule"] == "as_tuned"]
            mean, low, high = mean_interval([r["value"] for r in runs])
            entry[size] = {"mean": mean, "ci_low": low, "ci_high": high, "n": len(runs),
                           "final_kl": statistics.fmean(r["final_kl"] for r in runs) if runs else None,
                           "within_constraints": statistics.fmean(r["kept"] for r in runs) if runs else None}
        configs.append(entry)
    complete = [c for c in configs if c["small"]["n"] and c["large"]["n"]]
    best_large = max((c["large"]["mean"] for c in complete), key=lambda v: sign * v)
    winner = found[0]
    piloted = sorted({r["params"]["rank"] for r in judged if r["params"]["rule"] == "kl_pilot"})
    peaks = {size: peak([r for r in judged if r["params"]["size"] == size and r["params"]["rule"] == "as_tuned"],
                        spec.objectives[0].metric, maximize) for size in SIZES}
    return {
        "rank_correlation": rank_correlation([c["small"]["mean"] for c in complete],
                                             [c["large"]["mean"] for c in complete]),
        "configs_ranked": len(complete), "best_large": best_large, "configs": configs,
        "winner_carried": carried_by_rule(judged, winner.trial, best_large),
        "piloted": [{"rank": rank, "trial": found[rank].trial, **carried_by_rule(judged, found[rank].trial, best_large)}
                    for rank in piloted],
        "peaks": peaks, "peak_shift_nats": peaks["large"]["kl"] - peaks["small"]["kl"],
        "peak_ratio": peaks["large"]["kl"] / peaks["small"]["kl"] if peaks["small"]["kl"] else None,
    }


def markdown(summary: dict[str, Any]) -> str:
    def number(value: float | None, digits: int = 4) -> str:
        return "-" if value is None or value != value else f"{value:.{digits}f}"

    lines = ["| rank in the source | trial | tuning value | small: mean [95% CI] | large: mean [95% CI] | final KL "
             "small / large |", "|---|---|---|---|---|---|"]
    for c in summary["configs"]:
        s, big = c["small"], c["large"]
        lines.append(f"| {c['rank'] + 1} | {c['trial']} | {number(c['tuning_value'])} | {number(s['mean'])} "
                     f"[{number(s['ci_low'])}, {number(s['ci_high'])}] | {number(big['mean'])} "
                     f"[{number(big['ci_low'])}, {number(big['ci_high'])}] | {number(s['final_kl'], 2)} / "
                     f"{number(big['final_kl'], 2)} |")
    peaks = summary["peaks"]
    lines += ["", f"Rank correlation, small against large: {number(summary['rank_correlation'], 2)} over "
              f"{summary['configs_ranked']} configurations.",
              "Gold peaks in KL at " + "; ".join(
                  f"{size} {number(peaks[size]['kl'], 2)} nats [{number(peaks[size]['kl_low'], 2)}, "
                  f"{number(peaks[size]['kl_high'], 2)}] ({peaks[size]['status']})" for size in SIZES) + ".", "",
              "| the source's winner at the large size, by rule | mean [95% CI] (runs) | gap from the best here | "
              "final KL | within constraints |", "|---|---|---|---|---|"]
    for rule, e in summary["winner_carried"].items():
        lines.append(f"| {rule} | {number(e['mean'])} [{number(e['ci_low'])}, {number(e['ci_high'])}] ({e['n']}) | "
                     f"{e['gap']:+.1%} | {number(e['final_kl'], 2)} | {number(e['within_constraints'], 2)} |")
    lines += ["", "| rank in the source | trial | as_tuned on the large model: mean, gap, final KL "
              "| kl_pilot: mean, gap, final KL |", "|---|---|---|---|"]
    for p in summary["piloted"]:
        cells = [f"{number(p[rule]['mean'])}, {p[rule]['gap']:+.1%}, {number(p[rule]['final_kl'], 2)}"
                 if rule in p else "-" for rule in ("as_tuned", "kl_pilot")]
        lines.append(f"| {p['rank'] + 1} | {p['trial']} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def quick_source(work_dir: Path) -> tuple[str, str]:
    """A tiny study of the quickstart's space on the tiny task: 3 fast learners at different learning rates, so that
    whichever wins ends at a KL above zero."""
    definition = yaml.safe_load(QUICKSTART.read_text())
    definition.update(name="source", storage=f"sqlite:///{work_dir / 'source'}.db", n_trials=QUICK["configs"],
                      sampler={"name": "random", "seed": 0}, seed_policy={"name": "single"},
                      base={**definition["base"], **QUICK_BASE},
                      enqueue=[{**QUICK_LEARNER, "learning_rate": lr} for lr in QUICK_LEARNING_RATES])
    return search(definition, work_dir / "source.yaml", 1, 0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.size_transfer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=named_storage, default=None, metavar="NAME=STORAGE",
                        help="A finished study of a built-in task whose configurations are carried.")
    parser.add_argument("--configs", type=int, default=None,
                        help=f"Configurations, spread over the source's ranking (default {FULL['configs']}).")
    parser.add_argument("--seeds", type=int, default=None, help=f"Fresh seeds per run (default {FULL['seeds']}).")
    parser.add_argument("--large-task", default=None, help=f"The larger model's built-in task (default {LARGE_TASK}).")
    parser.add_argument("--workers", type=int, default=None, help=f"Runs at a time (default {FULL['workers']}).")
    parser.add_argument("--pilot-top", type=int, default=None,
                        help=f"The source's best this many carried by kl_pilot too (default {FULL['pilot_top']}).")
    parser.add_argument("--work-dir", type=Path, default=None, help="Where runs.jsonl goes (a rerun resumes).")
    add_quick_argument(parser)
    parser.add_argument("--out", default=None, help="Results file (default "
                                                    "benchmarks/results/size_transfer/size_transfer.json).")
    args = parser.parse_args(argv)
    from ppo_core.tasks import TASK_NAMES

    given = {key: value for key, value in vars(args).items() if key in FULL and value is not None}
    settings = {**(QUICK if args.quick else FULL), **given}
    for name in FULL:
        if settings[name] < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1, got {settings[name]}")
    if settings["configs"] < 2:
        parser.error(f"--configs: a ranking needs at least 2, got {settings['configs']}")
    large_task = args.large_task or (QUICK_TASK if args.quick else LARGE_TASK)
    if large_task not in TASK_NAMES:
        parser.error(f"--large-task: {large_task!r} is not a built-in task ({', '.join(TASK_NAMES)})")
    if not args.quick and args.source is None:
        parser.error("--source: name a finished study (NAME=STORAGE)")
    out = results_path(args.out, RESULTS / "size_transfer" / "size_transfer.json", args.quick)
    try:  # the source is read before anything is made
        found = configurations(args.source[0], args.source[1], settings["configs"]) if args.source else []
    except SourceError as error:
        parser.error(str(error))
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="ppo-size-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    name, storage = args.source or quick_source(work_dir)
    if not args.source:  # the quick source, made above
        found = configurations(name, storage, settings["configs"])
    runs_path, output_dir = work_dir / "runs.jsonl", str(work_dir / "runs")
    rows = run_jobs(runs_path, list(size_jobs(found, large_task, settings["seeds"], output_dir)), settings["workers"])
    spec = study_spec(name, storage)
    # Then the rule that needs a measurement first: each configuration's own runs on the large model are its pilot.
    piloted = [job for rank, winner in enumerate(found[:settings["pilot_top"]])
               for job in pilot_jobs(winner, rank, rows, spec, large_task, settings["seeds"], output_dir)]
    rows += run_jobs(runs_path, piloted, settings["workers"])
    summary = summarise(rows, found, spec)
    table = markdown(summary)
    print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe({
        "command": command_line("benchmarks.size_transfer", argv),
        "code": commit_at_start(), "machine": machine_facts("cpu"),
        "settings": {**settings, "quick": args.quick, "large_task": large_task, "source": name,
                     "work_dir": str(work_dir)},
        "wall_s": round(time.perf_counter() - started, 1), **summary, "table": table,
    }), indent=2, default=str))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    run_as_process(main)
