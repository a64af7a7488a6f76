"""Over-optimisation as Gao, Schulman and Hilton draw it, on several seeds: held-out gold and proxy against KL along
runs that push the proxy hard (a high learning rate, no KL penalty).

    python -m benchmarks.overoptimisation_curve [--task fortunes_v2_smollm2] [--seeds 0 1 2] [--work-dir DIR]
                                                [--out FILE] [--quick]

Each seed is one ``ppo-tune train`` of the same config (``--set`` overrides any field) into ``DIR/seed_<n>``, which
evaluates on the held-out prompts before training (``eval_on_start``: the untuned policy) and every ``eval_every``
updates. A seed whose run finished is read back, not run again, so an interrupted measurement resumes with every
finished run kept. Reported, over seeds, at each evaluation: mean held-out gold, proxy and KL with t-based 95%
intervals; the peak (the evaluation whose mean gold is highest), its gain over the untuned policy (paired over
seeds), the fall after it to the last evaluation (paired) and the proxy's change over that fall. The figure is a PNG
beside the JSON, drawn with plotly and rendered in headless Chromium.

``--quick``: the tiny text task, two seeds of four updates, results in ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from scipy import stats  # type: ignore[import-untyped]

from benchmarks.common.machine import cpu_model
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

OUT = RESULTS / "overoptimisation_curve" / "overoptimisation_curve.json"
WORK = RESULTS / "overoptimisation_curve" / "runs"
METRICS = ("eval/gold_score", "eval/score", "eval/kl")

# The SmolLM2 study's trial (benchmarks/studies/smollm2.yaml's base) pushed hard: the learning rate at which one run
# of the first task's gold over-optimised (2e-3, gold turning near update 16) and no KL penalty, for 48 updates,
# evaluated every 4.
CONFIG: dict[str, Any] = {
    "task": "fortunes_v2_smollm2", "advantage_estimator": "grpo", "use_peft": True, "lora_r": 16,
    "num_ppo_epochs": 1, "per_device_train_batch_size": 8, "num_generations": 4, "response_length": 16,
    "lr_scheduler_type": "constant", "temperature": 1.0, "learning_rate": 2.0e-3, "beta": 0.0,
    "total_episodes": 384, "eval_steps": 4, "eval_on_start": True, "num_eval_prompts": 32, "num_eval_samples": 2,
    "num_sample_generations": 4,
}
QUICK = {"task": "fortunes_v2_tiny", "use_peft": False, "total_episodes": 32, "eval_steps": 2,
         "num_eval_prompts": 4, "num_sample_generations": 1, "learning_rate": 1.0e-3}


def interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean and its two-sided t interval, ``mean -/+ t_{n-1} s / sqrt(n)``; the interval
    is nan for fewer than two values."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def evaluations(run_dir: Path) -> list[dict[str, float]]:
    """The run's held-out evaluations in update order: update and every metric of :data:`METRICS`."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{"update": row["update"], **{m: row[m] for m in METRICS}} for row in rows if METRICS[0] in row]


def finished(run_dir: Path, updates: int) -> bool:
    """Whether the run in ``run_dir`` reached its last update (a stopped run is run again from the start)."""
    try:
        return any(row["update"] == updates for row in evaluations(run_dir))
    except (OSError, ValueError, KeyError):
        return False


def run_seed(config: dict[str, Any], seed: int, run_dir: Path, cache: str | None) -> None:
    """One ``ppo-tune train`` of ``config`` at ``seed`` into ``run_dir`` (replaced if a stopped run left it)."""
    if run_dir.exists():
        for path in sorted(run_dir.rglob("*"), reverse=True):
            path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
        run_dir.rmdir()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    config_file = run_dir.parent / f"seed_{seed}.yaml"
    config_file.write_text(yaml.safe_dump({**config, "seed": seed}, sort_keys=True))
    env = {**os.environ, **({"PPO_TUNE_CACHE": cache} if cache else {})}
    subprocess.run([sys.executable, "-m", "ppo_tune", "train", str(config_file), "--output", str(run_dir)],
                   check=True, env=env)


def summarise(runs: dict[int, list[dict[str, float]]]) -> dict[str, Any]:
    """The curve over seeds at each evaluation, the peak, its gain over the untuned policy and the fall after it."""
    seeds = sorted(runs)
    updates = sorted({row["update"] for row in runs[seeds[0]]})
    table = {int(u): {s: next(r for r in runs[s] if r["update"] == u) for s in seeds} for u in updates}
    curve: list[dict[str, Any]] = [{"update": u, **{m: interval([table[u][s][m] for s in seeds]) for m in METRICS}}
                                   for u in table]
    peak = max(curve, key=lambda point: point["eval/gold_score"][0])
    first, last = int(updates[0]), int(updates[-1])

    def paired(metric: str, a: int, b: int) -> tuple[float, float, float]:
        return interval([table[a][s][metric] - table[b][s][metric] for s in seeds])

    own = {s: max(runs[s], key=lambda row: row["eval/gold_score"]) for s in seeds}
    return {
        "seeds": seeds,
        "curve": curve,
        # Each seed's own best evaluation: runs over-optimise at different speeds, so the mean curve's peak can sit
        # where no seed peaks. A maximum over a run's evaluations is biased upward by their noise.
        "per_seed": {str(s): {"untuned_gold": table[first][s]["eval/gold_score"], "peak_update": own[s]["update"],
                              "peak_gold": own[s]["eval/gold_score"], "peak_kl": own[s]["eval/kl"],
                              "end_gold": table[last][s]["eval/gold_score"], "end_kl": table[last][s]["eval/kl"],
                              "end_proxy_minus_peak_proxy": table[last][s]["eval/score"] - own[s]["eval/score"]}
                     for s in seeds},
        "own_peak_gain": interval([own[s]["eval/gold_score"] - table[first][s]["eval/gold_score"] for s in seeds]),
        "own_fall_to_end": interval([own[s]["eval/gold_score"] - table[last][s]["eval/gold_score"] for s in seeds]),
        "untuned_update": first,
        "peak_update": peak["update"],
        "peak_gain": paired("eval/gold_score", peak["update"], first),
        "fall_after_peak": paired("eval/gold_score", peak["update"], last),
        "proxy_change_after_peak": paired("eval/score", last, peak["update"]),
        "kl_at_peak": peak["eval/kl"],
        "kl_at_end": curve[-1]["eval/kl"],
    }


