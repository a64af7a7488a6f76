"""Whether the CPU sampling copy decodes through the fused decoder or through the model's own forward, measured on the
machine itself where the config leaves it open (``fused_decode: null``, the default).

The fused decoder (``ppo_core.rollout.fused_decode``) runs a Llama-family prompt pass and decode step in few
operations from joined weights; the model's own forward runs transformers' modules over packed layers. Which is the
faster depends on the CPU, the dtype, the rows and the model's width: on SmolLM2-135M at 8 rows and one thread, an AMD
EPYC (Zen 4) decoded 16% (float32) and 21% (bf16) faster fused (benchmarks/results/real_model_phases), and no flag
says how another CPU fares. So a short check decodes the same prompts both ways, interleaved, best of several
(:func:`decode_seconds`), and the fused decoder is chosen where it is clearly the faster (:func:`choose_fused`). The
answer is cached per CPU, torch, threads, dtype, rows and the model's shapes (``$PPO_TUNE_CACHE/decode_choice``), so a
study's trials measure once. A model the fused decoder cannot run is never checked; one too small for the check to
mean anything (``sampling_precision.MIN_CHECKED_WEIGHTS``) decodes fused unchecked, as it always has.

The check draws nothing from torch's global random state (its prompts come from a generator of its own, its tokens
are teacher-forced), so a run samples the same tokens whether the answer came from the cache or from the check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from peft import PeftModel
from transformers import PreTrainedModel

from ppo_core.models.sampling_precision import (
    cached_check,
    check_key,
    interleaved_best,
    too_small_to_check,
    weight_shapes,
)
from ppo_core.rollout.fused_decode import decodable
from ppo_core.rollout.sampling_loop import loop_logits

FUSED_SPEEDUP = 1.1
"""The fused decoder must decode this many times faster to be chosen: its logits equal the model's only up to float
rounding, so a tie goes to the model's own forward. Near the margin a loaded machine's noise can tip the choice
(SmolLM2 in float32 measured 1.09x on a loaded AMD EPYC of family 26), which is why it is made once per machine and
cached: every trial of a study there decodes alike."""
PROMPT_TOKENS, NEW_TOKENS, REPEATS = 32, 8, 3
"""The check's workload: prompts of 32 tokens and 8 decode steps, the best of 3 passes each way after a warm-up."""


def choose_fused(seconds: Mapping[str, float], speedup: float = FUSED_SPEEDUP) -> bool:
    """True (the fused decoder) when t_fused * speedup <= t_forward, from the check's best times.

    >>> choose_fused({"fused": 0.08, "forward": 0.10}), choose_fused({"fused": 0.095, "forward": 0.10})
    (True, False)
    """
    return seconds["fused"] * speedup <= seconds["forward"]


def decode_seconds(models: Mapping[str, PreTrainedModel], rows: int, prompt_tokens: int = PROMPT_TOKENS,
                   new_tokens: int = NEW_TOKENS, repeats: int = REPEATS) -> dict[str, float]:
    """The best time, per named model, of one prompt pass and ``new_tokens - 1`` decode steps over ``rows`` prompts
    of ``prompt_tokens`` random tokens (``ppo_core.rollout.sampling_loop.loop_logits``, which decodes through a
    model's fused decoder where it has one); the models' passes interleave, so a busy moment slows each."""
    first = next(iter(models.values()))
    generator = torch.Generator().manual_seed(0)
    vocab = first.config.vocab_size
    queries = torch.randint(0, vocab, (rows, prompt_tokens), generator=generator)
    responses = torch.randint(0, vocab, (rows, new_tokens), generator=generator)
    mask = torch.ones_like(queries)
    return interleaved_best({name: functools.partial(loop_logits, model, queries, mask, responses)
                             for name, model in models.items()}, repeats)


@dataclass(frozen=True)
class DecodeChoice:
    """Whether the sampling copy decodes fused, and why: the check's best seconds each way (empty when unchecked)."""

    fused: bool
    seconds: dict[str, float]


def measured_fused_decode(policy: PreTrainedModel, dtype: torch.dtype, rows: int,
                          build: Callable[[bool], PreTrainedModel], cache_dir: Path | None = None) -> DecodeChoice:
    """The check's choice for sampling ``rows`` rows at a time from ``policy`` in ``dtype``, from the cache when this
    machine has made it before. ``build(fused)`` makes the sampling copy's model either way, for the check alone.
    Unchecked: False where the fused decoder cannot run the model, True below :data:`MIN_CHECKED_WEIGHTS`."""
    body = policy.get_base_model() if isinstance(policy, PeftModel) else policy
    if not decodable(body):
        return DecodeChoice(False, {})
    shapes = weight_shapes(policy)
    if too_small_to_check(shapes):
        return DecodeChoice(True, {})

    def measure() -> dict[str, object]:
        seconds = decode_seconds({"fused": build(True), "forward": build(False)}, rows)
        return asdict(DecodeChoice(choose_fused(seconds), seconds))
    key = {**check_key(shapes, rows), "dtype": str(dtype), "model_type": body.config.model_type,
           "workload": [PROMPT_TOKENS, NEW_TOKENS]}
    result = cached_check("decode_choice", key, ("fused", "seconds"), measure, cache_dir)
    return DecodeChoice(bool(result["fused"]), result["seconds"])


__all__ = ["FUSED_SPEEDUP", "DecodeChoice", "choose_fused", "decode_seconds", "measured_fused_decode"]
