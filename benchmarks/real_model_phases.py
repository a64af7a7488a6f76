"""Where a real model's PPO update goes on this CPU: generation per token, a no-grad forward, and forward + backward
(full weights and LoRA), in fp32 and bf16, each read against the machine's matmul peak at the same threads.

    python -m benchmarks.real_model_phases [--model smollm2-135m-instruct] [--batch 8] [--prompt-tokens 38]
                                           [--new-tokens 16] [--threads 1] [--precisions fp32 bf16]
                                           [--repeats 3] [--out FILE] [--quick]

The model loads through ppo_core's own path (``ppo_core.models.paths.resolve_model``, then
``ppo_core.models.loading.load_causal_lm``), as a trial loads its policy: a GGUF, the packaged SmolLM2 included, comes
from its dequantised copy in the cache. Each phase runs on a batch of ``--batch`` sequences of ``--prompt-tokens``
prompt tokens (random ids: the cost of a dense transformer does not depend on which tokens it reads) and is timed
``--repeats`` times after one warm-up; the best time counts.

- **generate**: ``model.generate`` with the KV cache, ``--new-tokens`` new tokens sampled at temperature 1, no early
  stop; reported per new token, and per token against one no-grad forward of the whole batch.
- **sample**: the same through ppo_core's own CPU decode loop (``ppo_core.rollout.sampling_loop.sample_responses``),
  what a rollout runs. Its decode step, (t(N new tokens) - t(1)) / (N - 1), is read against its memory bound: the bytes
  a step reads (every matmul weight once, the LM head's included) over the one-thread read bandwidth measured in the
  same process (the best ``sum`` of a 256 MB tensor).
- **sample_packed**: the same loop from the copy a rollout samples from on a CPU
  (``ppo_core.rollout.sampling_copy.SamplingCopy``: the weights in the phase's precision, each linear layer packed
  for oneDNN at the batch's rows), against the same bound.
- **sample_fused**: the same copy sampling through its fused decoder (``ppo_core.rollout.fused_decode``, the
  rollout's default for Llama-family models; ``sample_packed`` is the same copy with ``fused_decode`` off), against the
  same bound, and the step's weight products alone (``products_seconds``), timed in the step's order: the part of the
  step only faster products could shorten. For both copies, their numerics: KL(float32 || copy) per token
  (``token_kl_mean``, ``token_kl_max``) over responses a float32 copy of the same weights samples, each read
  through the sampling loop's prefill and steps.
- **forward**: one no-grad forward over prompt + response, as the reference and old log-probabilities take it.
- **forward + backward**: the policy loss's pass over prompt + response, with every weight trained (``full``) and
  with LoRA adapters (r 16 on the attention and MLP projections; the base frozen).

The forward passes are the trainer's own (``ppo_core.rollout.collect.response_logits``): they keep the logits of the
response's positions only, gathered into one contiguous block before the vocabulary projection. FLOPs
count 2 per matmul weight per token forward (the LM head's, tied or not, at the kept positions only), 6 forward +
backward with every weight trained, and 4 under LoRA (the frozen weights' gradients are never formed, their inputs'
are); attention scores are left out. The peak is ``benchmarks.matmul_peak``'s best ``torch.mm`` at the same threads
and precision, measured in the same process. ``--quick``: a tiny Llama written by ``tools.tiny_models``, 1 repeat,
results in ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from benchmarks.common.machine import machine_facts
from benchmarks.matmul_peak import best_flops_per_s
from tools.provenance import commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

if TYPE_CHECKING:
    from ppo_core.rollout.fused_decode import FusedDecoder

OUT = RESULTS / "real_model_phases" / "real_model_phases.json"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PEAK_SIZE = 1024
BANDWIDTH_BYTES = 256 << 20


def matmul_weights(model: torch.nn.Module) -> tuple[int, int]:
    """(body, head): the weights a token's forward multiplies by in the transformer's Linears, and in the LM head
    (tied or not), which runs only at the positions whose logits are kept."""
    head = model.get_output_embeddings().weight.numel()  # type: ignore[operator]
    every = sum(module.weight.numel() for module in model.modules() if isinstance(module, torch.nn.Linear))
    return every - head, head


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    """The best of ``repeats`` timings of ``run``, after one untimed warm-up call."""
    run()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def phase(seconds: float, flops: float, peak: float) -> dict[str, float]:
    return {"seconds": seconds, "gflops": flops / seconds / 1e9, "share_of_peak": flops / seconds / peak}


def measure_precision(path: str, precision: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every phase of one precision: fp32 weights, or bf16 weights and compute."""
    from peft import LoraConfig, get_peft_model

    from ppo_core.models.loading import LoadOptions, load_causal_lm
    from ppo_core.rollout.collect import response_logits

    dtype = DTYPES[precision]
    model = load_causal_lm(path, LoadOptions(dtype={"fp32": "float32", "bf16": "bfloat16"}[precision]))
    body, head = matmul_weights(model)
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, vocab, (args.batch, args.prompt_tokens), generator=generator)
    sequences = torch.randint(0, vocab, (args.batch, args.prompt_tokens + args.new_tokens), generator=generator)
    tokens = sequences.numel()
    # As ppo_core.rollout.collect.response_logits: only the positions that predict the response.
    kept = args.new_tokens + 1
    pass_weights = body * tokens + head * args.batch * kept  # weight-token products of one forward
    def measured_peak() -> float:
        return best_flops_per_s(PEAK_SIZE if not args.quick else 128, dtype, torch.device("cpu"), args.repeats)

    # The peak is taken before and after the phases, and the higher counts: on a shared machine one reading can
    # catch a busy moment, and a share of the peak is only honest against what the core can really do.
    peak = measured_peak()

    def generate() -> None:
        with torch.no_grad():
            model.generate(  # type: ignore[operator]  # nn.Module.__getattr__ hides the mixin's method
                prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                pad_token_id=model.config.eos_token_id)

    queries, responses = sequences[:, :args.prompt_tokens], sequences[:, args.prompt_tokens:]

    def logits(scored: torch.nn.Module) -> torch.Tensor:
        # The trainer's own scoring forward, so that what is timed is what a run does.
        return response_logits(scored, queries, torch.ones_like(queries),  # type: ignore[arg-type]
                               responses, torch.ones_like(responses)).float()

    def forward() -> None:
        with torch.no_grad():
            logits(model).log_softmax(-1)

    def forward_backward(trained: torch.nn.Module) -> Callable[[], None]:
        def run() -> None:
            logits(trained).log_softmax(-1).mean().backward()
            trained.zero_grad(set_to_none=True)
        return run

    generated = best_seconds(generate, args.repeats)
    decode = decode_step(model, prompts, args)
    packed, fused = sampling_copies(model, dtype, prompts, args)
    forward_s = best_seconds(forward, args.repeats)
    model.train()
    full_s = best_seconds(forward_backward(model), args.repeats)
    targets = [name for name in LORA_TARGETS if any(n.endswith(name) for n, _ in model.named_modules())]
    lora = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets, lora_dropout=0.0))
    lora_s = best_seconds(forward_backward(lora), args.repeats)
    peak = max(peak, measured_peak())
    # Generation: a prefill of the prompt (the head at its last position), then one token per step (the last new
    # token is never fed back).
    fed = args.batch * (args.prompt_tokens + args.new_tokens - 1)
    generation_flops = 2 * (body * fed + head * args.batch * args.new_tokens)
    return {
        "matmul_weights": {"body": body, "head": head}, "tokens_per_pass": tokens, "peak_gflops": peak / 1e9,
        "generate": {**phase(generated, generation_flops, peak),
                     "seconds_per_new_token": generated / args.new_tokens,
                     "new_token_vs_forward": generated / args.new_tokens / forward_s},
        "sample": decode,
        "sample_packed": packed,
        "sample_fused": fused,
        "forward": phase(forward_s, 2 * pass_weights, peak),
        "forward_backward_full": phase(full_s, 6 * pass_weights, peak),
        "forward_backward_lora": phase(lora_s, 4 * pass_weights, peak),
    }


