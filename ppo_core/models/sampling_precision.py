"""Which dtype a CPU samples fastest in, measured on the machine itself: float32 or bfloat16 (``sampling_dtype: auto``).

CPUs differ by 100x here. Where bf16 has matrix units (Intel AMX) or AVX-512 BF16 instructions (AMD Zen 4 and
later), bf16 products run 2x or more faster than float32's and read half the bytes; where it has neither (AVX2
alone), torch emulates bf16 and its products ran 50x slower. No flag says which, so a short check times what
decoding does: one product of the rollout's rows with each weight of the model (packed, as the sampling copy packs
them), in each dtype, interleaved, best of several; the ratio picks the dtype (:func:`choose_sampling_dtype`). The
result is cached per CPU model, torch version, thread count and shapes (under
``$PPO_TUNE_CACHE/sampling_precision``), so a study's trials measure once.

Example::

    choice = measured_sampling_dtype(policy, rows=8)
    choice.dtype, choice.seconds  # ("bfloat16", {"float32": 0.061, "bfloat16": 0.024}) on an AMD EPYC (Zen 5)
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ppo_core.models.cache_root import default_cache_dir
from ppo_core.models.packed_linear import pack_weight, packed_product

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
BF16_SPEEDUP = 1.25
"""bfloat16 must be this many times faster to be chosen: it rounds the sampling distribution, so a tie goes to
float32, and the check's noise on a loaded machine stays well inside the margin."""
MAX_CHECKED_WEIGHTS = 64_000_000
"""Weights timed at most, about 256 MB in float32: enough to stream from memory as decoding does, not a second copy of
a large model."""
MIN_CHECKED_WEIGHTS = 1_000_000
"""Models with fewer matrix weights sample in float32 without a check: each product then takes microseconds, so
timing them measures dispatch overhead and the moment's load (test models' bf16 products timed 0.85-1.19x faster on
an AMD EPYC (Zen 4), close enough to the 1.25x margin for load to tip them), and the whole model sits in cache, so
decoding is not bound by the bytes bf16 halves."""
REPEATS = 5


def choose_sampling_dtype(seconds: Mapping[str, float], speedup: float = BF16_SPEEDUP) -> str:
    """"bfloat16" when t_bf16 <= t_fp32 / speedup, else "float32", from the check's best times per dtype.

    >>> choose_sampling_dtype({"float32": 0.06, "bfloat16": 0.025}), choose_sampling_dtype({"float32": 0.06,
    ...     "bfloat16": 0.055})
    ('bfloat16', 'float32')
    """
    return "bfloat16" if seconds["bfloat16"] * speedup <= seconds["float32"] else "float32"


def weight_shapes(model: nn.Module, limit: int = MAX_CHECKED_WEIGHTS) -> list[tuple[int, int]]:
    """The (out, in) shapes of the model's matrix products: its output projection, then its linear layers in forward
    order (GPT-2's Conv1D as (out, in); LoRA's own small factors left out, as a merged copy has none), up to
    ``limit`` weights in all."""
    head = getattr(model, "get_output_embeddings", lambda: None)()
    shapes = [(head.weight.shape[0], head.weight.shape[1])] if isinstance(head, nn.Linear) else []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if module is head or not isinstance(weight, torch.Tensor) or weight.dim() != 2 or \
                any(part.startswith("lora_") for part in name.split(".")):
            continue
        if isinstance(module, nn.Linear):
            shapes.append((weight.shape[0], weight.shape[1]))
        elif type(module).__name__ == "Conv1D":  # transformers' GPT-2 layer stores its weight as (in, out)
            shapes.append((weight.shape[1], weight.shape[0]))
    kept: list[tuple[int, int]] = []
    total = 0
    for out_features, in_features in shapes:
        if total + out_features * in_features > limit and kept:
            break
        kept.append((out_features, in_features))
        total += out_features * in_features
    return kept


