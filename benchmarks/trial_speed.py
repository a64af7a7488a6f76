"""Episodes per second of a real-model trial at a study's settings: the code at a base commit (A) against the working
tree (B, and variants of B's config), interleaved in one run on one machine.

    python -m benchmarks.trial_speed [--study benchmarks/studies/smollm2.yaml] [--base HEAD] [--pairs 3] [--threads 1]
                                     [--set KEY=VALUE ...] [--variant NAME KEY=VALUE ...] [--out FILE] [--quick]

A trial is the study's ``base`` config at one point of its search space (``--set``, for the searched fields; without
it, SmolLM2's: learning_rate 1e-3, beta 0.02, num_generations 4, cliprange 0.2), trained in a fresh process at
``--threads`` torch threads, as a tuner worker trains one. A's process imports ppo_core from ``git archive BASE
ppo_core``, B's from the working tree. Each round runs A, B, then every ``--variant`` (B's code with those fields
changed), and round i uses seed i for all of them: on a shared machine a busy spell then slows one round's runs
alike, and the ratio B/A (episodes per second over ``train()``, loading excluded) is read within each round, its
median and range over the rounds. The same runs give the numerics: each round's held-out gold and KL at the end, per
variant, on the same seed.

Each trial's time splits by its own metrics: ``time/rollout_s`` (sampling and scoring the training batches),
``time/update_s``, ``time/eval_s`` (the held-out evaluations), and the rest of ``train()`` (sample recordings,
callbacks). Each variant's held-out gold and KL are also compared with ``--reference``'s (default B), seed by seed:
the mean paired difference and its 95% t interval, the numerics check of a fast path against the path it replaces.

The file is written after every round; run the same command again after an interruption and it continues from the
rounds already written (the base is pinned to its commit hash, so a commit made meanwhile does not change A).
``--quick``: a tiny Llama on the letter reward, 1 round, results in ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common.machine import machine_facts
from ppo_core import PPOConfig
from ppo_core.errors import InputError, first_line
from tools.provenance import REPO_ROOT, command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path
from tuner.production.confidence import mean_interval

OUT = RESULTS / "trial_speed" / "trial_speed.json"
POINT = {"learning_rate": 1e-3, "beta": 0.02, "num_generations": 4, "cliprange": 0.2}
MARK = "TRIAL-SPEED "
# Run in the trial's process, whichever tree it imports ppo_core from: only PPOTrainer, PPOConfig and the metrics
# every version reports, so that A's older code runs it as B's does.
TRIAL = """
import json, sys, time
import torch
torch.set_num_threads(int(sys.argv[2]))
from ppo_core import PPOConfig, PPOTrainer
trainer = PPOTrainer(PPOConfig(**json.loads(sys.argv[1])))
started = time.perf_counter()
metrics = trainer.train().metrics
seconds = time.perf_counter() - started
evaluated = [m for m in metrics if "eval/kl" in m]
print("MARK" + json.dumps({
    "train_s": seconds, "episodes": trainer.episode,
    "rollout_s": sum(m["time/rollout_s"] for m in metrics), "update_s": sum(m["time/update_s"] for m in metrics),
    "eval_s": sum(m.get("time/eval_s", 0.0) for m in metrics),
    "eval_gold": evaluated[-1].get("eval/gold_score") if evaluated else None,
    "eval_kl": evaluated[-1]["eval/kl"] if evaluated else None,
    "sampling_bf16": metrics[-1].get("precision/sampling_bf16"),
    "sampling_fused": metrics[-1].get("precision/sampling_fused"),
}))
""".replace("MARK", MARK)


def base_tree(commit: str, directory: Path) -> Path:
    """ppo_core as ``commit`` has it, extracted under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit, "ppo_core"], cwd=REPO_ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
    return directory


def run_trial(tree: Path, config: dict[str, Any], threads: int) -> dict[str, Any]:
    """One trial in a fresh process that imports ppo_core from ``tree`` (the repository after it, for rewards
    named by module)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(REPO_ROOT)]), "OMP_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false"}
    finished = subprocess.run([sys.executable, "-c", TRIAL, json.dumps(config), str(threads)], cwd=tree, env=env,
                              capture_output=True, text=True, check=False)
    lines = [line for line in finished.stdout.splitlines() if line.startswith(MARK)]
    if finished.returncode != 0 or not lines:
        raise SystemExit(f"a trial in {tree} failed:\n{finished.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len(MARK):])
    result["episodes_per_s"] = result["episodes"] / result["train_s"]
    result["other_s"] = result["train_s"] - result["rollout_s"] - result["update_s"] - result["eval_s"]
    return result


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per variant: episodes per second, its ratio to A within each round, the time split and the eval share."""
    summary: dict[str, Any] = {}
    for name in rounds[0]:
        runs = [trial[name] for trial in rounds]
        summary[name] = {
            "episodes_per_s": spread([run["episodes_per_s"] for run in runs]),
            "over_a": spread([run["episodes_per_s"] / trial["A"]["episodes_per_s"]
                              for run, trial in zip(runs, rounds, strict=True)]),
            "eval_share": spread([run["eval_s"] / run["train_s"] for run in runs]),
            "seconds": {part: statistics.median(run[part] for run in runs)
                        for part in ("train_s", "rollout_s", "update_s", "eval_s", "other_s")},
            "eval_gold": [run["eval_gold"] for run in runs], "eval_kl": [run["eval_kl"] for run in runs],
            "sampling_bf16": runs[-1]["sampling_bf16"],
            "sampling_fused": runs[-1].get("sampling_fused"),  # None from code older than the metric
        }
    return summary


