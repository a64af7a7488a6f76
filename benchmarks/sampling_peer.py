"""ppo_core's CPU sampling against TRL GRPOTrainer's own generation: the same policy, prompts, batch and machine, in
one run, the sides interleaved.

    python -m benchmarks.sampling_peer [--study benchmarks/studies/smollm2.yaml] [--batches 8 64] [--repeats 5]
                                       [--threads 1] [--prompts chat|plain] [--cb-num-blocks N] [--out FILE] [--quick]

The settings are the study's ``base`` at SmolLM2's point of its search space (``benchmarks.trial_speed.POINT``):
SmolLM2-135M-Instruct through ppo_core's loading, LoRA r 16 on peft's default modules, 16 new tokens at temperature
1.0, one torch thread. The adapter's lora_B is set to small seeded random values, so that sampling with it differs
from sampling the base. The prompts are the text task's held-out ones, rendered by the chat template (``--prompts
plain``: as the task's trials feed them, without it); batch 8 is the first 8, batch 64 the held-out evaluation's
rows (32 prompts, 2 samples each). Every side reads the same token ids.

The sides, each timed once per round, rounds interleaved, best of ``--repeats`` after a warm-up round:

- **trl_generate**, **trl_generate_bf16**: ``GRPOTrainer._generate_single_turn``, TRL's regular path
  (``generate`` on the PEFT model, its LoRA unmerged), with the trainer a ``trainer: trl-grpo`` trial of the same
  config builds (``tuner.trl_trial``: its GRPOConfig, its peft config, TRL loading the model), the adapter copied in,
  the model prepared by accelerate as ``Trainer.train`` prepares it and in train mode as ``training_step`` leaves it
  (the trial's LoRA dropout active).
  ``bf16`` is GRPOConfig's flag: False as the trial sets it on a CPU, True as TRL defaults it. What the base model's
  forward saw during generation (autocast, the logits' dtype) is recorded per side under ``observed``.
- **trl_continuous_batching**, **trl_continuous_batching_bf16**: the same with
  ``use_transformers_continuous_batching`` (``generate_batch``; with bf16 TRL casts the model to bfloat16 first).
  Its cache is sized by TRL's default (half the free memory; on a CPU, of the RAM) unless ``--cb-num-blocks``. A
  side that fails records its one-line error.
- **ppo_core_float32**, **ppo_core_bfloat16**: ``ppo_core.rollout.sampling_loop.sample_responses`` from a
  ``ppo_core.rollout.sampling_copy.SamplingCopy`` in that dtype, packed for the training rollout's rows, as a run
  samples. ``sampling_dtype: auto`` picks one of them (``measured_sampling_dtype``); every side's ratio is to that one.

Every side stops at the stop token once each row has emitted it, so the seconds per new token divide by the decode
steps the timed call took. Numerics, in the same run: the log-probabilities of tokens sampled by ppo_core's loop (its
own logits, step by step) against a full forward of the unmerged PEFT policy
(``ppo_core.rollout.collect.response_logits``), the float32 copy within 1e-3. ``--quick``: a tiny Llama with a tiny
LoRA, 2 prompts, 4 tokens, 1 repeat, a small continuous-batching cache; results in ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import yaml

from benchmarks.common.machine import machine_facts
from benchmarks.trial_speed import POINT
from tools.provenance import REPO_ROOT, command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from ppo_core.config.ppo_config import PPOConfig
    from ppo_core.setup.run_setup import RunParts

OUT = RESULTS / "trial_speed" / "sampling_peer.json"
LORA_B_STD = 0.01
"""lora_B's seeded values: a change of the logits well above float32's rounding, not one that turns the model into
another (responses of another length would be other work)."""
TOLERANCE = 1e-3
SEED = 0  # of lora_B's values and of the numerics check's draws
CORE_DTYPES = {"ppo_core_float32": torch.float32, "ppo_core_bfloat16": torch.bfloat16}
QUICK_CB_BLOCKS = 4  # TRL's default cache is half the RAM, zero-filled at every call: seconds even for a tiny model


@dataclass(frozen=True)
class Batch:
    """One batch of prompts as each side takes it: left-padded tensors (ppo_core) and unpadded id lists (TRL)."""

    queries: torch.Tensor
    query_mask: torch.Tensor
    prompt_ids: list[list[int]]


Sampler = Callable[[Batch], int]  # samples the batch's responses; returns the decode steps taken


def config_values(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The run's ppo_core config: the study's base at SmolLM2's point; quick, a tiny Llama on tiny prompts."""
    if not args.quick:
        return {**yaml.safe_load(args.study.read_text())["base"], **POINT}
    from tools import tiny_data, tiny_models

    return {"task": None, "sft_model_path": str(tiny_models.write_llama(work / "llama", seed=1)),
            "dataset_name": str(tiny_data.write_jsonl_splits(work / "data", "standard", n_train=8, n_test=4)),
            "reward_funcs": ["examples.bring_your_own.rewards:letter_reward"], "advantage_estimator": "grpo",
            "use_peft": True, "lora_r": 4, "per_device_train_batch_size": 2, "num_generations": 2,
            "total_episodes": 2, "response_length": 4, "temperature": 1.0, "num_eval_prompts": 2}


