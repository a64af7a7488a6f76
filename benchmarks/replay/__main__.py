"""Tuning strategies replayed against the curve table: how many PPO updates each needs to find a good configuration,
over many repeats, without training.

    python -m benchmarks.replay [--table FILE] [--table-rows N] [--space STUDY] [--only NAME=VALUE]
                                [--repeats 100] [--seed 0] [--budget-updates U]
                                [--strategies NAME ...] [--workers 1] [--mapping fitted|uniform]
                                [--format markdown|json] [--out FILE] [--quick]

Each strategy (``benchmarks.replay.strategies``: a sampler, a pruner, a seed policy, warm starts and the KL guard)
runs ``--repeats`` in-memory Optuna studies over the space the tables were drawn from (``benchmarks/table_space.yaml``;
``--space`` names another study file, such as the shipped ``studies/quickstart.yaml``, and ``--only NAME=VALUE`` keeps
the rows that space covers), sampler seed ``--seed`` +
repeat; every proposal is mapped to the table's nearest configuration (``--mapping fitted``, the default: with the
step mass as a coordinate and weights fitted to the table, ``benchmarks.replay.metric``; ``uniform``: every searched
parameter alike) and replayed on one of its runs (``benchmarks.replay.study``) until the repeat's budget of PPO
updates is spent (default: 20 runs of the table's mean length). Each repeat is judged by TRUE quality, a
configuration's mean over every table seed (``benchmarks.replay.measures``): the updates spent when the winner first
reached 95% of the best TRUE value, and the final regret. How faithful the mapping is (how far proposals land from a
table row, and whether the nearest and the second-nearest row agree) is reported beside. Results: ``--out``
(default ``benchmarks/results/tuning_replay/tuning_replay.json``), and a markdown table (or the JSON, ``--format json``)
on stdout. ``--quick``: 2 repeats, a budget of 6 runs and a handful of strategies against whatever ``--table`` is given,
results in ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.json_safe import json_safe
from benchmarks.common.pool import worker_pool
from benchmarks.curve_table import TABLE, TABLE_SPACE
from benchmarks.replay.mapping import TableIndex
from benchmarks.replay.measures import (
    COST_UNITS,
    TARGET_FRACTION,
    RepeatResult,
    judge,
    quartiles,
    summarise,
    versus,
)
from benchmarks.replay.metric import held_out_rank_correlation, nearest_rank_correlation, pair_costs
from benchmarks.replay.repeats import MAPPINGS, context, finite_rows, loaded, one_repeat
from benchmarks.replay.strategies import DEFAULT_STRATEGY, QUICK_STRATEGIES, STRATEGIES
from benchmarks.replay.study import Context, RepeatLog
from benchmarks.replay.table import Table, best_true
from ppo_core.tasks.ranks import rank_correlation
from tools.provenance import commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

OUT = RESULTS / "tuning_replay" / "tuning_replay.json"
BUDGET_RUNS = 20
"""The default budget: about 20 full runs' worth of updates (the shipped 30-trial quickstart runs about 1,450)."""
REPEATS = 100
QUICK = {"repeats": 2, "budget_runs": 6}


def default_budget(table: Table, runs: int) -> int:
    """``runs`` runs of the table's mean planned length, in updates."""
    lengths = [run.planned_updates for config in table.configs.values() for run in config.runs.values()]
    return round(runs * statistics.fmean(lengths))


def mapping_fidelity(logs: list[RepeatLog], ctx: Context, mapping: str) -> dict[str, Any]:
    """How far proposals land from their nearest row, against how far the table's rows lie from each other; the
    rank correlation of the nearest and second-nearest rows' TRUE values over the proposals (1: the second-nearest
    would have ranked the proposal alike); and how well a row's nearest other row predicts its TRUE value, leave one
    out and held out (``benchmarks.replay.metric``), under this mapping's weights and under uniform ones."""
    table, space, index = ctx.table, ctx.spec.search_space, ctx.index
    distances = [distance for log in logs for distance, _, _ in log.proposals]
    pairs = [(table.configs[a].true_value, table.configs[b].true_value) for log in logs for _, a, b in log.proposals]
    pairs = [(a, b) for a, b in pairs if a == a and b == b]
    every = pair_costs(index)
    apart = np.sqrt(every @ index.weights)
    np.fill_diagonal(apart, np.inf)
    spacing = apart.min(axis=1).tolist() if len(apart) > 1 else [0.0]
    q1, median, q3 = quartiles(distances)
    finite = finite_rows(table, ctx.rows)
    values = np.array([table.configs[ctx.rows[row]].true_value for row in finite])
    costs = every[np.ix_(finite, finite)]
    uniform = pair_costs(TableIndex(space, [table.configs[config_id].params for config_id in ctx.rows]))
    rows = list(range(len(finite)))
    return {"mapping": mapping, "weights": dict(zip(index.names, index.weights.tolist(), strict=True)),
            "loo_rank_correlation": nearest_rank_correlation(costs, values, index.weights, rows, rows),
            "uniform_loo_rank_correlation": nearest_rank_correlation(
                uniform[np.ix_(finite, finite)], values, np.ones(len(space)), rows, rows),
            "held_out_rank_correlation": held_out_rank_correlation(costs, values) if mapping == "fitted" else None,
            "proposals": len(distances), "median_distance": median, "distance_iqr": [q1, q3],
            "table_spacing_median": quartiles(spacing)[1],
            "nearest_second_rank_correlation": rank_correlation([a for a, _ in pairs], [b for _, b in pairs]),
            "distinct_rows_hit": len({a for log in logs for _, a, _ in log.proposals})}


