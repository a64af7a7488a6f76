"""GAE against the critic-free estimators on the built-in task at equal episodes: held-out gold and KL, time, memory.

    python -m benchmarks.estimators [--seeds 3] [--episodes 1536] [--out PATH] [--readme]
    python -m benchmarks.estimators --quick --out /tmp/estimators.json   # a smoke run: 2 runs of 2 updates

Every estimator trains from the same base, ``studies/train.yaml`` (the quickstart study's validated GAE winner on
``task: shortest_path``), with only ``advantage_estimator`` changed: a critic-free estimator then takes what ppo_core
gives it by default (4 responses per prompt for the group estimators, KL in the loss with ``beta`` for GRPO and in the
reward for the others, ``scale_rewards: group``), while learning rate, PPO epochs, clip range, temperature, batch,
episodes and the adaptive KL target stay the base's. Every (estimator, seed) run is its own process
(``python -m benchmarks.estimators --worker ...``), so its peak resident set is its own; the order of the estimators
rotates from one seed to the next, to spread drift in the machine's load over all of them.

Each run first evaluates its starting (SFT) policy on the held-out prompts with ppo_core's own evaluation (update 0's
sampling seed), then trains and evaluates at every quarter. Reported per estimator: the final held-out
``eval/gold_score`` and ``eval/kl`` (mean over seeds, 95% Student-t interval), the gain over the SFT policy and the
difference from GAE (both paired by seed), wall seconds per run and per update (``time/rollout_s`` +
``time/update_s``), peak memory (``memory/peak_gib``: the process's peak RSS on a CPU), and time and memory as ratios
to GAE; machine measurements are medians (over a run's updates, then over seeds; ratios per seed, then their median).
Results and what they mean: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from benchmarks.common.json_safe import json_safe
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import add_quick_argument, results_path

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "studies" / "train.yaml"
RESULTS = ROOT / "benchmarks" / "results"
ESTIMATORS = ("gae", "grpo", "rloo", "reinforce_pp_baseline")
REFERENCE = "gae"  # ratios are critic-free / this
LABELS = {"gae": "GAE (PPO, value network)", "grpo": "GRPO", "rloo": "RLOO",
          "reinforce_pp_baseline": "REINFORCE++-baseline", "reinforce_pp": "REINFORCE++"}
FIRST_SEED = 1000
"""Seeds count up from here: studies/train.yaml was tuned on seed 0, so a seed it never saw keeps the tuning's
selection bias out of GAE's numbers (the same first seed as ``ppo-tune validate``)."""
SFT = "sft"
# --quick: one seed, 2 updates of 16 episodes, GAE (the reference of every ratio) and GRPO (no value network, KL in
# the loss): every column of the report (with one seed the 95% intervals are undefined, shown as '-').
QUICK_SEEDS, QUICK_EPISODES, QUICK_ESTIMATORS = 1, 32, ("gae", "grpo")
QUICK_BASE = {"num_eval_samples": 2}
"""--quick: 2 responses per held-out prompt at each evaluation instead of train.yaml's 16."""
# The machine's measurements of a run, summarised by their median over seeds; the ratios to GAE, per seed.
MACHINE_KEYS = ("train_s", "process_wall_s", "rollout_s", "update_s", "per_update_s", "eval_s", "peak_gib",
                "peak_above_imports_mib")
RATIO_KEYS = ("per_update_s", "rollout_s", "update_s", "train_s", "peak_gib", "peak_above_imports_mib")
# What a run's record keeps of its metrics (when the run reports them): every number of the report and the learning
# curves, without the 30-odd diagnostics of each update. One series per metric over every update (at 6 significant
# digits), and one entry per evaluation.
SERIES = ("objective/kl", "objective/kl_coef", "objective/scores", "objective/gold_score", "objective/reward_std",
          "time/rollout_s", "time/update_s", "memory/peak_gib")
EVALUATION = ("update", "eval/gold_score", "eval/score", "eval/kl", "eval/response_length", "time/eval_s")


# --------------------------------------------------------------------------------------------------- configs


