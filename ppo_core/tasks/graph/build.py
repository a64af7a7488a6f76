"""Building a shortest-path task into a directory: graph, SFT policy, reward model, report.

The build is a pure function of ``TaskParams``: every random choice comes from a seeded
``random.Random`` stream or from torch's RNG, seeded inside a forked RNG state.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import GPT2ForSequenceClassification, GPT2LMHeadModel, PreTrainedTokenizerFast

from ppo_core.tasks.build import EVAL_TEMPERATURES, POLICY_DIR, REWARD_MODEL_DIR, torch_build_state
from ppo_core.tasks.cache_dirs import BUILD_INFO
from ppo_core.tasks.graph.gold import GoldScorer
from ppo_core.tasks.graph.graph import Graph, random_connected_graph
from ppo_core.tasks.graph.pairs import PreferencePair, sample_pairs
from ppo_core.tasks.graph.params import BUILD_VERSION, TaskParams
from ppo_core.tasks.graph.prompts import split_prompts
from ppo_core.tasks.graph.sft import sample_sft_batch, train_sft
from ppo_core.tasks.graph.tokenizer import build_tokenizer
from ppo_core.tasks.reward_model import format_for_reward, pairwise_accuracy, score_ids, train_reward_model
from ppo_core.tasks.sampling import mean_gold, sample_responses

logger = logging.getLogger(__name__)


def _stream(params: TaskParams, purpose: str) -> random.Random:
    """An independent, reproducible RNG per purpose, so changing one part of the build
    (say, the number of RM pairs) does not reshuffle the others (say, the graph)."""
    return random.Random(f"{params.seed}/{purpose}")


def task_graph(params: TaskParams) -> Graph:
    """The task's fixed graph."""
    return random_connected_graph(params.num_nodes, params.num_edges, params.max_degree, _stream(params, "graph"))


def task_prompts(params: TaskParams, graph: Graph) -> tuple[list[str], list[str]]:
    """The task's ``(train_prompts, eval_prompts)``."""
    return split_prompts(graph, params.num_eval_prompts, _stream(params, "prompts"))


def _graph_info(graph: Graph) -> dict[str, Any]:
    pairs = Counter(graph.distances[a][b] for a in range(graph.num_nodes) for b in range(graph.num_nodes) if a != b)
    return {
        "num_nodes": graph.num_nodes,
        "edges": graph.edges(),
        "diameter": graph.diameter(),
        "trips_by_distance": {str(d): n for d, n in sorted(pairs.items())},
    }


def _pearson(xs: torch.Tensor, ys: torch.Tensor) -> float:
    xs, ys = xs - xs.mean(), ys - ys.mean()
    return float((xs * ys).sum() / ((xs.norm() * ys.norm()).clamp_min(1e-12)))


def _sft_report(
    policy: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerFast,
    gold: GoldScorer,
    eval_prompts: list[str],
    params: TaskParams,
) -> dict[str, Any]:
    """Gold statistics of the SFT policy's samples on the eval prompts, per temperature."""
    return {
        f"eval_prompts_t{t}": mean_gold(
            policy,
            tokenizer,
            gold,
            eval_prompts,
            params.eval_samples_per_prompt,
            t,
            params.response_length,
            seed=params.seed,
        )
        for t in EVAL_TEMPERATURES
    }


def _rm_report(
    reward_model: GPT2ForSequenceClassification,
    rm_tok: PreTrainedTokenizerFast,
    train_pairs: list[PreferencePair],
    heldout_pairs: list[PreferencePair],
    on_policy: tuple[list[str], list[str], list[float]],
) -> dict[str, Any]:
    """Pairwise accuracies, and how the RM scores the SFT policy's own samples (PPO's start).

    ``on_policy`` is ``(prompts, responses, gold scores)`` of SFT samples; the RM-gold
    correlation there says how well the proxy tracks gold where PPO begins.
    """
    near = [p for p in heldout_pairs if p.chosen_family == p.rejected_family == "sft"]
    prompts, responses, golds = on_policy
    texts = [format_for_reward(p, r) for p, r in zip(prompts, responses, strict=True)]
    with torch.no_grad():
        scores = score_ids(reward_model, rm_tok(texts)["input_ids"], rm_tok.pad_token_id)
    return {
        "heldout_accuracy": pairwise_accuracy(reward_model, rm_tok, heldout_pairs),
        "heldout_accuracy_sft_vs_sft": pairwise_accuracy(reward_model, rm_tok, near) if near else None,
        "train_accuracy": pairwise_accuracy(reward_model, rm_tok, train_pairs),
        "train_pairs": len(train_pairs),
        "heldout_pairs": len(heldout_pairs),
        "sft_samples": {
            "score_mean": scores.mean().item(),
            "score_std": scores.std().item(),
            "gold_mean": sum(golds) / len(golds),
            "score_gold_correlation": _pearson(scores, torch.tensor(golds)),
        },
    }