def sampling_copies(model: torch.nn.Module, dtype: torch.dtype, prompts: torch.Tensor,
                    args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float]]:
    """The sampling copy of ``model`` in ``dtype`` without and with its fused decoder: each one's decode step against
    its bound (:func:`decode_step`) and its numerics against float32 compute on the same weights (:func:`token_kl`)."""
    from ppo_core.rollout.sampling_copy import SamplingCopy

    reference = SamplingCopy(model, torch.float32, args.batch, fused=False).model  # type: ignore[arg-type]
    measured = []
    for fused in (False, True):
        copy = SamplingCopy(model, dtype, args.batch, fused=fused).model  # type: ignore[arg-type]
        measured.append({**decode_step(copy, prompts, args, weights_of=model),
                         **token_kl(copy, reference, prompts, args.new_tokens)})
    return measured[0], measured[1]


def read_bandwidth(size_bytes: int, repeats: int) -> float:
    """Bytes per second one thread reads: the best ``sum`` of a float32 tensor of ``size_bytes``."""
    data = torch.ones(size_bytes // 4)
    return size_bytes / best_seconds(lambda: data.sum(), repeats)


def decode_step(model: torch.nn.Module, prompts: torch.Tensor, args: argparse.Namespace,
                weights_of: torch.nn.Module | None = None) -> dict[str, float]:
    """ppo_core's decode loop on ``prompts``: the whole sampling's seconds, one decode step's, and that step against
    the bytes it reads over the measured bandwidth (the bytes of ``weights_of``'s matmul weights, ``model``'s by
    default: a packed copy holds the same weights in a layout the count does not read)."""
    from ppo_core.rollout.fused_decode import decoder_of
    from ppo_core.rollout.sampling_loop import sample_responses

    def sample(new_tokens: int) -> Callable[[], None]:
        def run() -> None:
            sample_responses(model, prompts, torch.ones_like(prompts), new_tokens, 1.0, None, 0)  # type: ignore[arg-type]
        return run
    first = best_seconds(sample(1), args.repeats)
    whole = best_seconds(sample(args.new_tokens), args.repeats)
    step = (whole - first) / max(args.new_tokens - 1, 1)
    counted = weights_of if weights_of is not None else model
    body, head = matmul_weights(counted)
    step_bytes = (body + head) * next(counted.parameters()).element_size()
    bandwidth = read_bandwidth(BANDWIDTH_BYTES if not args.quick else 8 << 20, args.repeats)
    bound = step_bytes / bandwidth
    result = {"seconds": whole, "step_seconds": step, "step_bytes": step_bytes, "read_bytes_per_s": bandwidth,
              "step_bound_seconds": bound, "step_over_bound": step / bound}
    decoder = decoder_of(model)  # type: ignore[arg-type]
    if decoder is not None:
        products = products_seconds(decoder, prompts.shape[0], args.repeats)
        result.update(products_seconds=products, products_over_bound=products / bound)
    return result


@torch.no_grad()
def token_kl(model: torch.nn.Module, reference: torch.nn.Module, prompts: torch.Tensor,
             new_tokens: int) -> dict[str, float]:
    """How far ``model``'s sampling distribution lies from ``reference``'s (the same weights in float32 compute):
    KL(p_ref || p_model) at each of ``new_tokens`` positions of responses the reference samples, both read through the
    sampling loop's own prefill and steps (``prompts_then_steps``), teacher-forced; its mean and largest value."""
    from ppo_core.rollout.sampling_loop import loop_logits, sample_responses

    mask = torch.ones_like(prompts)
    generator_state = torch.get_rng_state()
    torch.manual_seed(0)
    responses, _ = sample_responses(reference, prompts, mask, new_tokens, 1.0, None, 0)  # type: ignore[arg-type]
    torch.set_rng_state(generator_state)

    def read(scored: torch.nn.Module) -> torch.Tensor:
        return loop_logits(scored, prompts, mask, responses).float().log_softmax(-1)  # type: ignore[arg-type]

    theirs, ours = read(reference), read(model)
    kl = (theirs.exp() * (theirs - ours)).sum(-1)
    return {"token_kl_mean": float(kl.mean()), "token_kl_max": float(kl.max())}


def products_seconds(decoder: FusedDecoder, rows: int, repeats: int) -> float:
    """One decode step's weight products alone, in the step's order (each layer's four, then the head), on ``rows``
    rows: the part of a step no change outside the products can make faster."""
    products = decoder.products()
    inputs = [torch.randn(rows, product.in_features).to(product.dtype) for product in products]
    return best_seconds(lambda: [product(x) for product, x in zip(products, inputs, strict=True)], repeats)


def quick_model(directory: Path) -> str:
    from tools.tiny_models import write_llama

    return str(write_llama(directory / "llama"))


def markdown(result: dict[str, Any]) -> str:
    lines = ["| precision | phase | seconds | GFLOP/s | share of matmul peak |", "|---|---|---|---|---|"]
    for precision, figures in result["precisions"].items():
        for key, what in (("sample", "sample (ppo_core's loop)"), ("sample_packed", "sample (the packed copy)"),
                          ("sample_fused", "sample (the copy's fused decoder)")):
            sample = figures[key]
            products = "" if "products_seconds" not in sample else \
                f"; its products alone {1000 * sample['products_seconds']:.1f} ms, {sample['products_over_bound']:.1f}x"
            if "token_kl_mean" in sample:
                products += (f"; token KL to float32 compute {sample['token_kl_mean']:.1e} mean, "
                             f"{sample['token_kl_max']:.1e} max")
            lines.append(f"| {precision} | {what} | {sample['seconds']:.3f} | "
                         f"decode step {1000 * sample['step_seconds']:.1f} ms | {sample['step_over_bound']:.1f}x its "
                         f"bound of {1000 * sample['step_bound_seconds']:.1f} ms ({sample['step_bytes'] / 1e6:.0f} "
                         f"MB at {sample['read_bytes_per_s'] / 1e9:.1f} GB/s){products} |")
        for name in ("generate", "forward", "forward_backward_full", "forward_backward_lora"):
            entry = figures[name]
            lines.append(f"| {precision} | {name} | {entry['seconds']:.3f} | {entry['gflops']:.1f} | "
                         f"{entry['share_of_peak']:.0%} |")
        lines.append(f"| {precision} | matmul peak | | {figures['peak_gflops']:.1f} | 100% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_model_phases",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=38)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precisions", nargs="+", choices=sorted(DTYPES), default=["fp32", "bf16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    from ppo_core.config.checks import ConfigError
    from ppo_core.models.paths import resolve_model

    torch.set_num_threads(args.threads)
    if args.quick:
        args.repeats, args.batch, args.prompt_tokens, args.new_tokens = 1, 2, 6, 3
        args.model = quick_model(Path(tempfile.mkdtemp(prefix="ppo-bench-phases-")))
    try:
        path = resolve_model(args.model, "--model")
    except ConfigError as error:
        parser.exit(2, f"{error}\n")
    started = time.perf_counter()
    result = {
        "model": args.model, "batch": args.batch, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
        "threads": torch.get_num_threads(), "repeats": args.repeats, "quick": args.quick,
        "precisions": {precision: measure_precision(path, precision, args) for precision in args.precisions},
        "machine": machine_facts("cpu"), "load_average": os.getloadavg(), "code": commit_at_start(),
    }
    result["seconds"] = time.perf_counter() - started
    out = results_path(args.out, OUT, args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