def base_values(episodes: int | None = None) -> dict[str, Any]:
    """studies/train.yaml without its seed, with sample recordings off (they draw from their own random stream, so
    they change no metric, but cost time that is no estimator's), and ``episodes`` in place of its total."""
    from ppo_core.config.io import read_mapping

    values = {key: value for key, value in read_mapping(BASE).items() if key != "seed"}
    values["num_sample_generations"] = 0
    if episodes is not None:
        values["total_episodes"] = episodes
    return values


def run_values(base: dict[str, Any], estimator: str, seed: int) -> dict[str, Any]:
    """One run's config: the base with ``estimator`` and ``seed``; everything else the estimator needs is
    ppo_core's default for it. ``value_learning_rate`` stays: a critic-free run has no value network to read it."""
    return {**base, "advantage_estimator": estimator, "seed": seed}


def schedule(estimators: tuple[str, ...], seeds: list[int]) -> list[tuple[str, int]]:
    """(estimator, seed) in run order: seed by seed, the estimators' order rotated by one at each seed, so each
    estimator runs early, middle and late in turn and slow drift in the machine's load is spread over all of them."""
    order = []
    for index, seed in enumerate(seeds):
        shift = index % len(estimators)
        order += [(estimator, seed) for estimator in estimators[shift:] + estimators[:shift]]
    return order


# --------------------------------------------------------------------------------------------------- one run


def worker(values: dict[str, Any], threads: int) -> dict[str, Any]:
    """Train one config in this process: the SFT policy's held-out evaluation, then the run; its kept metrics,
    parameter counts and timings."""
    import torch

    torch.set_num_threads(threads)
    from benchmarks.common.memory import current_rss_mib
    from ppo_core.config.io import build_config
    from ppo_core.models.quiet import quiet_hugging_face
    from ppo_core.run.trainer import PPOTrainer

    quiet_hugging_face()
    warnings.filterwarnings("ignore")
    rss_after_imports = current_rss_mib()
    config = build_config(values)
    started = time.perf_counter()
    trainer = PPOTrainer(config)
    setup_s = time.perf_counter() - started
    # The starting policy on the held-out prompts, measured as the run's own evaluations measure it: ppo_core's
    # evaluate with the trainer's rollout (the function it passes there itself), at "update 0" (that picks the
    # sampling seed). Evaluation samples from a random stream of its own, so the training that follows is the same
    # as without it; it runs before the first update resets the peak-memory window, so no update's peak includes it.
    started = time.perf_counter()
    sft = trainer.evaluate(0)
    sft_eval_s = time.perf_counter() - started
    started = time.perf_counter()
    result = trainer.train()
    train_s = time.perf_counter() - started
    return {
        "estimator": config.advantage_estimator,
        "seed": config.seed,
        "generations_per_prompt": config.generations_per_prompt,
        "kl_in_reward": config.kl_penalty_in_reward,
        "initial_kl_coefficient": config.kl_coefficient,
        "num_updates": result.num_updates,
        "stop_reason": result.stop_reason,
        "parameters": {name: {"trainable": count.trainable, "total": count.total}
                       for name, count in trainer.parameter_counts.items()},
        "setup_s": setup_s,
        "sft_eval": sft,
        "sft_eval_s": sft_eval_s,
        "train_s": train_s,
        "rss_after_imports_mib": rss_after_imports,
        "torch_threads": torch.get_num_threads(),
        "series": {name: [_round(m[name]) for m in result.metrics] for name in SERIES if name in result.metrics[0]},
        "evaluations": [{name: m[name] for name in EVALUATION if name in m}
                        for m in result.metrics if "eval/gold_score" in m],
    }


def launch(values: dict[str, Any], threads: int, work_dir: Path, label: str) -> dict[str, Any]:
    """``worker`` in a fresh process with ``threads`` CPU threads; its record, with the process's wall time and
    the load average just before it started, or the error it ended with."""
    out = work_dir / f"{label}.json"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "benchmarks.estimators", "--worker", json.dumps(values),
               "--threads", str(threads), "--out", str(out)]
    load = os.getloadavg()
    started = time.perf_counter()
    finished = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              check=False)
    wall = time.perf_counter() - started
    if finished.returncode != 0 or not out.is_file():
        return {"estimator": values["advantage_estimator"], "seed": values["seed"], "returncode": finished.returncode,
                "error": finished.stdout[-3000:], "process_wall_s": wall, "load_average_before": load}
    return {**json.loads(out.read_text()), "returncode": 0, "process_wall_s": wall, "load_average_before": load}