def build_task(name: str, params: TaskParams, out_dir: Path) -> dict[str, Any]:
    """Build the task into ``out_dir`` (which must exist) and return the build info written there."""
    started = time.perf_counter()
    graph = task_graph(params)
    train_prompts, eval_prompts = task_prompts(params, graph)
    gold = GoldScorer(graph)
    policy_tok = build_tokenizer(params.num_nodes, params.n_positions, padding_side="left")
    rm_tok = build_tokenizer(params.num_nodes, params.n_positions, padding_side="right")

    with torch_build_state(params.seed):
        policy, sft_losses = train_sft(graph, policy_tok, params, _stream(params, "sft"))
        sft_seconds = time.perf_counter() - started
        logger.info("task %s: the SFT policy done in %.0f s; the reward model next", name, sft_seconds)

        pair_rng = _stream(params, "pairs")
        train_pairs = sample_pairs(graph, params, params.rm_train_pairs, pair_rng)
        heldout_pairs = sample_pairs(graph, params, params.rm_heldout_pairs, pair_rng)
        rm_generator = torch.Generator().manual_seed(params.seed)
        reward_model, rm_losses = train_reward_model(policy, rm_tok, train_pairs, params, rm_generator)
        rm_seconds = time.perf_counter() - started - sft_seconds
        logger.info("task %s: the reward model done in %.0f s (%.0f s so far)", name, rm_seconds,
                    time.perf_counter() - started)
        if params.policy_n_embd is not None:  # a policy of its own width, trained on the same walks
            torch.manual_seed(params.seed)
            policy, sft_losses = train_sft(graph, policy_tok, params, _stream(params, "sft"), params.policy_n_embd)

        sft_report = _sft_report(policy, policy_tok, gold, eval_prompts, params)
        samples = sample_responses(
            policy, policy_tok, train_prompts, 1.0, params.response_length, torch.Generator().manual_seed(params.seed)
        )
        on_policy = (train_prompts, samples, gold(train_prompts, samples))
        rm_report = _rm_report(reward_model, rm_tok, train_pairs, heldout_pairs, on_policy)

    policy.save_pretrained(out_dir / POLICY_DIR)
    policy_tok.save_pretrained(out_dir / POLICY_DIR)
    reward_model.save_pretrained(out_dir / REWARD_MODEL_DIR)
    rm_tok.save_pretrained(out_dir / REWARD_MODEL_DIR)
    with open(out_dir / "rm_pairs.jsonl", "w") as f:
        for split, pairs in (("train", train_pairs), ("heldout", heldout_pairs)):
            for pair in pairs:
                f.write(json.dumps({"split": split, **asdict(pair)}) + "\n")

    data_prompts, data_walks = sample_sft_batch(graph, params, _stream(params, "sft-data-report"))
    total_seconds = time.perf_counter() - started
    info: dict[str, Any] = {
        "name": name,
        "summary": {
            "sft_gold_eval_t1.0": sft_report["eval_prompts_t1.0"]["gold"],
            "sft_gold_eval_t0.7": sft_report["eval_prompts_t0.7"]["gold"],
            "rm_heldout_accuracy": rm_report["heldout_accuracy"],
            "build_seconds": total_seconds,
        },
        "cache_key": params.cache_key(),
        "build_version": BUILD_VERSION,
        "build_id": uuid.uuid4().hex,  # lets callers tell a rebuild from a cache hit
        "built_at": time.time(),
        "params": asdict(params),
        "response_length": params.response_length,
        "num_train_prompts": len(train_prompts),
        "num_eval_prompts": len(eval_prompts),
        "graph": _graph_info(graph),
        "text_format": {
            "prompt": data_prompts[0],
            "response": data_walks[0],
            "reward_text": format_for_reward(data_prompts[0], data_walks[0]),
        },
        "sft": {
            "final_loss": sum(sft_losses[-20:]) / len(sft_losses[-20:]),
            "data_gold": sum(gold(data_prompts, data_walks)) / len(data_walks),
            **sft_report,
        },
        "reward_model": {"final_loss": sum(rm_losses[-10:]) / len(rm_losses[-10:]), **rm_report},
        "seconds": {"sft": sft_seconds, "reward_model": rm_seconds, "total": total_seconds},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    # Written last: its presence marks a complete build.
    (out_dir / BUILD_INFO).write_text(json.dumps(info, indent=2))
    return info
