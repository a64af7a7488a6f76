"""How well each text task's proxy orders its policy's responses as gold does, on a fresh draw no build has seen.

Each build measures its proxy on responses to the held-out prompts drawn with the task's seed + 1, and the proxies'
recipes were chosen looking at such draws. This draws another set: ``--samples`` responses of the task's policy to
each held-out prompt, with a sampling seed no build uses (``--seed``, 13), and scores them by gold and by each
task's proxy as a run reads it (the task's ``reward_text``, the proxy's own tokenizer and pooling). It reports, per
task, the share of gold-apart pairs of one prompt's responses that the proxy orders as gold does, and the Spearman
correlation of proxy and gold over all responses, each with a 95% bootstrap interval over prompts; and, for each
task after the first, its difference from the first task's, paired by prompt.

Tasks on the same policy share one draw: the difference between their proxies is the proxies alone. With
``--moved RUN_DIR ...`` it also reads the held-out samples training runs stored, each with the proxy's score and
gold as the run read them: the proxy's fidelity at each update, after the policy has moved.

    python -m benchmarks.proxy_fidelity       # the three SmolLM2 tasks; benchmarks/results/proxy_fidelity/fresh.json
    python -m benchmarks.proxy_fidelity --quick --out /tmp/proxy_fidelity.json

``--quick``: the tiny text task, 16 held-out prompts and 4 responses to each, in seconds. The draw resumes: the
samples go to ``--work-dir`` as they finish.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from ppo_core.models.loading import load_causal_lm, load_tokenizer
from ppo_core.rewards.models import classifier_scores, keep_last, max_positions
from ppo_core.rewards.pooling import score_pooling
from ppo_core.tasks import get_task
from ppo_core.tasks.builtin_task import BuiltinTask
from ppo_core.tasks.fortunes.pairs import ScoredResponse, comparable_pairs
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.fortunes.policy_samples import policy_chunks
from ppo_core.tasks.fortunes.proxy_fidelity import fidelity, pair_agreement
from ppo_core.tasks.ranks import rank_correlation
from ppo_core.tasks.variants import TASK_NAMES, task_params
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

OUT = RESULTS / "proxy_fidelity" / "fresh.json"
TASKS = ("fortunes_v3_smollm2", "fortunes_v4_smollm2", "fortunes_v5_smollm2")
QUICK_TASKS = ("fortunes_v3_tiny",)
SEED = 13
"""No build draws with it: the builds' pairs use the task seed (0), their held-out measure seed + 1."""
SAMPLES, QUICK_SAMPLES, QUICK_PROMPTS = 8, 4, 16
RESAMPLES = 2000
BATCH_SIZE = 64