# --------------------------------------------------------------------------------------------------- summary


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """One finished run's numbers: final held-out gold and KL, its gain over its SFT evaluation, the median over its
    updates of the two timed phases (robust to a moment of load from other jobs), and its highest per-update peak
    memory."""
    series, evals = run["series"], run["evaluations"]
    final = evals[-1]
    per_update = [rollout + update for rollout, update in zip(series["time/rollout_s"], series["time/update_s"],
                                                                strict=True)]
    return {
        "gold": final["eval/gold_score"],
        "kl": final["eval/kl"],
        "sft_gold": run["sft_eval"]["eval/gold_score"],
        "gain": final["eval/gold_score"] - run["sft_eval"]["eval/gold_score"],
        "gold_curve": [m["eval/gold_score"] for m in evals],
        "kl_curve": [m["eval/kl"] for m in evals],
        "eval_updates": [int(m["update"]) for m in evals],
        "final_kl_coefficient": series["objective/kl_coef"][-1],
        "train_s": run["train_s"],
        "rollout_s": statistics.median(series["time/rollout_s"]),
        "update_s": statistics.median(series["time/update_s"]),
        "per_update_s": statistics.median(per_update),
        "eval_s": sum(m.get("time/eval_s", 0.0) for m in evals),
        "peak_gib": max(series["memory/peak_gib"]),
        "peak_above_imports_mib": max(series["memory/peak_gib"]) * 1024 - run["rss_after_imports_mib"],
        "process_wall_s": run.get("process_wall_s", math.nan),
    }


def _interval(values: list[float]) -> dict[str, float | int]:
    from tuner.production.confidence import mean_interval

    mean, low, high = mean_interval(values)
    return {"mean": mean, "ci_low": low, "ci_high": high, "n": len(values)}


def summarise(runs: list[dict[str, Any]], estimators: tuple[str, ...]) -> dict[str, Any]:
    """Per estimator: the mean and 95% interval over seeds of held-out gold, its gain over SFT and its difference
    from GAE's (both paired by seed), and held-out KL; the median over seeds of times and peak memory, and their
    ratios to GAE: the median over seeds of the ratio to GAE's run on the same seed (run next to it, so under much
    the same load from other jobs; the TRL comparison's medians over repeats play the same part). Plus the SFT policy's
    held-out gold, one value per seed (the same policy and evaluation seed in every run of a seed:
    ``sft_identical_across_estimators`` checks it)."""
    done = [run for run in runs if run.get("returncode") == 0]
    rows: dict[str, Any] = {}
    for estimator in estimators:
        mine = [run_summary(run) for run in done if run["estimator"] == estimator]
        if not mine:
            rows[estimator] = {"runs": 0, "failed": sum(r["estimator"] == estimator for r in runs)}
            continue
        curves = list(zip(*(s["gold_curve"] for s in mine), strict=False))
        rows[estimator] = {
            "runs": len(mine), "failed": sum(r["estimator"] == estimator for r in runs) - len(mine),
            "gold": _interval([s["gold"] for s in mine]),
            "gain_over_sft": _interval([s["gain"] for s in mine]),
            "kl": _interval([s["kl"] for s in mine]),
            "gold_curve_mean": [statistics.fmean(c) for c in curves],
            "eval_updates": mine[0]["eval_updates"],
            "final_kl_coefficient": statistics.fmean(s["final_kl_coefficient"] for s in mine),
            **{key: statistics.median(s[key] for s in mine) for key in MACHINE_KEYS},
            "ranges": {key: [min(s[key] for s in mine), max(s[key] for s in mine)] for key in MACHINE_KEYS},
            "per_seed": {str(run["seed"]): s for run, s in zip(
                [run for run in done if run["estimator"] == estimator], mine, strict=True)},
        }
    reference = rows.get(REFERENCE, {})
    for row in rows.values():
        if row["runs"] and reference.get("runs"):
            # Paired by seed: the two runs of a seed start from the same SFT evaluation, evaluate with the same
            # sampling seeds, and ran one after the other.
            mine, gae = row["per_seed"], reference["per_seed"]
            shared = [seed for seed in mine if seed in gae]
            row["vs_gae"] = {key: statistics.median(mine[seed][key] / gae[seed][key] for seed in shared)
                             for key in RATIO_KEYS} if shared else {}
            row["gold_minus_gae"] = _interval([mine[seed]["gold"] - gae[seed]["gold"] for seed in shared])
    by_seed: dict[int, list[dict[str, float]]] = {}
    for run in done:
        by_seed.setdefault(run["seed"], []).append(run["sft_eval"])
    first = {seed: evals[0] for seed, evals in by_seed.items()}
    sft = {"gold": _interval([e["eval/gold_score"] for e in first.values()]),
           "kl": _interval([e.get("eval/kl", math.nan) for e in first.values()]),
           "per_seed": {str(seed): e["eval/gold_score"] for seed, e in first.items()},
           "sft_identical_across_estimators": all(len({e["eval/gold_score"] for e in evals}) == 1
                                                  for evals in by_seed.values())}
    return {"estimators": rows, SFT: sft}