def products(shapes: list[tuple[int, int]], rows: int, dtype: torch.dtype,
             generator: torch.Generator) -> list[Callable[[], torch.Tensor]]:
    """One product x W^T per shape, with x of ``rows`` rows, as the sampling copy computes it: from W packed where
    oneDNN packs ``dtype`` (``ppo_core.models.packed_linear``), else ``nn.functional.linear``."""
    runs: list[Callable[[], torch.Tensor]] = []
    for out_features, in_features in shapes:
        weight = torch.randn((out_features, in_features), generator=generator).to(dtype)
        inputs = torch.randn((rows, in_features), generator=generator).to(dtype)
        packed = pack_weight(weight, rows)
        runs.append(functools.partial(packed_product, inputs, packed, None) if packed is not None
                    else functools.partial(nn.functional.linear, inputs, weight))
    return runs


def product_seconds(shapes: list[tuple[int, int]], rows: int, repeats: int = REPEATS) -> dict[str, float]:
    """The best time, per dtype, of one pass of :func:`products` over ``shapes``; the dtypes' passes interleave, so
    a busy moment of a shared machine slows both."""
    generator = torch.Generator().manual_seed(0)
    runs = {name: products(shapes, rows, dtype, generator) for name, dtype in DTYPES.items()}
    return interleaved_best({name: functools.partial(_run_all, runs[name]) for name in DTYPES}, repeats)


def _run_all(runs: list[Callable[[], torch.Tensor]]) -> None:
    for run in runs:
        run()


def interleaved_best(passes: Mapping[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """The best wall time of each named pass over ``repeats`` rounds, after one round that warms the kernels up; the
    passes take turns within a round, so a busy moment of a shared machine slows each alike."""
    best = dict.fromkeys(passes, float("inf"))
    for _ in range(repeats + 1):
        for name, one_pass in passes.items():
            started = time.perf_counter()
            one_pass()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


@dataclass(frozen=True)
class SamplingPrecision:
    """The dtype a run samples in, and why: the check's best seconds per dtype (empty when the config chose)."""

    dtype: str
    seconds: dict[str, float]

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it on Linux."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def check_key(shapes: list[tuple[int, int]], rows: int) -> dict[str, object]:
    """What the check's result depends on: the CPU, its instruction set as torch sees it, torch, threads, shapes."""
    return {"cpu": cpu_model(), "capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "rows": rows, "shapes": [list(shape) for shape in shapes],
            "products": "oneDNN-packed where available"}


def too_small_to_check(shapes: list[tuple[int, int]]) -> bool:
    """Whether a model of these matrix shapes has fewer than :data:`MIN_CHECKED_WEIGHTS` weights: too small for a
    machine check's timing to mean anything."""
    return sum(out_features * in_features for out_features, in_features in shapes) < MIN_CHECKED_WEIGHTS


def cached_check(kind: str, key: Mapping[str, object], fields: tuple[str, ...],
                 measure: Callable[[], dict[str, Any]], cache_dir: Path | None = None) -> dict[str, Any]:
    """A machine check's result: read from ``$PPO_TUNE_CACHE/<kind>/<digest of key>.json`` where this machine made the
    same check before (a file holding each of ``fields``), else ``measure()``, written there whole, with its key, so
    that a study's trials measure once."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = (cache_dir or default_cache_dir()) / kind / f"{digest}.json"
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = None
    if isinstance(cached, dict) and all(name in cached for name in fields):
        return cached
    result = measure()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")  # processes that check at once each write whole files
    partial.write_text(json.dumps({**result, "key": key}, indent=1) + "\n")
    partial.replace(path)
    return result


def measured_sampling_dtype(model: nn.Module, rows: int, cache_dir: Path | None = None) -> SamplingPrecision:
    """The check's choice for sampling ``rows`` rows at a time from ``model``'s shapes, from the cache when this
    machine has made it before; float32 unchecked below :data:`MIN_CHECKED_WEIGHTS`."""
    shapes = weight_shapes(model)
    if too_small_to_check(shapes):
        return SamplingPrecision("float32", {})

    def measure() -> dict[str, Any]:
        seconds = product_seconds(shapes, rows)
        return asdict(SamplingPrecision(choose_sampling_dtype(seconds), seconds))
    result = cached_check("sampling_precision", check_key(shapes, rows), ("dtype", "seconds"), measure, cache_dir)
    return SamplingPrecision(result["dtype"], result["seconds"])


__all__ = ["MIN_CHECKED_WEIGHTS", "SamplingPrecision", "cached_check", "check_key", "choose_sampling_dtype",
           "interleaved_best", "measured_sampling_dtype", "product_seconds", "too_small_to_check", "weight_shapes"]
