"""Building a text (fortunes) task into a directory: tokenizer, SFT policy, proxy reward model, report.

The layout is the graph task's (``policy/``, ``reward_model/``, ``build_info.json`` written last), so the registry
caches, locks and loads both kinds alike. The build is a pure function of ``TextTaskParams`` and the installed
corpus: every random choice comes from a seeded ``random.Random`` stream or from torch's RNG, seeded inside a forked
RNG state.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import GPT2LMHeadModel, PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ppo_core.models.loading import load_causal_lm, load_tokenizer
from ppo_core.models.paths import resolve_model
from ppo_core.tasks.build import EVAL_TEMPERATURES, POLICY_DIR, REWARD_MODEL_DIR, torch_build_state
from ppo_core.tasks.cache_dirs import BUILD_INFO
from ppo_core.tasks.fortunes.pairs import ScoredResponse, TextPreferencePair, all_pairs
from ppo_core.tasks.fortunes.params import TEXT_BUILD_VERSION, TextTaskParams
from ppo_core.tasks.fortunes.policy_samples import PolicySample, policy_chunks
from ppo_core.tasks.fortunes.probe_proxy import probe_scores, train_probe
from ppo_core.tasks.fortunes.proxy import fresh_proxy_base, proxy_recipe
from ppo_core.tasks.fortunes.proxy_fidelity import fidelity
from ppo_core.tasks.fortunes.rm_pairs import fit_words, reference_pairs, sample_gold_pairs
from ppo_core.tasks.fortunes.sft import continuation_loss, encode_examples, train_text_sft
from ppo_core.tasks.fortunes.task_data import TextTaskData, text_task_data
from ppo_core.tasks.fortunes.tokenizer import build_word_tokenizer
from ppo_core.tasks.reward_model import response_scores, train_reward_model
from ppo_core.tasks.sampling import mean_gold, sample_responses_cached

logger = logging.getLogger(__name__)
STAGE_WORDS = {"data": "the corpus, its split and the tokenizers", "sft": "the companion policy's fine-tuning",
               "rm_pairs": "the proxy's preference pairs", "reward_model": "the proxy", "report": "the build's report",
               "save": "saving"}
"""What each stage a text task's build logs did, in words."""

REPORTED_SAMPLES = 5
"""Held-out prompts whose SFT samples (at temperature 1.0) the build info shows, with their gold."""

TRAIN_LOSS_TEXTS = 512
"""Training texts the SFT continuation loss is also measured on, to read the held-out loss against."""


def _stream(params: TextTaskParams, purpose: str) -> random.Random:
    """An independent, reproducible RNG per purpose, so changing one stage does not reshuffle another."""
    return random.Random(f"{params.seed}/{purpose}")


def _sft_report(policy: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerFast, data: TextTaskData,
                params: TextTaskParams) -> dict[str, Any]:
    """The policy's continuation loss on held-out and training texts, its mean gold on the held-out prompts per
    temperature, and a few of its samples."""
    heldout = encode_examples(tokenizer, data.split.heldout, params.n_positions)
    train = encode_examples(tokenizer, data.split.train[:TRAIN_LOSS_TEXTS], params.n_positions)
    prompts = data.split.heldout_prompts
    gold = {
        f"eval_prompts_t{t}": mean_gold(policy, tokenizer, data.gold, prompts, params.eval_samples_per_prompt, t,
                                        params.response_length, seed=params.seed, cached=True)
        for t in EVAL_TEMPERATURES
    }
    shown = prompts[:REPORTED_SAMPLES]
    responses = sample_responses_cached(policy, tokenizer, shown, 1.0, params.response_length,
                                 torch.Generator().manual_seed(params.seed))
    return {
        "heldout_loss": continuation_loss(policy, heldout, tokenizer.pad_token_id),
        "train_loss": continuation_loss(policy, train, tokenizer.pad_token_id),
        **gold,
        "samples_t1.0": [
            {"prompt": p, "response": r, "gold": g}
            for p, r, g in zip(shown, responses, data.gold(shown, responses), strict=True)
        ],
    }


def _gold_pairs(policy: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerFast, data: TextTaskData,
                params: TextTaskParams) -> tuple[list[TextPreferencePair], list[TextPreferencePair]]:
    """``(train_pairs, heldout_pairs)`` from the SFT policy's samples on training prompts, the two drawn from
    different prompts so the held-out accuracy measures pairs on prompts the reward model never saw."""
    prompts = data.split.train_prompts
    _stream(params, "rm-prompts").shuffle(prompts)
    generator = torch.Generator().manual_seed(params.seed)
    k = params.rm_responses_per_prompt
    train, used = sample_gold_pairs(policy, tokenizer, data.gold, prompts, params.rm_train_pairs, k,
                                    params.response_length, generator)
    heldout, _ = sample_gold_pairs(policy, tokenizer, data.gold, prompts[used:], params.rm_heldout_pairs, k,
                                   params.response_length, generator)
    return train, heldout


