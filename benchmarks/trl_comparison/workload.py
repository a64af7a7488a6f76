"""The work both trainers are given: one set of batch, length and PPO settings, shared field for field."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Workload:
    """Settings that decide how much compute one PPO update does; both sides read only these."""

    prompt_length: int = 8  # every prompt has exactly this many tokens, so neither side pads queries
    num_prompts: int = 64
    response_length: int = 32
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 2
    # One mini-batch: TRL steps its optimizer through accelerate's gradient accumulation, which counts
    # micro-batches across mini-batch boundaries, so with num_mini_batches > 1 TRL takes fewer optimizer
    # steps than ppo_core and the two would no longer do equal work.
    num_mini_batches: int = 1
    num_ppo_epochs: int = 4
    local_rollout_forward_batch_size: int = 16
    warmup_updates: int = 1  # updates per run whose timings are discarded (first-call costs)
    measured_updates: int = 4
    learning_rate: float = 1e-5
    temperature: float = 0.7
    kl_coef: float = 0.05
    seed: int = 42

    @property
    def batch_size(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    @property
    def total_updates(self) -> int:
        return self.warmup_updates + self.measured_updates

    @property
    def total_episodes(self) -> int:
        return self.batch_size * self.total_updates

    def micro_batches_per_update(self) -> int:
        return self.num_ppo_epochs * self.gradient_accumulation_steps

    def optimizer_steps_per_update(self) -> int:
        return self.num_ppo_epochs * self.num_mini_batches

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "batch_size": self.batch_size}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        names = {name for name in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in names})


CPU_WORKLOAD = Workload()

# Pythia-160M on one GPU: a TRL-example-sized batch (64 episodes, 53-token responses as in TRL's default).
CUDA_WORKLOAD = replace(
    Workload(),
    prompt_length=64,
    num_prompts=512,
    response_length=53,
    per_device_train_batch_size=16,
    gradient_accumulation_steps=4,
    local_rollout_forward_batch_size=64,
    measured_updates=5,
)

# --quick: every step of the full run on a workload that takes a fraction of a second per update. Gradient
# accumulation (2 micro-batches) and several PPO epochs stay, so the equal-work check still compares them.
QUICK_WORKLOAD = replace(
    Workload(),
    num_prompts=16,
    response_length=8,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=2,
    num_ppo_epochs=2,
    local_rollout_forward_batch_size=8,
    warmup_updates=1,
    measured_updates=1,
)