def figure_png(summary: dict[str, Any], path: Path, title: str) -> None:
    """Mean held-out gold and proxy against mean KL, with their intervals, as a PNG rendered in headless Chromium."""
    import plotly.graph_objects as go
    from playwright.sync_api import sync_playwright
    from plotly.subplots import make_subplots

    from tools.screenshots import CHROMIUM, CHROMIUM_ARGS

    kl = [point["eval/kl"][0] for point in summary["curve"]]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for metric, name, color, secondary in (("eval/gold_score", "held-out gold", "#1f77b4", False),
                                           ("eval/score", "held-out proxy", "#d62728", True)):
        mean = [point[metric][0] for point in summary["curve"]]
        low = [point[metric][1] for point in summary["curve"]]
        high = [point[metric][2] for point in summary["curve"]]
        fig.add_trace(go.Scatter(x=kl, y=mean, name=name, mode="lines+markers", line={"color": color},
                                 error_y={"type": "data", "symmetric": False,
                                          "array": [h - m for h, m in zip(high, mean, strict=True)],
                                          "arrayminus": [m - lo for m, lo in zip(mean, low, strict=True)]}),
                      secondary_y=secondary)
    fig.update_layout(title=title, width=900, height=520, template="plotly_white", legend={"x": 0.02, "y": 0.98})
    fig.update_xaxes(title_text="held-out KL to the untuned policy (nats, mean over seeds)")
    fig.update_yaxes(title_text="gold", secondary_y=False)
    fig.update_yaxes(title_text="proxy reward", secondary_y=True)
    with tempfile.TemporaryDirectory() as tmp:
        page_file = Path(tmp) / "figure.html"
        fig.write_html(page_file, include_plotlyjs=True, full_html=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS), headless=True)
            try:
                page = browser.new_page(viewport={"width": 920, "height": 540})
                page.goto(page_file.as_uri())
                page.wait_for_selector(".main-svg")
                page.locator(".js-plotly-plot").screenshot(path=str(path))
            finally:
                browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overoptimisation_curve",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=None, help="the built-in task (default: the config's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="config fields over the default config (YAML values)")
    parser.add_argument("--work-dir", type=Path, default=None, help=f"the runs (default: {WORK})")
    parser.add_argument("--out", default=None)
    parser.add_argument("--no-figure", action="store_true", help="skip the PNG")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    out = results_path(args.out, OUT, args.quick)
    config = {**CONFIG, **(QUICK if args.quick else {})}
    if args.task:
        config["task"] = args.task
    for item in args.set:
        field, _, value = item.partition("=")
        config[field] = yaml.safe_load(value)
    seeds = args.seeds[:2] if args.quick else args.seeds
    work = args.work_dir or (out.parent / "overoptimisation_curve_runs" if args.quick else WORK)
    updates = config["total_episodes"] // config["per_device_train_batch_size"]
    for seed in seeds:
        run_dir = work / f"seed_{seed}"
        if finished(run_dir, updates):
            print(f"seed {seed}: finished, read back from {run_dir}", flush=True)
            continue
        print(f"seed {seed}: training into {run_dir}", flush=True)
        run_seed(config, seed, run_dir, os.environ.get("PPO_TUNE_CACHE"))
    summary = summarise({seed: evaluations(work / f"seed_{seed}") for seed in seeds})
    result = {"command": command_line("benchmarks.overoptimisation_curve", argv), "code": commit_at_start(),
              "machine": cpu_model(), "config": config, "work_dir": str(work), **summary}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    if not args.no_figure:
        figure_png(summary, out.with_suffix(".png"),
                   f"{config['task']}: lr {config['learning_rate']:g}, beta {config['beta']:g}, "
                   f"{len(seeds)} seeds (95% intervals)")
    gain, fall = summary["peak_gain"], summary["fall_after_peak"]
    print(f"peak at update {summary['peak_update']}: gold +{gain[0]:.3f} [{gain[1]:+.3f}, {gain[2]:+.3f}] over "
          f"untuned; then falls {fall[0]:.3f} [{fall[1]:+.3f}, {fall[2]:+.3f}] to the end; results in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