@torch.no_grad()
def proxy_scores(task: BuiltinTask, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
    """The task's proxy's score of each response, read as a run reads it: the task's text, the proxy's tokenizer
    and pooling, each text cut to the proxy's positions."""
    model = AutoModelForSequenceClassification.from_pretrained(task.reward_model_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(task.reward_model_path, padding_side="right")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    pooling = score_pooling(model.config)
    rows = [list(ids) for ids in tokenizer([task.reward_text(p, r) for p, r in zip(prompts, responses,
                                                                                  strict=True)])["input_ids"]]
    rows = keep_last(rows, max_positions(model))
    scores: list[float] = []
    for start in range(0, len(rows), BATCH_SIZE):
        padded = tokenizer.pad({"input_ids": rows[start : start + BATCH_SIZE]}, return_tensors="pt")
        scores.extend(classifier_scores(model, padded["input_ids"], padded["attention_mask"], pooling).tolist())
    return scores


def draw(task: BuiltinTask, prompts: Sequence[str], samples: int, seed: int, work: Path) -> list[tuple[str, str]]:
    """``samples`` responses of the task's policy to each prompt, drawn a chunk at a time into ``work`` (resumed
    from there)."""
    model = load_causal_lm(task.policy_path, field_name="task")
    tokenizer = load_tokenizer(task.policy_path, field_name="task")
    return [(s.prompt, s.response) for chunk in policy_chunks(model, tokenizer, prompts, samples,
                                                               task.response_length, seed, work)
            for s in chunk]


def by_prompt(scored: Sequence[ScoredResponse]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for index, item in enumerate(scored):
        groups.setdefault(item.prompt, []).append(index)
    return groups


def resampled(scored: Sequence[ScoredResponse], proxies: Sequence[Sequence[float]],
              rng: random.Random) -> tuple[list[ScoredResponse], list[list[float]]]:
    """One bootstrap draw of whole prompts, with replacement: their responses and each proxy's scores of them."""
    groups = list(by_prompt(scored).values())
    chosen = [rng.choice(groups) for _ in groups]
    # Each copy of a prompt is a prompt of its own, so that no pair joins responses of two copies.
    regrouped = [(copy, index) for copy, group in enumerate(chosen) for index in group]
    items = [ScoredResponse(str(copy), scored[i].response, scored[i].gold) for copy, i in regrouped]
    return items, [[proxy[i] for _, i in regrouped] for proxy in proxies]


def interval(values: Sequence[float]) -> list[float]:
    """The 2.5% and 97.5% quantiles of the finite values (a resample without a gold-apart pair has no accuracy)."""
    ordered = sorted(v for v in values if math.isfinite(v))
    if not ordered:
        return [math.nan, math.nan]
    return [ordered[int(0.025 * (len(ordered) - 1))], ordered[int(0.975 * (len(ordered) - 1))]]


def figures(scored: Sequence[ScoredResponse], proxies: dict[str, list[float]], resamples: int,
            seed: int) -> dict[str, Any]:
    """Each proxy's fidelity with its bootstrap interval, and each later proxy's difference from the first's."""
    names = list(proxies)
    rng = random.Random(seed)
    draws: dict[str, dict[str, list[float]]] = {name: {"pair_accuracy": [], "spearman": []} for name in names}
    for _ in range(resamples):
        items, scores = resampled(scored, [proxies[name] for name in names], rng)
        pairs = comparable_pairs(items)
        gold = [item.gold for item in items]
        for name, score in zip(names, scores, strict=True):
            draws[name]["pair_accuracy"].append(pair_agreement(score, pairs))
            draws[name]["spearman"].append(rank_correlation(gold, score))
    out: dict[str, Any] = {}
    for name in names:
        out[name] = {**fidelity(scored, proxies[name]),
                     **{f"{key}_95": interval(values) for key, values in draws[name].items()}}
    first = names[0]
    for name in names[1:]:
        out[name]["minus_" + first] = {
            key: {"difference": out[name][key] - out[first][key],
                  "interval_95": interval([a - b for a, b in zip(draws[name][key], draws[first][key], strict=True)])}
            for key in ("pair_accuracy", "spearman")}
    return out


def moved(runs: Sequence[Path], resamples: int, seed: int) -> dict[str, Any]:
    """The proxy's fidelity after the policy has moved: the held-out samples that training runs stored
    (``samples.jsonl``: each update's responses with the proxy's score and gold, as the run read them), per update,
    pooled over the runs. Pairs join responses of different runs to one prompt at one update."""
    by_update: dict[int, tuple[list[ScoredResponse], list[float]]] = {}
    for run in runs:
        for line in (run / "samples.jsonl").read_text().splitlines():
            row = json.loads(line)
            scored, proxy = by_update.setdefault(int(row["update"]), ([], []))
            scored.append(ScoredResponse(row["prompt"], row["response"], float(row["gold_score"])))
            proxy.append(float(row["score"]))
    return {str(update): {"mean_gold": sum(s.gold for s in scored) / len(scored),
                          **figures(scored, {"proxy": proxy}, resamples, seed)["proxy"]}
            for update, (scored, proxy) in sorted(by_update.items())}


def mixed_gold(tasks: Sequence[str]) -> tuple[str, str] | None:
    """The first two of ``tasks`` that would share a draw (one pretrained pair policy) while reading different gold
    versions, or None: the draw is scored by the first task's gold, so the second's proxy would be judged against a
    gold it never learned."""
    first: dict[str, tuple[str, int]] = {}
    for name in tasks:
        params = task_params(name)
        if isinstance(params, TextTaskParams) and params.pair_policy is not None:
            earlier, version = first.setdefault(params.pair_policy, (name, params.gold_version))
            if version != params.gold_version:
                return earlier, name
    return None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=None, help=f"text tasks (default: {' '.join(TASKS)})")
    parser.add_argument("--seed", type=int, default=SEED, help="the sampling seed of the fresh draw")
    parser.add_argument("--samples", type=int, default=None, help=f"responses per held-out prompt ({SAMPLES})")
    parser.add_argument("--work-dir", type=Path, default=None, help="where the draw is kept as it finishes")
    parser.add_argument("--moved", nargs="+", type=Path, default=None, metavar="RUN_DIR",
                        help="also read the held-out samples these training runs stored: the proxy's fidelity at "
                             "each update, after the policy moved")
    parser.add_argument("--out", default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    tasks = args.tasks or list(QUICK_TASKS if args.quick else TASKS)
    unknown = [name for name in tasks if name not in TASK_NAMES]
    if unknown:
        parser.error(f"--tasks: no built-in task {unknown[0]!r} (one of {', '.join(TASK_NAMES)})")
    mixed = mixed_gold(tasks)
    if mixed:
        parser.error(f"--tasks: {mixed[0]} and {mixed[1]} share a policy's draw but not a gold, and a draw is scored "
                     "by one gold; run them apart")
    for run in args.moved or []:
        if not (run / "samples.jsonl").is_file():
            parser.error(f"--moved: {run} has no samples.jsonl; expected a ppo-tune train output directory")
    samples = args.samples or (QUICK_SAMPLES if args.quick else SAMPLES)
    out = results_path(args.out, OUT, args.quick)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="proxy_fidelity."))
    work.mkdir(parents=True, exist_ok=True)
    from benchmarks.common.machine import machine_facts

    loaded = {name: get_task(name) for name in tasks}
    draws: dict[str, list[ScoredResponse]] = {}
    proxies: dict[str, dict[str, list[float]]] = {}
    for name, task in loaded.items():
        prompts = task.eval_prompts[:QUICK_PROMPTS] if args.quick else task.eval_prompts
        if task.policy_path not in draws:
            drawn = draw(task, prompts, samples, args.seed, work / f"samples_{len(draws)}.jsonl")
            gold = task.gold_score([p for p, _ in drawn], [r for _, r in drawn])
            draws[task.policy_path] = [ScoredResponse(p, r, g) for (p, r), g in zip(drawn, gold, strict=True)]
        scored = draws[task.policy_path]
        proxies.setdefault(task.policy_path, {})[name] = proxy_scores(task, [s.prompt for s in scored],
                                                                      [s.response for s in scored])
    result: dict[str, Any] = {
        "command": command_line("benchmarks.proxy_fidelity", argv), "code": commit_at_start(),
        "machine": machine_facts("cpu"), "seed": args.seed, "samples_per_prompt": samples, "quick": args.quick,
        "builds": {name: task.info["reward_model"].get("heldout_prompts_fidelity") for name, task in loaded.items()},
        "policies": {},
    }
    for policy, scores in proxies.items():
        scored = draws[policy]
        result["policies"][policy] = {"responses": len(scored), "prompts": len(by_prompt(scored)),
                                      "proxies": figures(scored, scores, RESAMPLES if not args.quick else 50,
                                                         args.seed)}
    if args.moved:
        result["moved"] = {"runs": [str(run) for run in args.moved],
                           "updates": moved(args.moved, RESAMPLES if not args.quick else 50, args.seed)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for policy, entry in result["policies"].items():
        for name, figure in entry["proxies"].items():
            print(f"{name}: pair accuracy {figure['pair_accuracy']:.3f} {figure['pair_accuracy_95']}, "
                  f"Spearman {figure['spearman']:.3f} {figure['spearman_95']} ({figure['pairs']} pairs, "
                  f"{entry['responses']} responses of {policy})")
    for update, figure in result.get("moved", {}).get("updates", {}).items():
        print(f"after {update} updates: pair accuracy {figure['pair_accuracy']:.3f}, Spearman "
              f"{figure['spearman']:.3f} ({figure['pairs']} pairs, {figure['responses']} responses, mean gold "
              f"{figure['mean_gold']:.3f})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