def paired(rounds: list[dict[str, dict[str, Any]]], reference: str) -> dict[str, Any]:
    """Per variant and per measure (``eval_gold``, ``eval_kl``): the mean over rounds of (variant - reference) on the
    same seed, with its 95% t interval, as ``[mean, low, high]``; rounds where either value is missing are left
    out."""
    compared: dict[str, Any] = {}
    for name in rounds[0]:
        if name == reference:
            continue
        compared[name] = {}
        for measure in ("eval_gold", "eval_kl"):
            differences = [trial[name][measure] - trial[reference][measure] for trial in rounds
                           if trial[name][measure] is not None and trial[reference][measure] is not None]
            compared[name][measure] = list(mean_interval(differences)) if differences else None
    return compared


def quick_config(directory: Path) -> dict[str, Any]:
    from tools import tiny_data, tiny_models

    return {"task": None, "sft_model_path": str(tiny_models.write_llama(directory / "llama", seed=1)),
            "dataset_name": str(tiny_data.write_jsonl_splits(directory / "data", "standard", n_train=32, n_test=8)),
            "reward_funcs": ["examples.bring_your_own.rewards:letter_reward"], "advantage_estimator": "grpo",
            "use_peft": True, "lora_r": 4, "num_ppo_epochs": 1, "total_episodes": 16, "per_device_train_batch_size": 8,
            "response_length": 4, "eval_steps": 0.5, "num_eval_prompts": 4, "num_eval_samples": 2,
            "num_sample_generations": 1, "temperature": 1.0}


def markdown(summary: dict[str, Any]) -> str:
    lines = ["| variant | episodes/s (median, range) | over A (median, range) | held-out evaluation's share | "
             "seconds: train, rollout, update, eval, other |", "|---|---|---|---|---|"]
    for name, row in summary.items():
        eps, ratio, share = row["episodes_per_s"], row["over_a"], row["eval_share"]
        seconds = ", ".join(f"{row['seconds'][part]:.1f}" for part in ("train_s", "rollout_s", "update_s", "eval_s",
                                                                      "other_s"))
        lines.append(f"| {name} | {eps['median']:.2f} ({eps['min']:.2f}-{eps['max']:.2f}) | {ratio['median']:.2f}x "
                     f"({ratio['min']:.2f}-{ratio['max']:.2f}) | {share['median']:.0%} | {seconds} |")
    return "\n".join(lines)


def parse_values(pairs: list[str]) -> dict[str, Any]:
    return {key: yaml.safe_load(value) for key, _, value in (pair.partition("=") for pair in pairs)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trial_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=REPO_ROOT / "benchmarks" / "studies" / "smollm2.yaml")
    parser.add_argument("--base", default="HEAD", help="the commit A runs (default: HEAD)")
    parser.add_argument("--pairs", type=int, default=3, help="rounds of A, B and the variants")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="the point of the search space")
    parser.add_argument("--variant", nargs="+", action="append", default=[], metavar="NAME KEY=VALUE",
                        help="also B's code with these fields changed; repeatable")
    parser.add_argument("--reference", default="B", help="the variant the others' gold and KL are paired with")
    parser.add_argument("--out", type=Path, default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ppo-bench-trial-speed-"))
    if args.quick:
        config, args.pairs = quick_config(work), 1
    else:
        config = {**yaml.safe_load(args.study.read_text())["base"], **(parse_values(args.set) if args.set else POINT)}
    variants = {"A": {}, "B": {}, **{name: parse_values(values) for name, *values in args.variant}}
    if args.reference not in variants:
        parser.error(f"--reference: no variant named {args.reference!r}")
    for name, changes in variants.items():
        # Each trial's config as this tree reads it, before a base tree is built or a trial is started: a value of
        # the wrong type ("1e-3" is a string to YAML) would otherwise end the first trial with a traceback.
        try:
            PPOConfig(**{**config, **changes, "seed": 0})
        except InputError as error:
            parser.error(f"{name}'s config: {first_line(error)}")
    base = subprocess.run(["git", "rev-parse", args.base], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    trees = {"A": base_tree(base, work / "base"), "B": REPO_ROOT}
    out = results_path(args.out, OUT, args.quick)
    plan = {"base": base, "config": config, "variants": variants, "threads": args.threads, "quick": args.quick}
    rounds = earlier_rounds(out, plan)
    started = time.perf_counter()
    for seed in range(len(rounds), args.pairs):
        rounds.append({name: run_trial(trees.get(name, REPO_ROOT), {**config, **changes, "seed": seed},
                                       args.threads) for name, changes in variants.items()})
        print(f"round {seed + 1} of {args.pairs}: " + ", ".join(
            f"{name} {run['episodes_per_s']:.2f} episodes/s" for name, run in rounds[-1].items()), file=sys.stderr)
        result = {
            "command": command_line("benchmarks.trial_speed", argv), **plan, "rounds": rounds,
            "summary": summarise(rounds), "paired": {"reference": args.reference, **paired(rounds, args.reference)},
            "seconds_this_session": time.perf_counter() - started, "machine": machine_facts("cpu"),
            "load_average": os.getloadavg(), "code": commit_at_start(),
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    summary = summarise(rounds)
    print(markdown(summary))
    print(f"wrote {out}", file=sys.stderr)


def earlier_rounds(out: Path, plan: dict[str, Any]) -> list[dict[str, dict[str, Any]]]:
    """The rounds ``out`` already holds for this same plan (base commit, config, variants, threads), else none: a
    plan that differs starts over."""
    try:
        earlier = json.loads(out.read_text())
    except (OSError, ValueError):
        return []
    if any(earlier.get(key) != value for key, value in plan.items()):
        return []
    rounds: list[dict[str, dict[str, Any]]] = earlier.get("rounds", [])
    print(f"continuing {out}: {len(rounds)} round(s) already measured", file=sys.stderr)
    return rounds


if __name__ == "__main__":
    main()