def prompt_batch(tokenizer: PreTrainedTokenizerBase, texts: list[str], rows: int, chat: bool) -> Batch:
    """``rows`` prompts, the texts in turn, encoded as ppo_core encodes a rollout's (``encode_prompts``)."""
    from ppo_core.models.prompt_data import PromptSet, render_conversations
    from ppo_core.rollout.collect import encode_prompts

    chosen = [texts[row % len(texts)] for row in range(rows)]
    if chat:
        conversations = [[{"role": "user", "content": text}] for text in chosen]
        prompts = PromptSet(list(conversations), render_conversations(conversations, tokenizer))
    else:
        prompts = PromptSet(list(chosen), chosen)
    encoded = encode_prompts(tokenizer, prompts, None)
    queries, mask = encoded["input_ids"], encoded["attention_mask"]
    return Batch(queries, mask, [ids[keep.bool()].tolist() for ids, keep in zip(queries, mask, strict=True)])


def seeded_policy(config: PPOConfig, parts: RunParts) -> PreTrainedModel:
    """The policy as a ppo_core run builds it under LoRA, its lora_B drawn from N(0, LORA_B_STD^2)."""
    from ppo_core.models.loading import load_causal_lm, prepare_for_training
    from ppo_core.setup.trained_models import lora_config

    policy = prepare_for_training(load_causal_lm(parts.policy_path, parts.options),
                                  lora_config(config, config.lora_task_type), False, "lora_target_modules")
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if ".lora_B." in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * LORA_B_STD)
    return policy


def no_reward(completions: list[Any], **columns: Any) -> list[float | None]:
    """GRPOTrainer requires a reward function; generation never calls it."""
    return [0.0] * len(completions)


def trl_trainer(config: PPOConfig, parts: RunParts, policy: PreTrainedModel, texts: list[str], output_dir: str,
                **overrides: Any) -> Any:
    """GRPOTrainer as a ``trainer: trl-grpo`` trial of ``config`` builds it (GRPOConfig fields ``overrides``
    changed), holding ``policy``'s adapter, prepared and in train mode as during ``train``."""
    import trl
    from datasets import Dataset
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from tuner.trl_trial.arguments import trial_arguments
    from tuner.trl_trial.run import trainer_config

    arguments = trial_arguments("trl-grpo", config)
    arguments = dataclasses.replace(arguments, config={**arguments.config, **overrides})
    model_args = trl.ModelConfig(**{**arguments.model, "model_name_or_path": parts.policy_path})
    trainer = trl.GRPOTrainer(
        model=parts.policy_path, reward_funcs=[no_reward], processing_class=parts.tokenizer,
        args=trainer_config(arguments, torch.device("cpu"), output_dir, 1, 1),
        train_dataset=Dataset.from_dict({"prompt": texts}), peft_config=trl.get_peft_config(model_args),
    )
    adapter = get_peft_model_state_dict(policy)
    set_peft_model_state_dict(trainer.model, adapter)
    theirs = get_peft_model_state_dict(trainer.model)
    if theirs.keys() != adapter.keys() or not all(torch.equal(theirs[key], adapter[key]) for key in adapter):
        raise RuntimeError("TRL's model did not take the policy's adapter: its LoRA layers differ")
    # Trainer.train prepares the model (on a CPU with bf16, accelerate wraps its forward in autocast) and
    # training_step calls model.train() before GRPOTrainer generates: the state its generation runs in.
    trainer.model_wrapped = trainer.accelerator.prepare_model(trainer.model)
    trainer.model_wrapped.train()
    return trainer