@contextlib.contextmanager
def _every_core() -> Iterator[None]:
    """Torch on every core for a while: sampling a pretrained policy is the one stage of a build that is heavy
    enough to gain from them (the other processes that want the task wait on its lock meanwhile)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or threads)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _scored(samples: list[PolicySample], data: TextTaskData) -> list[ScoredResponse]:
    prompts, responses = [s.prompt for s in samples], [s.response for s in samples]
    return [ScoredResponse(p, r, g) for p, r, g in zip(prompts, responses, data.gold(prompts, responses), strict=True)]


def _pair_policy_pairs(data: TextTaskData, params: TextTaskParams,
                       work_dir: Path) -> tuple[list[TextPreferencePair], list[TextPreferencePair],
                                                list[ScoredResponse]]:
    """``(train_pairs, heldout_pairs, heldout_responses)`` from ``pair_policy``'s samples: every gold-apart pair of
    ``rm_responses_per_prompt`` responses to each training prompt, until there are ``rm_train_pairs``, then
    ``rm_heldout_pairs`` from the prompts after; and ``eval_samples_per_prompt`` responses to each held-out prompt,
    scored, for the proxy's fidelity on prompts no stage trained on. Samples go to ``work_dir`` as they finish."""
    assert params.pair_policy is not None
    path = resolve_model(params.pair_policy, "task")
    model, tokenizer = load_causal_lm(path, field_name="task"), load_tokenizer(path, field_name="task")
    prompts = data.split.train_prompts
    _stream(params, "rm-prompts").shuffle(prompts)
    train: list[TextPreferencePair] = []
    heldout: list[TextPreferencePair] = []
    with _every_core():
        for chunk in policy_chunks(model, tokenizer, prompts, params.rm_responses_per_prompt, params.response_length,
                                   params.seed, work_dir / "train_samples.jsonl"):
            # Whole chunks to each side, so no prompt gives pairs to both.
            (train if len(train) < params.rm_train_pairs else heldout).extend(all_pairs(_scored(chunk, data)))
            if len(heldout) >= params.rm_heldout_pairs:
                break
        if not heldout:
            raise ValueError(f"the pair policy {params.pair_policy!r} gave {len(train)} pairs of responses apart in "
                             f"gold from all {len(prompts)} training prompts, and none to hold out: the proxy needs "
                             f"{params.rm_train_pairs} and {params.rm_heldout_pairs}")
        evaluation = [sample for chunk in policy_chunks(
            model, tokenizer, data.split.heldout_prompts, params.eval_samples_per_prompt, params.response_length,
            params.seed + 1, work_dir / "heldout_samples.jsonl") for sample in chunk]
    return train[: params.rm_train_pairs], heldout[: params.rm_heldout_pairs], _scored(evaluation, data)


