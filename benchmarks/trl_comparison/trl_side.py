"""TRL's side: trl.experimental.ppo.PPOTrainer on the same fixture and workload.

TRL's ``train`` is one long loop with no phase timings, so the phases are stamped from outside:
  rollout start = the call of the module-level ``batch_generation`` (TRL's first rollout step),
  update start  = the first forward of the PolicyAndValueWrapper after it (only the PPO epochs call it),
  update end    = the ``on_step_end`` callback (after metrics, logging and the scheduler step).
TRL's two ``gc.collect()`` calls per update (one inside the rollout, one after the step) are timed too.
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import trl.experimental.ppo.ppo_trainer as trl_ppo
from datasets import Dataset
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    TrainerCallback,
)
from trl.experimental.ppo import PPOConfig, PPOTrainer

from benchmarks.trl_comparison.counters import inner_optimizer
from benchmarks.trl_comparison.fixtures import Fixture
from benchmarks.trl_comparison.timing import UpdateTiming, sync, wall_times
from benchmarks.trl_comparison.workload import Workload


class _PhaseClock(TrainerCallback):
    """Timestamps of train start, each rollout start, each update start and each step end."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.train_start = 0.0
        self.rollout_starts: list[float] = []
        self.update_starts: list[float] = []
        self.step_ends: list[float] = []
        self.gc_seconds: dict[int, float] = {}  # by the index of the update whose wall time contains the call
        self._awaiting_update = False

    def stamp(self) -> float:
        sync(self.device)
        return time.perf_counter()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.train_start = self.stamp()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.step_ends.append(self.stamp())

    def patch_rollout_start(self) -> None:
        original: Callable[..., Any] = trl_ppo.batch_generation

        def timed_batch_generation(*args: Any, **kwargs: Any) -> Any:
            self.rollout_starts.append(self.stamp())
            self._awaiting_update = True
            return original(*args, **kwargs)

        trl_ppo.batch_generation = timed_batch_generation

    def patch_update_start(self, wrapper: nn.Module) -> None:
        original: Callable[..., Any] = wrapper.forward

        def timed_forward(*args: Any, **kwargs: Any) -> Any:
            if self._awaiting_update:
                self.update_starts.append(self.stamp())
                self._awaiting_update = False
            return original(*args, **kwargs)

        wrapper.forward = timed_forward

    def patch_gc(self) -> None:
        """Time TRL's explicit gc.collect() calls by swapping the gc module seen by its trainer module only."""
        clock = self

        class TimedGc:
            def collect(self, *args: Any) -> int:
                started = time.perf_counter()
                collected = gc.collect(*args)
                index = len(clock.step_ends)
                clock.gc_seconds[index] = clock.gc_seconds.get(index, 0.0) + time.perf_counter() - started
                return collected

            def __getattr__(self, name: str) -> Any:
                return getattr(gc, name)

        trl_ppo.gc = TimedGc()

    def timings(self) -> list[UpdateTiming]:
        walls = wall_times([self.train_start, *self.step_ends])
        return [
            UpdateTiming(update - rollout, end - update, wall, self.gc_seconds.get(index, 0.0))
            for index, (rollout, update, end, wall) in enumerate(
                zip(self.rollout_starts, self.update_starts, self.step_ends, walls, strict=True)
            )
        ]


def trl_config(workload: Workload, device: str, output_dir: str) -> PPOConfig:
    return PPOConfig(
        output_dir=output_dir,
        report_to=[],
        save_strategy="no",
        logging_steps=10**6,
        disable_tqdm=True,
        per_device_train_batch_size=workload.per_device_train_batch_size,
        gradient_accumulation_steps=workload.gradient_accumulation_steps,
        num_mini_batches=workload.num_mini_batches,
        num_ppo_epochs=workload.num_ppo_epochs,
        total_episodes=workload.total_episodes,
        local_rollout_forward_batch_size=workload.local_rollout_forward_batch_size,
        response_length=workload.response_length,
        stop_token=None,
        stop_token_id=None,
        missing_eos_penalty=None,
        num_sample_generations=0,
        learning_rate=workload.learning_rate,
        lr_scheduler_type="linear",
        temperature=workload.temperature,
        kl_coef=workload.kl_coef,
        kl_estimator="k1",
        whiten_rewards=False,
        seed=workload.seed,
        # TRL's PPOConfig defaults: bf16=True and gradient_checkpointing=True; both off for fp32 parity
        # with ppo_core, which never recomputes activations.
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        # transformers >= 5 on torch >= 2.8 defaults to the fused AdamW; ppo_core uses torch's plain AdamW.
        optim="adamw_torch",
        use_cpu=device == "cpu",
        dataloader_num_workers=0,
    )


class TrlSide:
    name = "trl"

    def __init__(self, fixture: Fixture, workload: Workload, device: str) -> None:
        self.clock = _PhaseClock(torch.device(device))
        self._output_dir = tempfile.TemporaryDirectory(prefix="trl_bench_")
        tokenizer = AutoTokenizer.from_pretrained(fixture.sft_dir, padding_side="left")
        policy = AutoModelForCausalLM.from_pretrained(fixture.sft_dir, dtype=torch.float32)
        reference = AutoModelForCausalLM.from_pretrained(fixture.sft_dir, dtype=torch.float32)
        value = AutoModelForSequenceClassification.from_pretrained(fixture.value_dir, dtype=torch.float32)
        reward = AutoModelForSequenceClassification.from_pretrained(fixture.reward_dir, dtype=torch.float32)
        dataset = Dataset.from_dict({"input_ids": fixture.prompt_ids()})
        self.trainer = PPOTrainer(
            args=trl_config(workload, device, self._output_dir.name),
            processing_class=tokenizer,
            model=policy,
            ref_model=reference,
            reward_model=reward,
            value_model=value,
            train_dataset=dataset,
            callbacks=[self.clock],
        )
        self.clock.patch_rollout_start()
        self.clock.patch_gc()
        assert self.trainer.model is not None  # TRL's PolicyAndValueWrapper, built in PPOTrainer.__init__
        self.clock.patch_update_start(self.trainer.model)

    def networks(self) -> dict[str, nn.Module]:
        value, reward = self.trainer.value_model, self.trainer.reward_model
        return {
            "policy": self.trainer.policy_model,
            "reference": self.trainer.ref_model,
            "value": getattr(value, value.base_model_prefix),
            "reward": getattr(reward, reward.base_model_prefix),
        }

    def generating_policy(self) -> nn.Module:
        return self.trainer.accelerator.unwrap_model(self.trainer.model).policy

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": inner_optimizer(self.trainer.optimizer)}

    def train(self) -> list[UpdateTiming]:
        try:
            self.trainer.train()
        finally:
            self._output_dir.cleanup()
        return self.clock.timings()
