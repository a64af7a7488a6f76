"""ppo_core's side: its PPOTrainer on the fixture, timed by the trainer's own per-update metrics."""

from __future__ import annotations

import time

# ppo_core reads the fixture's prompt file through datasets, which it imports lazily, at setup. Imported here, with the
# side, its footprint (pyarrow, pandas: about 87 MiB of RSS) lands in the memory baseline, as it does for TRL's side,
# whose trainer imports datasets at import: the work-memory column then compares work, not libraries. The absolute
# peak RSS column keeps both sides' imports.
import datasets  # noqa: F401
import torch
from torch import nn

from benchmarks.trl_comparison.counters import inner_optimizer
from benchmarks.trl_comparison.fixtures import Fixture
from benchmarks.trl_comparison.timing import UpdateTiming, wall_times
from benchmarks.trl_comparison.workload import Workload
from ppo_core import PPOConfig, PPOTrainer, TrainerCallback


class _Clock(TrainerCallback):
    """A ppo_core callback that stamps the start of training and the end of every update."""

    def __init__(self) -> None:
        self.marks: list[float] = []

    def on_train_begin(self, config: object, num_updates: int) -> None:
        self.marks.append(time.perf_counter())

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        self.marks.append(time.perf_counter())
        return None


def core_config(fixture: Fixture, workload: Workload, device: str) -> PPOConfig:
    return PPOConfig(
        task=None,
        sft_model_path=str(fixture.sft_dir),
        reward_model_path=str(fixture.reward_dir),
        value_model_path=str(fixture.value_dir),
        dataset_name=str(fixture.prompts_path),
        stop_token=None,
        stop_token_id=None,
        response_length=workload.response_length,
        per_device_train_batch_size=workload.per_device_train_batch_size,
        gradient_accumulation_steps=workload.gradient_accumulation_steps,
        num_mini_batches=workload.num_mini_batches,
        num_ppo_epochs=workload.num_ppo_epochs,
        total_episodes=workload.total_episodes,
        local_rollout_forward_batch_size=workload.local_rollout_forward_batch_size,
        num_sample_generations=0,
        learning_rate=workload.learning_rate,
        temperature=workload.temperature,
        kl_coef=workload.kl_coef,
        kl_estimator="k1",
        whiten_rewards=False,
        whiten_advantages=True,  # TRL always whitens advantages
        entropy_coef=0.0,
        # TRL's PPO loop never clips gradients (it ignores max_grad_norm), so clipping is off here too.
        max_grad_norm=0.0,
        lr_scheduler_type="linear",
        seed=workload.seed,
        bf16=False,
        use_cpu=device == "cpu",
    )


class CoreSide:
    name = "ppo_core"

    def __init__(self, fixture: Fixture, workload: Workload, device: str) -> None:
        self.clock = _Clock()
        self.trainer = PPOTrainer(core_config(fixture, workload, device), callbacks=[self.clock])

    def networks(self) -> dict[str, nn.Module]:
        models = self.trainer.setup.models
        return {
            "policy": self.trainer.optimisation.policy,
            "reference": models.reference,
            "value": models.value_model.trunk,
            "reward": models.rewards.rewards[0].model.base_model,
        }

    def generating_policy(self) -> nn.Module:
        return self.trainer.accelerator.unwrap_model(self.trainer.optimisation.policy)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        optimisation = self.trainer.optimisation
        return {
            "policy_optimizer": inner_optimizer(optimisation.policy_optimizer),
            "value_optimizer": inner_optimizer(optimisation.value_optimizer),
        }

    def train(self) -> list[UpdateTiming]:
        result = self.trainer.train()
        walls = wall_times(self.clock.marks)
        return [
            UpdateTiming(metrics["time/rollout_s"], metrics["time/update_s"], wall)
            for metrics, wall in zip(result.metrics, walls, strict=True)
        ]