def _reference_pairs(data: TextTaskData, tokenizer: PreTrainedTokenizerFast,
                     params: TextTaskParams) -> tuple[list[TextPreferencePair], list[TextPreferencePair]]:
    """``(train, heldout)`` pairs of human continuations (``rm_reference_pairs`` and a tenth as many), each cut to
    ``response_length`` of ``tokenizer``'s tokens, the held-out ones from texts the training ones never used; none
    when ``rm_reference_pairs`` is 0."""
    if params.rm_reference_pairs == 0:
        return [], []
    texts = list(data.split.train)
    _stream(params, "rm-references").shuffle(texts)
    heldout_count = max(1, params.rm_reference_pairs // 10)
    # The held-out pairs come from the last fifth of the texts, which the training pairs never reach.
    cut = len(texts) * 4 // 5
    rng = _stream(params, "rm-reference-pairs")

    def fit(text: str) -> str:
        return fit_words(text, lambda words: len(tokenizer(words)["input_ids"]), params.response_length)

    train = reference_pairs(texts[:cut], data.gold, params.rm_reference_pairs, fit, rng)
    heldout = reference_pairs(texts[cut:], data.gold, heldout_count, fit, rng)
    return train, heldout


Scorer = Callable[[Sequence[str], Sequence[str]], list[float]]
"""A proxy's scores of responses to prompts, as a run reads them."""


def _pair_accuracy(scorer: Scorer, pairs: Sequence[TextPreferencePair]) -> float:
    """The share of ``pairs`` whose chosen response the proxy scores strictly higher (NaN for none)."""
    prompts = [p.prompt for p in pairs]
    chosen, rejected = scorer(prompts, [p.chosen for p in pairs]), scorer(prompts, [p.rejected for p in pairs])
    return sum(c > r for c, r in zip(chosen, rejected, strict=True)) / len(pairs) if pairs else float("nan")


def _reference_report(scorer: Scorer, train: list[TextPreferencePair],
                      heldout: list[TextPreferencePair]) -> dict[str, Any]:
    """The proxy's pairwise accuracy on the human continuations' pairs; empty without them."""
    if not train:
        return {}
    return {"reference_heldout_accuracy": _pair_accuracy(scorer, heldout),
            "reference_train_accuracy": _pair_accuracy(scorer, train),
            "reference_train_pairs": len(train), "reference_heldout_pairs": len(heldout)}


def _rm_report(scorer: Scorer, train_pairs: list[TextPreferencePair], heldout_pairs: list[TextPreferencePair],
               final_loss: float) -> dict[str, Any]:
    """Pairwise accuracies (the chosen side scored strictly higher) and the size of the pair sets."""
    return {
        "heldout_accuracy": _pair_accuracy(scorer, heldout_pairs),
        "train_accuracy": _pair_accuracy(scorer, train_pairs),
        "train_pairs": len(train_pairs),
        "heldout_pairs": len(heldout_pairs),
        "mean_gold_gap": sum(p.chosen_gold - p.rejected_gold for p in train_pairs) / max(len(train_pairs), 1),
        "final_loss": final_loss,
    }


def _proxy(params: TextTaskParams, policy: GPT2LMHeadModel, rm_tok: PreTrainedTokenizerFast,
           pairs: list[TextPreferencePair]) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, Scorer,
                                                     dict[str, Any]]:
    """The proxy of the task's version trained on ``pairs``: the model, its tokenizer, its scorer and its fit (the
    final loss, and a probe's own figures)."""
    recipe = proxy_recipe(params.proxy_version)
    if recipe.probe_layers:
        assert params.pair_policy is not None  # checked as the build starts
        path = resolve_model(params.pair_policy, "task")
        pretrained, tokenizer = load_causal_lm(path, field_name="task"), load_tokenizer(path, field_name="task")
        tokenizer.padding_side = "right"
        with _every_core():
            probe, fit = train_probe(pretrained, tokenizer, recipe.probe_layers, pairs, recipe.probe_epochs,
                                     torch.Generator().manual_seed(params.seed))
        return probe, tokenizer, functools.partial(probe_scores, probe, tokenizer), {"probe": fit, **fit}
    base = policy if recipe.from_companion else fresh_proxy_base(recipe, params, rm_tok)
    reward_model, losses = train_reward_model(base, rm_tok, pairs, params, torch.Generator().manual_seed(params.seed))
    final_loss = sum(losses[-10:]) / max(len(losses[-10:]), 1)
    return reward_model, rm_tok, functools.partial(response_scores, reward_model, rm_tok), {"final_loss": final_loss}


def _save(out_dir: Path, policy: GPT2LMHeadModel, policy_tok: PreTrainedTokenizerFast,
          reward_model: PreTrainedModel, rm_tok: PreTrainedTokenizerBase,
          pairs: dict[str, list[TextPreferencePair]]) -> None:
    policy.save_pretrained(out_dir / POLICY_DIR)
    policy_tok.save_pretrained(out_dir / POLICY_DIR)
    reward_model.save_pretrained(out_dir / REWARD_MODEL_DIR)
    rm_tok.save_pretrained(out_dir / REWARD_MODEL_DIR)
    with open(out_dir / "rm_pairs.jsonl", "w") as f:
        for split, split_pairs in pairs.items():
            for pair in split_pairs:
                f.write(json.dumps({"split": split, **asdict(pair)}) + "\n")


def _say_done(name: str, stage: str, so_far: float, before: float) -> float:
    """Log that ``stage`` of task ``name``'s build is done, ``so_far`` seconds in, the stages before it having taken
    ``before``; the seconds it took."""
    took = so_far - before
    logger.info("task %s: %s done in %.0f s (%.0f s so far)", name, STAGE_WORDS.get(stage, stage), took, so_far)
    return took


