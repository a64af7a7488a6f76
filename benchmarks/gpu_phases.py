"""Where a short trial's time goes, phase by phase, with the CUDA fast paths off and on; figures against the hardware.

    python -m benchmarks.gpu_phases --device cuda                   # Pythia-160M and Qwen2-0.5B shapes, bf16
    python -m benchmarks.gpu_phases --quick --out /tmp/phases.json  # tiny shapes on the CPU: a smoke run

Each shape (randomly initialised, ``benchmarks.trl_comparison.sizes``) trains on the TRL comparison's fixture
(``benchmarks.trl_comparison.fixtures``: policy, reference, reward and value networks, prompts of exactly
``prompt_length`` tokens, no stop token) with
``WORKLOAD``: 64 episodes of 64 prompt + 128 response tokens, 4 PPO epochs, bf16 autocast on a GPU. Two variants:

- ``eager``: every switch off, today's path (HF ``generate``, float32 log-softmax, one micro-batch per forward);
- ``fast``: ``static_decode``, ``bf16_generation_copy``, ``fused_logits_head`` (all three CUDA only: on a CPU they
  fall back to the eager path) and ``update_forward_batch_size`` = the whole mini-batch.

The phases are timed by wrapping ppo_core's functions from outside, with CUDA events on a GPU (``perf_counter`` on a
CPU): decode (``generate``, ``static_generate``, or on a CPU ``sample_responses``), scoring (the policy's,
reference's and value network's forwards, and the reward model's), update (``ppo_update``). The first update
(compilation, allocator warm-up) is reported on its own; the figures are medians over the measured updates. Derived:

- decode tokens/s, and its fraction of the bandwidth bound: sum over steps of (the sampling weights' bytes + the KV
  cache's bytes read at that step) / the measured copy bandwidth;
- update MFU = 6 x trained parameters x trained tokens / update time / peak, against the datasheet's dense bf16 peak
  (``benchmarks.trl_comparison.flops``) and the measured matmul peak (``benchmarks.matmul_peak``);
- episodes/s (whole updates), the first update's extra seconds (compile time, cold, in this process) and the peak
  memory.

A decode sweep times HF ``generate`` and ``static_generate`` alone at batch 16, 64 and 256 on a bf16 copy of the
policy. ``trl_episodes_per_s`` is left null here: ``benchmarks.trl_comparison`` measures TRL's side.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

import ppo_core.rewards.models
import ppo_core.rollout.collect
import ppo_core.run.trainer
from benchmarks.common.json_safe import json_safe
from benchmarks.common.machine import machine_facts
from benchmarks.matmul_peak import measure as measure_matmul_peak
from benchmarks.trl_comparison.core_side import core_config
from benchmarks.trl_comparison.fixtures import build_fixture
from benchmarks.trl_comparison.flops import peak_flops
from benchmarks.trl_comparison.sizes import SIZES, ModelSize
from benchmarks.trl_comparison.workload import Workload
from ppo_core import PPOTrainer, TrainerCallback
from ppo_core.models.generation import generate, sampling_config
from ppo_core.rollout.static_decode import static_generate
from tools.provenance import command_line
from tools.quick_mode import RESULTS, add_quick_argument, results_path

WORKLOAD = replace(Workload(), prompt_length=64, num_prompts=256, response_length=128, per_device_train_batch_size=16,
                   gradient_accumulation_steps=4, num_ppo_epochs=4, local_rollout_forward_batch_size=64,
                   warmup_updates=1, measured_updates=3)
QUICK_WORKLOAD = replace(Workload(), prompt_length=8, num_prompts=16, response_length=8, per_device_train_batch_size=4,
                         gradient_accumulation_steps=2, num_ppo_epochs=2, local_rollout_forward_batch_size=8,
                         warmup_updates=1, measured_updates=1)
SHAPES = ("pythia-160m", "qwen2-0.5b")
QUICK_SHAPES = ("neox-tiny", "qwen2-tiny")
DECODE_BATCHES = (16, 64, 256)
QUICK_DECODE_BATCHES = (2, 4)
DECODE_BOUND_BATCH = 64
"""The decode goal is read at this batch (the sweep's middle)."""
PHASES = {
    "decode": ((ppo_core.rollout.collect, "generate"), (ppo_core.rollout.collect, "static_generate"),
               (ppo_core.rollout.collect, "sample_responses")),
    "scoring": ((ppo_core.rollout.collect, "scoring_logits"), (ppo_core.rollout.collect, "response_values"),
                (ppo_core.rewards.models.SequenceClassifierReward, "__call__")),
    "update": ((ppo_core.run.trainer, "ppo_update"),),
}
"""Each phase's functions, on the name their caller looks up (the update's own forwards are inside ``ppo_update``)."""


def variants(workload: Workload) -> dict[str, dict[str, Any]]:
    """The config switches of each variant."""
    return {"eager": {}, "fast": {"static_decode": True, "bf16_generation_copy": True, "fused_logits_head": True,
                                  "update_forward_batch_size": workload.batch_size // workload.num_mini_batches}}


class PhaseClock(TrainerCallback):
    """Seconds per phase per update: wrapped calls record CUDA events (or ``perf_counter`` stamps on a CPU), read at
    the end of each update; plus each update's wall time."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pending: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
        self.updates: list[dict[str, float]] = []
        self.mark = 0.0

    def stamp(self) -> Any:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def timed(self, phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = self.stamp()
            result = function(*args, **kwargs)
            self.pending[phase].append((start, self.stamp()))
            return result
        return wrapper

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000 if self.device.type == "cuda" else float(end - start)

    def on_train_begin(self, config: object, num_updates: int) -> None:
        self.mark = time.perf_counter()

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        row = {phase: sum(self.seconds(*pair) for pair in self.pending[phase]) for phase in PHASES}
        self.updates.append({**row, "wall": now - self.mark, "peak_gib": metrics.get("memory/peak_gib", 0.0)})
        self.pending.clear()
        self.mark = now
        return None


@contextmanager
def wrapped(clock: PhaseClock) -> Iterator[None]:
    """Every phase function wrapped by ``clock`` for the duration of the block, restored after."""
    originals = [(owner, name, getattr(owner, name)) for functions in PHASES.values() for owner, name in functions]
    try:
        for phase, functions in PHASES.items():
            for owner, name in functions:
                setattr(owner, name, clock.timed(phase, getattr(owner, name)))
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def copy_bandwidth(device: torch.device, megabytes: int, repeats: int = 5) -> float:
    """Bytes/s of ``Tensor.copy_`` between two buffers (each copy reads and writes them: 2 x size), the best of
    ``repeats``."""
    source = torch.empty(megabytes * 2**20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)
    best = 0.0
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        target.copy_(source)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = max(best, 2 * source.numel() / (time.perf_counter() - started))
    return best


def decode_bound_s(model: PreTrainedModel, rows: int, prompt: int, response: int, bandwidth: float) -> float:
    """sum_t (weight bytes + KV bytes read at step t) / bandwidth, the KV cache holding prompt + t tokens per row:
    2 (keys and values) x layers x key/value heads x head size x element size per token."""
    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    per_token = 2 * config.num_hidden_layers * kv_heads * (config.hidden_size // heads)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    itemsize = next(model.parameters()).element_size()
    kv = sum(per_token * itemsize * rows * (prompt + step) for step in range(response))
    return (response * weights + kv) / bandwidth


def trained_matmul_parameters(trainer: PPOTrainer) -> int:
    """The parameters the optimizers update (the policy's and the value network's), less the input embeddings that
    are only looked up (an embedding tied to the output projection is a matmul there, and counts)."""
    total = 0
    for model in trainer.optimisation.models:
        trained = {id(p): p.numel() for p in model.parameters() if p.requires_grad}
        inner = getattr(model, "trunk", model)  # the value network's trunk holds its embeddings
        embeddings = inner.get_input_embeddings() if hasattr(inner, "get_input_embeddings") else None
        outputs = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
        if embeddings is not None and (outputs is None or outputs.weight is not embeddings.weight):
            trained.pop(id(embeddings.weight), None)
        total += sum(trained.values())
    return total


def run_variant(fixture: Any, workload: Workload, device: torch.device, switches: dict[str, Any],
                bandwidth: float, peaks: dict[str, float | None]) -> dict[str, Any]:
    """Train ``workload`` once with ``switches``; the phases' medians and the derived figures."""
    config = replace(core_config(fixture, workload, device.type), bf16=device.type == "cuda", **switches)
    clock = PhaseClock(device)
    with wrapped(clock):
        trainer = PPOTrainer(config, callbacks=[clock])
        trainer.train()
    first, measured = clock.updates[0], clock.updates[workload.warmup_updates:]
    median = {key: statistics.median(u[key] for u in measured) for key in (*PHASES, "wall")}
    trained_tokens = workload.num_ppo_epochs * workload.batch_size * (workload.prompt_length + workload.response_length)
    update_flops = 6 * trained_matmul_parameters(trainer) * trained_tokens
    sampler = trainer.generation_copy.model if trainer.generation_copy is not None else trainer.setup.models.policy
    generated = workload.batch_size * workload.response_length
    bound = decode_bound_s(sampler, workload.batch_size, workload.prompt_length, workload.response_length, bandwidth)
    return {
        "switches": switches,
        "seconds": median,
        "first_update_s": first["wall"],
        "first_update_extra_s": first["wall"] - median["wall"],
        "episodes_per_s": workload.batch_size / median["wall"],
        "decode_tokens_per_s": generated / median["decode"],
        "decode_fraction_of_bound": bound / median["decode"],
        "update_flops": update_flops,
        "mfu_update": {name: (update_flops / median["update"] / peak if peak else None)
                       for name, peak in peaks.items()},
        "peak_gib": max(u["peak_gib"] for u in clock.updates),
    }


def decode_sweep(fixture: Any, workload: Workload, device: torch.device, batches: tuple[int, ...],
                 bandwidth: float) -> list[dict[str, Any]]:
    """HF ``generate`` and ``static_generate`` (compiled on a GPU) alone, on a bf16 copy of the policy."""
    trainer = PPOTrainer(core_config(fixture, workload, device.type))
    policy = trainer.setup.models.policy.to(torch.bfloat16) if device.type == "cuda" else trainer.setup.models.policy
    tokenizer = trainer.setup.models.tokenizer
    config = sampling_config(workload.response_length, workload.temperature, tokenizer, None)
    rows = []
    for batch in batches:
        prompts = torch.randint(3, policy.config.vocab_size, (batch, workload.prompt_length), device=device)
        mask = torch.ones_like(prompts)
        bound = decode_bound_s(policy, batch, workload.prompt_length, workload.response_length, bandwidth)
        runs: dict[str, Callable[[], Any]] = {
            "generate": functools.partial(generate, policy, prompts, mask, config, None, tokenizer.pad_token_id),
            "static": functools.partial(static_generate, policy, prompts, mask, workload.response_length,
                                        workload.temperature, None, tokenizer.pad_token_id,
                                        compiled=device.type == "cuda"),
        }
        for name, run in runs.items():
            times = []
            for _ in range(3):  # the first pays for compilation and allocation: the median of three
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                started = time.perf_counter()
                run()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - started)
            seconds = statistics.median(times)
            rows.append({"batch": batch, "path": name, "seconds": seconds, "first_s": times[0],
                         "tokens_per_s": batch * workload.response_length / seconds,
                         "fraction_of_bound": bound / seconds})
    return rows


def measure_shape(size: ModelSize, workload: Workload, device: torch.device, batches: tuple[int, ...],
                  bandwidth: float, peaks: dict[str, float | None], work_dir: Path) -> dict[str, Any]:
    fixture = build_fixture(work_dir / size.name, size, workload)
    runs = {name: run_variant(fixture, workload, device, switches, bandwidth, peaks)
            for name, switches in variants(workload).items()}
    sweep = decode_sweep(fixture, workload, device, batches, bandwidth)
    at_bound = [row for row in sweep if row["path"] == "static" and row["batch"] == min(
        batches, key=lambda b: abs(b - DECODE_BOUND_BATCH))]
    fast = runs["fast"]
    return {
        "note": size.note, "variants": runs, "decode_sweep": sweep,
        # The headline figures per shape, from the fast variant (and the sweep's static decode at batch 64).
        "mfu_update": fast["mfu_update"]["datasheet"] or fast["mfu_update"]["measured"],
        "decode_fraction_of_bound": at_bound[0]["fraction_of_bound"],
        "episodes_per_s": fast["episodes_per_s"], "trl_episodes_per_s": None, "peak_gib": fast["peak_gib"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_phases", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", nargs="+", choices=sorted(SIZES), default=None)
    parser.add_argument("--out", default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    out = results_path(args.out, RESULTS / "gpu_phases" / "gpu.json", args.quick)
    workload = QUICK_WORKLOAD if args.quick else WORKLOAD
    shapes = args.shapes or (QUICK_SHAPES if args.quick else SHAPES)
    batches = QUICK_DECODE_BATCHES if args.quick else DECODE_BATCHES
    facts = machine_facts(device.type)
    bandwidth = copy_bandwidth(device, 16 if args.quick else 1024)
    measured_peak = measure_matmul_peak(args.device, torch.get_num_threads(), quick=args.quick)["peak_flops"]
    precision = "bf16" if device.type == "cuda" else "fp32"
    datasheet = peak_flops(torch.cuda.get_device_name(device), precision) if device.type == "cuda" else None
    peaks = {"datasheet": datasheet, "measured": measured_peak.get(precision)}
    with tempfile.TemporaryDirectory(prefix="ppo-gpu-phases-") as work_dir:
        results = {name: measure_shape(SIZES[name], workload, device, batches, bandwidth, peaks, Path(work_dir))
                   for name in shapes}
    report = {"command": command_line("benchmarks.gpu_phases", argv),
              "machine": facts, "workload": workload.to_dict(), "precision": precision,
              "copy_bandwidth_bytes_per_s": bandwidth, "peak_flops": peaks, "shapes": results}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(report), indent=2) + "\n")
    for name, shape in results.items():
        fast, eager = shape["variants"]["fast"], shape["variants"]["eager"]
        print(f"{name}: episodes/s {eager['episodes_per_s']:.2f} eager, {fast['episodes_per_s']:.2f} fast; "
              f"decode {fast['decode_tokens_per_s']:.0f} tokens/s ({fast['decode_fraction_of_bound']:.1%} of the "
              f"bound); update MFU {shape['mfu_update'] or float('nan'):.1%}; peak {fast['peak_gib']:.2f} GiB")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