def parameters(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Trainable and total parameters of each network a run of each estimator trains (trainer.parameter_counts)."""
    found: dict[str, Any] = {}
    for run in runs:
        if run.get("returncode") == 0:
            found.setdefault(run["estimator"], run["parameters"])
    return found


# --------------------------------------------------------------------------------------------------- tables


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def _ci(cell: dict[str, Any], digits: int = 3) -> str:
    return f"{_number(cell['mean'], digits)} [{_number(cell['ci_low'], digits)}, {_number(cell['ci_high'], digits)}]"


def markdown_table(summary: dict[str, Any]) -> str:
    """The report's table: SFT first, then one row per estimator."""
    rows, sft = summary["estimators"], summary[SFT]
    lines = ["| estimator | held-out gold, final [95% CI] | gain over SFT [95% CI] | minus GAE's, paired [95% CI] "
             "| held-out KL, nats [95% CI] "
             "| wall s / run | s / update (rollout, update) | time / update vs GAE | peak RSS GiB (vs GAE) "
             "| peak above imports MiB (vs GAE) |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|"]
    lines.append(f"| SFT policy (start) | {_ci(sft['gold'])} | - | - | {_ci(sft['kl'], 2)} | - | - | - | - | - |")
    for estimator, row in rows.items():
        if not row["runs"]:
            lines.append(f"| {LABELS.get(estimator, estimator)} | failed ({row['failed']} runs) | | | | | | | | |")
            continue
        ratios = row.get("vs_gae", {})
        lines.append(
            f"| {LABELS.get(estimator, estimator)} | {_ci(row['gold'])} | {_ci(row['gain_over_sft'])} "
            f"| {'-' if estimator == REFERENCE or 'gold_minus_gae' not in row else _ci(row['gold_minus_gae'])} "
            f"| {_ci(row['kl'], 2)} | {row['train_s']:.1f} | {row['per_update_s']:.3f} ({row['rollout_s']:.3f}, "
            f"{row['update_s']:.3f}) | {_ratio(ratios.get('per_update_s'))} "
            f"| {row['peak_gib']:.3f} ({_ratio(ratios.get('peak_gib'))}) "
            f"| {row['peak_above_imports_mib']:.0f} ({_ratio(ratios.get('peak_above_imports_mib'))}) |")
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def curve_table(summary: dict[str, Any]) -> str:
    """Mean held-out gold over seeds at each evaluation, per estimator."""
    rows = {e: r for e, r in summary["estimators"].items() if r["runs"]}
    if not rows:
        return ""
    updates = next(iter(rows.values()))["eval_updates"]
    lines = ["| estimator | " + " | ".join(f"update {u}" for u in updates) + " |",
             "|---|" + "---:|" * len(updates)]
    for estimator, row in rows.items():
        lines.append(f"| {LABELS.get(estimator, estimator)} | " + " | ".join(_number(v) for v in row["gold_curve_mean"])
                     + " |")
    return "\n".join(lines)


_NUMBER = r"(?:-?[\d.]+(?:[eE][-+]?\d+)?|null)"
_NUMBER_LIST = re.compile(rf"\[\s+({_NUMBER}(?:,\s+{_NUMBER})*)\s+\]")


def dump_json(value: Any) -> str:
    """JSON indented by one space, with every list of numbers on one line (a run's 96-update series would otherwise
    take a line per number)."""
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(re.split(r",\s+", m.group(1))) + "]", json.dumps(value, indent=1))


