"""The GPU paths, on the hardware: LoRA with bf16 frozen weights and checkpointing, the CUDA memory peak, one process
moving between the GPU and the CPU, the compiled fast paths compiling once, and one run on two GPUs against one GPU
with the same global batch. Skipped, with
the reason, on machines without them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.data_parallel import GLOBAL_BATCH, UPDATES, run, write_run_config
from helpers.tiny_runs import letter_run

from ppo_core import PPOConfig, PPOTrainer


@pytest.mark.cuda
def test_lora_bf16_checkpointing_on_a_gpu(tmp_path: Path) -> None:
    values = letter_run(tmp_path, 32, response_length=6, per_device_train_batch_size=8, total_episodes=16,
                        use_peft=True, lora_r=4, dtype="bfloat16", gradient_checkpointing=True)
    trainer = PPOTrainer(PPOConfig(**values))
    assert trainer.accelerator.device.type == "cuda" and trainer.accelerator.mixed_precision == "bf16"
    metrics = trainer.train().metrics
    assert metrics[0]["objective/kl"] == pytest.approx(0.0, abs=1e-6)
    # The allocator's peak, not the process's resident set: a tiny model needs far less than a GiB on the GPU.
    assert all(0 < m["memory/peak_gib"] < 1 for m in metrics)
    assert torch.cuda.max_memory_allocated() > 0


@pytest.mark.cuda
def test_one_process_moves_between_the_gpu_and_the_cpu(tmp_path: Path) -> None:
    # accelerate keeps one device per process: a use_cpu trainer after a GPU one was refused ("AcceleratorState has
    # already been initialized ... pass cpu=True"), and a GPU trainer after a use_cpu one silently ran on the CPU.
    values = letter_run(tmp_path, 16, response_length=4, per_device_train_batch_size=4, total_episodes=4, bf16=True)
    for use_cpu in (False, True, False):
        trainer = PPOTrainer(PPOConfig(**values, use_cpu=use_cpu))
        assert trainer.accelerator.device.type == ("cpu" if use_cpu else "cuda")
        assert trainer.accelerator.mixed_precision == "bf16"
        policy_device = next(trainer.setup.models.policy.parameters()).device
        assert policy_device.type == trainer.accelerator.device.type
        assert len(trainer.train().metrics) == 1


@pytest.mark.cuda
def test_the_compiled_paths_do_not_recompile_across_updates_and_an_evaluation(tmp_path: Path) -> None:
    import torch._dynamo

    # The three CUDA fast paths together; prompts of several widths (one width bucket), rollout and evaluation
    # batches of different row counts.
    values = letter_run(tmp_path, 64, response_length=8, per_device_train_batch_size=8, total_episodes=48,
                        local_rollout_forward_batch_size=16, num_eval_samples=3, bf16=True, static_decode=True,
                        fused_logits_head=True, bf16_generation_copy=True)
    trainer = PPOTrainer(PPOConfig(**values))
    # Warm-up: the first update and the evaluation's own batch shape compile (a second shape makes the step's
    # graph dynamic in its rows: one recompilation there). From then on nothing may compile again.
    trainer.evaluate(0)
    first = trainer.step(1)
    trainer.evaluate(1)
    assert first["objective/kl"] == pytest.approx(0.0, abs=1e-6)  # the compiled sampler, the policy's log-probs
    with torch._dynamo.config.patch(error_on_recompile=True):
        metrics = [trainer.step(2), trainer.step(3), trainer.evaluate(3)]
    assert all(value == value for figures in metrics for value in figures.values())  # no NaN


@pytest.mark.cuda(gpus=2)
def test_two_gpus_share_the_global_batch(tmp_path: Path) -> None:
    config = write_run_config(tmp_path)
    _, one_log = run(tmp_path, "one", 1, config, gradient_accumulation_steps=4)
    metrics, two_log = run(tmp_path, "two", 2, config, gradient_accumulation_steps=2)
    for update in range(UPDATES):
        rows = two_log[0][update]["rows"] + two_log[1][update]["rows"]
        assert sorted(rows) == sorted(one_log[0][update]["rows"])
        scores = two_log[0][update]["scores"] + two_log[1][update]["scores"]
        assert metrics[update]["objective/scores"] == pytest.approx(sum(scores) / GLOBAL_BATCH, abs=1e-6)