def trl_sampler(trainer: Any) -> Sampler:
    def run(batch: Batch) -> int:
        completions, _ = trainer._generate_single_turn(batch.prompt_ids, None, {}, trainer.num_generations)
        return max(len(ids) for ids in completions)
    return run


def core_sampler(model: PreTrainedModel, parts: RunParts, config: PPOConfig) -> Sampler:
    """What ``ppo_core.rollout.collect.sample_chunk`` runs on a CPU."""
    from ppo_core.rollout.sampling_loop import sample_responses

    def run(batch: Batch) -> int:
        responses, _ = sample_responses(model, batch.queries, batch.query_mask,
                                        parts.generation_config.max_new_tokens, config.temperature,
                                        parts.stop_token_id, parts.tokenizer.pad_token_id)
        return int(responses.shape[1])
    return run


def observed(model: torch.nn.Module, sample: Callable[[], int]) -> dict[str, Any]:
    """What ``model``'s forward saw during one call of ``sample``: autocast, the logits' and weights' dtypes."""
    seen: list[dict[str, Any]] = []

    def hook(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        logits = getattr(output, "logits", None)
        seen.append({"cpu_autocast": torch.is_autocast_enabled("cpu"), "training": module.training,
                     "logits": str(logits.dtype) if logits is not None else None,
                     "weights": str(next(module.parameters()).dtype)})

    handle = model.register_forward_hook(hook)
    try:
        sample()
    finally:
        handle.remove()
    return {"forwards": len(seen), **(seen[0] if seen else {})}


def logprob_gap(policy: PreTrainedModel, copy_model: PreTrainedModel, parts: RunParts, config: PPOConfig,
                batch: Batch) -> dict[str, Any]:
    """max |log pi_loop(y_t) - log pi_full(y_t)| over the response tokens ppo_core's loop sampled from
    ``copy_model``: its own step logits against the unmerged policy's full forward; and, as the scale the gap is
    read against, max |log pi_full(y_t) - log pi_base(y_t)|, how far the adapter moved the same tokens."""
    from ppo_core.models.lora import adapters_disabled
    from ppo_core.models.sequences import token_logprobs
    from ppo_core.rollout.collect import response_logits
    from ppo_core.rollout.sampling_loop import loop_logits, sample_responses

    torch.manual_seed(SEED)
    responses, mask = sample_responses(copy_model, batch.queries, batch.query_mask,
                                       parts.generation_config.max_new_tokens, config.temperature,
                                       parts.stop_token_id, parts.tokenizer.pad_token_id)
    loop = token_logprobs(loop_logits(copy_model, batch.queries, batch.query_mask, responses), responses,
                          config.temperature)
    inputs = (batch.queries, batch.query_mask, responses, mask)
    with torch.no_grad():
        full = token_logprobs(response_logits(policy, *inputs), responses, config.temperature)
        with adapters_disabled(policy) as base_model:
            base = token_logprobs(response_logits(base_model, *inputs), responses, config.temperature)
    return {"max_abs_logprob_difference": float((loop - full).abs()[mask].max()), "tokens": int(mask.sum()),
            "adapter_moved_logprobs_by": float((full - base).abs()[mask].max())}


def time_sides(samplers: dict[str, Sampler], batch: Batch, repeats: int,
               errors: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each side's best seconds over ``repeats`` rounds after a warm-up round, and the decode steps of that call;
    the order turns each round, so no side always runs right after the same other."""
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in samplers}
    names = list(samplers)
    for round_index in range(repeats + 1):
        for name in names[round_index % len(names):] + names[:round_index % len(names)]:
            if name in errors:
                continue
            try:
                started = time.perf_counter()
                steps = samplers[name](batch)
                seconds = time.perf_counter() - started
            except Exception as error:  # a side that cannot run on a CPU is a result, not a crash
                errors[name] = one_line(error)
                continue
            if round_index > 0:
                runs[name].append((seconds, steps))
    sides: dict[str, dict[str, Any]] = {}
    for name in names:
        if name in errors or not runs[name]:
            sides[name] = {"error": errors.get(name, "no timed call")}
            continue
        seconds, steps = min(runs[name])
        sides[name] = {"seconds": seconds, "new_tokens": steps, "seconds_per_new_token": seconds / steps,
                       "all_seconds": [run[0] for run in runs[name]]}
    return sides


def one_line(error: BaseException) -> str:
    from ppo_core.errors import first_line

    return f"{type(error).__name__}: {first_line(error)}"


def markdown(result: dict[str, Any]) -> str:
    lines = [f"CPU: {result['machine']['cpu']}, {result['settings']['threads']} thread(s); sampling_dtype auto "
             f"picked {result['auto']['dtype']}", "",
             "| batch | side | seconds | new tokens | ms per new token | over ppo_core auto |",
             "|---|---|---|---|---|---|"]
    for rows, entry in result["batches"].items():
        for name, side in entry["sides"].items():
            if "error" in side:
                lines.append(f"| {rows} | {name} | failed: {side['error'][:80]} | | | |")
                continue
            lines.append(f"| {rows} | {name} | {side['seconds']:.3f} | {side['new_tokens']} | "
                         f"{1000 * side['seconds_per_new_token']:.1f} | {side['ratio_to_auto']:.2f}x |")
    lines.append("")
    for rows, entry in result["batches"].items():
        gaps = {name: entry["numerics"][name] for name in CORE_DTYPES}
        float32 = gaps["ppo_core_float32"]
        lines.append(f"batch {rows}: max |log p(loop) - log p(PEFT forward)| over {float32['tokens']} sampled "
                     "tokens: " + ", ".join(f"{name} {gap['max_abs_logprob_difference']:.2e}"
                                            for name, gap in gaps.items())
                     + f" (the adapter moved them by up to {float32['adapter_moved_logprobs_by']:.2f})")
    return "\n".join(lines)


def measure_batches(args: argparse.Namespace, config: Any, parts: Any, policy: PreTrainedModel,
                    copies: dict[str, Any], trainers: dict[str, Any], samplers: dict[str, Sampler],
                    errors: dict[str, str], auto_side: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each batch size's timed sides, their ratios to ppo_core's default and the copies' numerics; and what each TRL
    side's base model computes in (from one untimed call)."""
    texts = parts.eval_prompts.texts
    batches: dict[str, Any] = {}
    observations: dict[str, Any] = {}
    for rows in args.batches:
        batch = prompt_batch(parts.tokenizer, texts, rows, args.prompts == "chat")
        if not observations:  # what each TRL side's base model computes in, from one untimed call
            for name, trainer in trainers.items():
                try:
                    observations[name] = observed(trainer.model.get_base_model(),
                                                  functools.partial(samplers[name], batch))
                except Exception as error:  # time_sides records the same failure
                    observations[name] = {"error": one_line(error)}
        sides = {**time_sides(samplers, batch, args.repeats, errors),
                 **{name: {"error": error} for name, error in errors.items() if name not in samplers}}
        for side in sides.values():
            if "seconds" in side and "seconds" in sides[auto_side]:
                side["ratio_to_auto"] = side["seconds"] / sides[auto_side]["seconds"]
        lengths = batch.query_mask.sum(dim=1)
        numerics = {name: logprob_gap(policy, copy.model, parts, config, batch) for name, copy in copies.items()}
        batches[str(rows)] = {
            "prompt_tokens": {"min": int(lengths.min()), "max": int(lengths.max()),
                              "mean": float(lengths.float().mean())},
            "sides": sides,
            "numerics": {**numerics, "float32_within_tolerance":
                         numerics["ppo_core_float32"]["max_abs_logprob_difference"] <= TOLERANCE},
        }
    return batches, observations


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sampling_peer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=REPO_ROOT / "benchmarks" / "studies" / "smollm2.yaml")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompts", choices=["chat", "plain"], default="chat")
    parser.add_argument("--cb-num-blocks", type=int, default=None,
                        help="continuous batching's cache in blocks (default: TRL's, half the free memory)")
    parser.add_argument("--out", type=Path, default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.repeats, args.cb_num_blocks = [2], 1, args.cb_num_blocks or QUICK_CB_BLOCKS
    out = results_path(args.out, OUT, args.quick)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # transformers 5 deprecates names TRL 1.16 still passes; nothing this benchmark's user can act on.
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing.*")
    from ppo_core.config.io import build_config
    from ppo_core.models.sampling_precision import measured_sampling_dtype
    from ppo_core.rollout.sampling_copy import SamplingCopy
    from ppo_core.setup.run_setup import load_run_parts, run_sources

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="ppo-bench-sampling-peer-"))
    values = config_values(args, work)
    config = build_config(values)
    parts = load_run_parts(config, run_sources(config), torch.device("cpu"))
    texts = parts.eval_prompts.texts
    policy = seeded_policy(config, parts)
    # The rows the run packs its copy for (one process): ppo_core.rollout.sampling_copy.sampling_copy's.
    pack_rows = min(config.local_rollout_forward_batch_size,
                    config.per_device_train_batch_size * config.gradient_accumulation_steps)
    auto = measured_sampling_dtype(policy, pack_rows)
    copies = {name: SamplingCopy(policy, dtype, pack_rows) for name, dtype in CORE_DTYPES.items()}
    auto_side = f"ppo_core_{auto.dtype}"
    batching: dict[str, Any] = {"use_transformers_continuous_batching": True}
    if args.cb_num_blocks:
        batching["transformers_continuous_batching_config"] = {"num_blocks": args.cb_num_blocks}
    variants: dict[str, dict[str, Any]] = {
        "trl_generate": {"bf16": False}, "trl_generate_bf16": {"bf16": True},
        "trl_continuous_batching": {"bf16": False, **batching},
        "trl_continuous_batching_bf16": {"bf16": True, **batching},
    }
    errors: dict[str, str] = {}
    trainers: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ppo-bench-trl-") as output_dir:
        for name, overrides in variants.items():
            try:
                trainers[name] = trl_trainer(config, parts, policy, texts, output_dir, **overrides)
            except Exception as error:  # recorded, as a failed generation is
                errors[name] = one_line(error)
    samplers = {**{name: trl_sampler(trainer) for name, trainer in trainers.items()},
                **{name: core_sampler(copy.model, parts, config) for name, copy in copies.items()}}
    batches, observations = measure_batches(args, config, parts, policy, copies, trainers, samplers, errors,
                                            auto_side)
    reference = next(iter(trainers.values()), None)
    result = {
        "command": command_line("benchmarks.sampling_peer", argv), "code": commit_at_start(), "quick": args.quick,
        "settings": {"model": config.sft_model_path, "config": values, "threads": torch.get_num_threads(),
                     "repeats": args.repeats, "prompts": args.prompts,
                     "new_tokens": parts.generation_config.max_new_tokens, "temperature": config.temperature,
                     "lora": {"r": config.lora_r, "alpha": config.lora_alpha, "lora_B_std": LORA_B_STD,
                              "seed": SEED},
                     "copy_packed_for_rows": pack_rows, "tolerance": TOLERANCE},
        "auto": {"dtype": auto.dtype, "side": auto_side, "check_seconds": auto.seconds},
        "trl": {"generation_config": reference.generation_config.to_diff_dict() if reference else None,
                "max_completion_length": reference.max_completion_length if reference else None,
                "lora_dropout": reference.model.peft_config["default"].lora_dropout if reference else None,
                "observed": observations, "continuous_batching_num_blocks": args.cb_num_blocks},
        "batches": batches, "machine": {**machine_facts("cpu"), "peft": metadata.version("peft")},
        "load_average": os.getloadavg(), "seconds": time.perf_counter() - started,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(markdown(result))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