def run_all(args: argparse.Namespace, names: list[str]) -> tuple[dict[str, list[RepeatLog]], dict[str, float]]:
    jobs = [(args.table.resolve(), args.table_rows, args.budget_updates, args.mapping, args.space.resolve(),
             args.only, name, args.seed + repeat, repeat) for name in names for repeat in range(args.repeats)]
    logs: dict[str, list[RepeatLog | None]] = {name: [None] * args.repeats for name in names}
    seconds = dict.fromkeys(names, 0.0)
    if args.workers > 1:
        with worker_pool(args.workers) as pool:
            done = list(pool.map(one_repeat, jobs))
    else:
        done = [one_repeat(job) for job in jobs]
    for name, repeat, log, spent in done:
        logs[name][repeat] = log
        seconds[name] += spent
    return {name: [log for log in found if log is not None] for name, found in logs.items()}, seconds


def result(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    started = time.perf_counter()
    ctx = context(args.table.resolve(), args.table_rows, args.budget_updates, args.mapping, args.space.resolve(),
                  args.only)
    table = ctx.table
    best = best_true(table)
    if best != best:
        raise SystemExit(f"{args.table}: no configuration is feasible in truth; nothing to aim at")
    target = TARGET_FRACTION * best
    truth = {cid: (config.true_value, config.true_feasible) for cid, config in table.configs.items()}
    logs, seconds = run_all(args, names)
    judged: dict[str, list[RepeatResult]] = {
        name: [judge(log.timeline, truth, target, best, args.budget_updates, log.states, log.reruns, log.spent,
                     log.costs) for log in found] for name, found in logs.items()}
    baseline = judged.get("random")
    strategies = {}
    for name in names:
        summary = summarise(judged[name], baseline if name != "random" else None)
        if DEFAULT_STRATEGY in judged and name not in ("random", DEFAULT_STRATEGY):
            summary["vs_default"] = versus(judged[name], judged[DEFAULT_STRATEGY])
        summary["settings"] = {key: value for key, value in dataclasses.asdict(STRATEGIES[name]).items()
                               if key != "name"}
        summary["replay_seconds"] = round(seconds[name], 1)
        summary["repeats"] = [vars(r) | {"table_seed": list(log.table_seed)}
                              for r, log in zip(judged[name], logs[name], strict=True)]
        strategies[name] = summary
    feasible = [config for config in table.configs.values() if config.true_feasible]
    return {
        "target": target, "default": DEFAULT_STRATEGY, "best_true": best,
        "best_config": max(feasible, key=lambda config: config.true_value).config_id,
        "budget_updates": args.budget_updates, "strategies": strategies,
        "mapping": mapping_fidelity([log for found in logs.values() for log in found], ctx, args.mapping),
        "space": str(args.space), "only": [f"{name}={value}" for name, value in args.only],
        "table": {"path": str(args.table), "rows": table.rows, "configs": len(table.configs),
                  "seeds": [list(s) for s in table.seeds], "dropped_configs": table.dropped,
                  "feasible_in_truth": sum(c.true_feasible for c in table.configs.values()),
                  "rungs": vars(ctx.fidelity)},
        "settings": {"repeats": args.repeats, "seed": args.seed, "quick": args.quick, "workers": args.workers},
        "code": commit_at_start(), "seconds": round(time.perf_counter() - started, 1),
    }


def only_argument(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` as (name, value)."""
    name, sep, value = text.partition("=")
    if not (sep and name and value):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _n(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}g}"


def markdown(res: dict[str, Any]) -> str:
    """The strategies as one markdown table, best median updates to target first."""
    lines = [f"Target {res['target']:.4f} (95% of the best TRUE value {res['best_true']:.4f}, config "
             f"{res['best_config']}); budget {res['budget_updates']} updates; {res['settings']['repeats']} repeats; "
             f"table: {res['table']['configs']} configs x {len(res['table']['seeds'])} seeds.", "",
             "| strategy | updates to target: median [IQR] | reached | final regret: median [IQR] | vs random: "
             "median ratio, faster / slower, p | episodes / seconds to target: median (vs random: ratio, p) | trials "
             "| pruned / guarded per repeat |",
             "|---|---|---|---|---|---|---|---|"]
    order = sorted(res["strategies"].items(), key=lambda item: (item[1]["median_updates_to_target"], item[0]))
    for name, s in order:
        versus = s.get("vs_random")
        against = "–" if versus is None else f"{_n(versus['median_ratio'])}, {versus['faster']:.0%} / " \
                                             f"{versus['slower']:.0%}, {_n(versus['wilcoxon_p'], 2)}"
        states = s["states_mean"]
        mark = " (default)" if name == res["default"] else ""
        costs = " / ".join(
            f"{_n(s.get(f'median_{unit}_to_target'), 4)}"
            + ("" if versus is None else f" ({_n(versus.get(f'{unit}_median_ratio'))}, "
                                         f"{_n(versus.get(f'{unit}_wilcoxon_p'), 2)})")
            for unit in COST_UNITS)
        lines.append(f"| {name}{mark} | {s['median_updates_to_target']:.0f} [{s['iqr'][0]:.0f}, {s['iqr'][1]:.0f}] | "
                     f"{s['reached']:.0%} | {s['final_regret_median']:.4f} [{s['final_regret_iqr'][0]:.4f}, "
                     f"{s['final_regret_iqr'][1]:.4f}] | {against} | {costs} | {s['trials_median']:g} | "
                     f"{states.get('pruned', 0):.1f} / {states.get('guarded', 0):.1f} |")
    against_default = [(name, s["vs_default"]) for name, s in order if "vs_default" in s]
    if against_default:
        lines += ["", f"Against the default ({res['default']}), repeat by repeat: "
                  + "; ".join(f"{name} {_n(v['median_ratio'])}x its median updates ({v['faster']:.0%} faster / "
                              f"{v['slower']:.0%} slower, p {_n(v['wilcoxon_p'], 2)}), "
                              + ", ".join(f"{_n(v[f'{unit}_median_ratio'])}x in {unit} (p "
                                          f"{_n(v[f'{unit}_wilcoxon_p'], 2)})" for unit in COST_UNITS)
                              for name, v in against_default) + "."]
    m = res["mapping"]
    held_out = "" if m["held_out_rank_correlation"] is None else \
        f", held out (fitted on half the rows) {_n(m['held_out_rank_correlation'])}"
    lines += ["", f"Mapping: {m['mapping']}. A row's nearest other row predicts its TRUE value with Spearman "
              f"{_n(m['loo_rank_correlation'])} leave one out{held_out} (uniform weights: "
              f"{_n(m['uniform_loo_rank_correlation'])}). Weights: "
              + ", ".join(f"{name} {weight:g}" for name, weight in m["weights"].items()) + ".",
              "", f"{m['proposals']} proposals, median distance to the nearest row {m['median_distance']:.3f} "
              f"(IQR {m['distance_iqr'][0]:.3f}-{m['distance_iqr'][1]:.3f}; rows lie a median "
              f"{m['table_spacing_median']:.3f} from their nearest other row); rank correlation of the nearest and "
              f"second-nearest rows' TRUE values {_n(m['nearest_second_rank_correlation'])}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--table-rows", type=int, default=None,
                        help="read only the table's first N rows: a run against a table still being built, repeatable "
                             "once it has grown (the builder only appends)")
    parser.add_argument("--space", type=Path, default=TABLE_SPACE,
                        help="the study file whose space (and objective, constraints and base) the strategies propose "
                             "in (default: the space the curve tables were drawn from, benchmarks/table_space.yaml)")
    parser.add_argument("--only", type=only_argument, action="append", default=[], metavar="NAME=VALUE",
                        help="judge on the table's configurations with this parameter value only (repeatable): the "
                             "rows a narrower --space covers, e.g. kl_control=fixed")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-updates", type=int, default=None)
    parser.add_argument("--strategies", nargs="+", choices=sorted(STRATEGIES), default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--mapping", choices=MAPPINGS, default=MAPPINGS[0],
                        help="fitted: the step mass and weights fitted to the table; uniform: every parameter alike")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown")
    parser.add_argument("--out", type=Path, default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    args.only = tuple(args.only)
    if not args.space.is_file():
        parser.error(f"--space: no such study file: {args.space}")
    if not args.table.exists():
        raise SystemExit(f"no curve table at {args.table}: build one with python -m benchmarks.curve_table")
    budget_runs = BUDGET_RUNS
    if args.quick:
        args.repeats, budget_runs = QUICK["repeats"], QUICK["budget_runs"]
    names = args.strategies or list(QUICK_STRATEGIES if args.quick else STRATEGIES)
    if "random" not in names:
        names.insert(0, "random")  # every strategy is compared with random search, repeat by repeat
    if args.budget_updates is None:
        args.budget_updates = default_budget(loaded(args.table.resolve(), args.table_rows, args.mapping,
                                                    args.space.resolve(), args.only).table, budget_runs)
    out = results_path(args.out, OUT, args.quick)
    res = json_safe(result(args, names))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1) if args.format == "json" else markdown(res))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    run_as_process(main)