# --------------------------------------------------------------------------------------------------- command


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.estimators", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=None, help="Seeds per estimator (default 3; --quick 1).")
    parser.add_argument("--first-seed", type=int, default=FIRST_SEED, help=f"Default {FIRST_SEED}.")
    parser.add_argument("--episodes", type=int, default=None,
                        help="Episodes per run (default studies/train.yaml's total_episodes, 1536; --quick 32).")
    parser.add_argument("--estimators", nargs="+", default=None,
                        help=f"Default: {' '.join(ESTIMATORS)} (--quick: {' '.join(QUICK_ESTIMATORS)}); gae first "
                             "makes the ratios.")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per run (default 1; see the README).")
    parser.add_argument("--out", type=Path, default=None, help="Default benchmarks/results/estimators/estimators.json "
                                                                "(--quick: a temporary directory).")
    add_quick_argument(parser)
    parser.add_argument("--readme", action="store_true", help="Print the markdown tables for a README at the end.")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # one run's config, as JSON
    args = parser.parse_args(argv)
    if args.worker is not None:
        record = worker(json.loads(args.worker), args.threads)
        args.out.write_text(json.dumps(record))
        return
    if args.seeds is None:
        args.seeds = QUICK_SEEDS if args.quick else 3
    if args.episodes is None and args.quick:
        args.episodes = QUICK_EPISODES
    args.estimators = args.estimators or list(QUICK_ESTIMATORS if args.quick else ESTIMATORS)
    args.out = results_path(args.out, RESULTS / "estimators" / "estimators.json", args.quick)
    run(args, sys.argv[1:] if argv is None else argv)


def run(args: argparse.Namespace, argv: list[str]) -> None:
    from benchmarks.common.machine import machine_facts

    if args.seeds < 1:
        raise SystemExit("--seeds: at least 1")
    estimators = tuple(args.estimators)
    facts = machine_facts("cpu")
    base = {**base_values(args.episodes), **(QUICK_BASE if args.quick else {})}
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    order = schedule(estimators, seeds)
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ppo-tune-estimators-") as directory:
        for index, (estimator, seed) in enumerate(order, 1):
            record = launch(run_values(base, estimator, seed), args.threads, Path(directory), f"{estimator}-{seed}")
            runs.append(record)
            if record["returncode"] == 0:
                s = run_summary(record)
                note = (f"gold {s['sft_gold']:.3f} -> {s['gold']:.3f}, eval KL {s['kl']:.2f}, {s['train_s']:.1f} s "
                        f"({s['per_update_s']:.3f} s/update), peak {s['peak_gib']:.3f} GiB")
            else:
                note = f"FAILED (exit {record['returncode']}): {record['error'].strip().splitlines()[-1:]}"
            print(f"[{index}/{len(order)}] {estimator} seed {seed}: {note}; process {record['process_wall_s']:.1f} s, "
                  f"load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    wall = time.perf_counter() - started
    summary = summarise(runs, estimators)
    table, curves = markdown_table(summary), curve_table(summary)
    loads = [run["load_average_before"][0] for run in runs]
    print(f"{len(order)} runs ({len(seeds)} seeds x {len(estimators)} estimators, {base['total_episodes']} episodes "
          f"each, {args.threads} thread(s)) in {wall / 60:.1f} min; 1-min load average {min(loads):.2f}-"
          f"{max(loads):.2f} before the runs")
    print(table)
    if args.readme:
        print()
        print(curves)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dump_json(json_safe({
        "command": command_line("benchmarks.estimators", argv),
        "machine": {**facts, "load_average_at_end": os.getloadavg()},
        "git_commit": commit_at_start(),
        "settings": {"base_file": str(BASE.relative_to(ROOT)), "base": base, "estimators": list(estimators),
                     "seeds": seeds, "threads_per_run": args.threads, "order": [list(pair) for pair in order],
                     "quick": args.quick},
        "wall_s": round(wall, 1),
        "parameters": parameters(runs),
        "summary": summary,
        "table": table,
        "curve_table": curves,
        "runs": runs,
    })))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