def build_text_task(name: str, params: TextTaskParams, out_dir: Path, work_dir: Path | None = None) -> dict[str, Any]:
    """Build the task into ``out_dir`` (which must exist) and return the build info written there. A task with a
    ``pair_policy`` keeps that policy's samples in ``work_dir`` (made if missing; ``out_dir`` when None) as they are
    drawn, so that a build interrupted there resumes without drawing them again."""
    started, cpu_started = time.perf_counter(), time.process_time()
    seconds: dict[str, float] = {}
    if proxy_recipe(params.proxy_version).probe_layers and params.pair_policy is None:
        raise ValueError(f"proxy version {params.proxy_version} is a probe on a pretrained policy's layers, and the "
                         f"task {name!r} names no pair_policy")

    def lap(stage: str) -> None:
        seconds[stage] = _say_done(name, stage, time.perf_counter() - started, sum(seconds.values()))

    data = text_task_data(params)
    policy_tok = build_word_tokenizer(data.train_texts, params.vocab_size, params.n_positions, padding_side="left")
    rm_tok = build_word_tokenizer(data.train_texts, params.vocab_size, params.n_positions, padding_side="right")
    lap("data")
    with torch_build_state(params.seed):
        encoded = encode_examples(policy_tok, data.split.train, params.n_positions)
        policy, sft_losses = train_text_sft(policy_tok, encoded, params, _stream(params, "sft"))
        lap("sft")
        heldout_responses: list[ScoredResponse] = []
        if params.pair_policy is None:
            train_pairs, heldout_pairs = _gold_pairs(policy, policy_tok, data, params)
        else:
            samples_dir = work_dir or out_dir
            samples_dir.mkdir(parents=True, exist_ok=True)
            train_pairs, heldout_pairs, heldout_responses = _pair_policy_pairs(data, params, samples_dir)
        text_train, text_heldout = _reference_pairs(data, rm_tok, params)
        lap("rm_pairs")
        # The two kinds interleaved in a seeded order, so that every step of the proxy's training sees both.
        mixed = train_pairs + text_train
        _stream(params, "rm-mix").shuffle(mixed)
        reward_model, proxy_tok, scorer, fit = _proxy(params, policy, rm_tok, mixed)
        lap("reward_model")
        sft_report = _sft_report(policy, policy_tok, data, params)
        final_loss = fit.pop("final_loss")
        rm_report = {**_rm_report(scorer, train_pairs, heldout_pairs, final_loss),
                     **_reference_report(scorer, text_train, text_heldout),
                     "proxy_version": params.proxy_version, **{k: v for k, v in fit.items() if k == "probe"}}
        if heldout_responses:
            proxy = scorer([r.prompt for r in heldout_responses], [r.response for r in heldout_responses])
            rm_report["heldout_prompts_fidelity"] = fidelity(heldout_responses, proxy)
        lap("report")
    _save(out_dir, policy, policy_tok, reward_model, proxy_tok, {"train": train_pairs, "heldout": heldout_pairs,
                                                                 "reference_train": text_train,
                                                                 "reference_heldout": text_heldout})
    lap("save")
    seconds["total"] = sum(seconds.values())
    info: dict[str, Any] = {
        "name": name,
        "kind": "fortunes",
        "summary": {
            "sft_heldout_loss": sft_report["heldout_loss"],
            "sft_gold_eval_t1.0": sft_report["eval_prompts_t1.0"]["gold"],
            "sft_gold_eval_t0.7": sft_report["eval_prompts_t0.7"]["gold"],
            "rm_heldout_accuracy": rm_report["heldout_accuracy"],
            "rm_reference_heldout_accuracy": rm_report.get("reference_heldout_accuracy"),
            "rm_heldout_prompts_fidelity": rm_report.get("heldout_prompts_fidelity"),
            "build_seconds": seconds["total"],
        },
        "cache_key": params.cache_key(),
        "build_version": TEXT_BUILD_VERSION,
        "build_id": uuid.uuid4().hex,  # lets callers tell a rebuild from a cache hit
        "built_at": time.time(),
        "params": asdict(params),
        "response_length": params.response_length,
        "num_train_prompts": len(data.split.train_prompts),
        "num_eval_prompts": len(data.split.heldout_prompts),
        "num_train_texts": len(data.split.train),
        "sft": {"final_loss": sum(sft_losses[-20:]) / len(sft_losses[-20:]), **sft_report},
        "reward_model": rm_report,
        "seconds": seconds,
        # Torch runs on one thread here, so CPU time is the build's cost on one core, however loaded the machine.
        "cpu_seconds": time.process_time() - cpu_started,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    # Written last: its presence marks a complete build.
    (out_dir / BUILD_INFO).write_text(json.dumps(info, indent=2))
    return info
