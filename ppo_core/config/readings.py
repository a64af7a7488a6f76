"""What a built config says beyond its fields: the batch hierarchy it derives, and the readings that combine fields
(the KL coefficient in force, the clip bounds, the rewards in scoring order, ...). :class:`ConfigReadings` is a base of
``ppo_core.config.ppo_config.PPOConfig``, which holds the fields; it has no fields of its own, so the dataclass's field
order (and so the CLI's and the reference's) is PPOConfig's alone.
"""

from __future__ import annotations

from typing import Literal

from ppo_core.config.estimator_traits import ESTIMATORS, default_generations, default_kl_in_reward


class ConfigReadings:
    """The readings of a PPOConfig; the annotations name the fields they read, which PPOConfig defines."""

    advantage_estimator: str
    num_generations: int | None
    kl_in_reward: bool | None
    kl_coef: float
    beta: float
    kl_target: float | None
    cliprange: float
    cliprange_low: float | None
    cliprange_high: float | None
    reward_model_path: str | None
    reward_funcs: list[str] | None
    judge_model_path: str | None
    judge_funcs: list[str] | None
    bf16: bool | None
    dtype: Literal["auto", "bfloat16", "float16", "float32"]
    learning_rate: float
    value_learning_rate: float | None
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    num_mini_batches: int
    world_size: int
    micro_batch_size: int
    local_batch_size: int
    batch_size: int
    mini_batch_size: int
    local_mini_batch_size: int

    def _derive_batch_sizes(self, world_size: int) -> None:
        """Compute TRL's batch hierarchy; the update loop splits each mini-batch into micro-batches."""
        self.world_size = world_size
        self.local_batch_size = self.per_device_train_batch_size * self.gradient_accumulation_steps
        self.micro_batch_size = self.per_device_train_batch_size * world_size
        self.batch_size = self.local_batch_size * world_size
        self.mini_batch_size = self.batch_size // self.num_mini_batches
        self.local_mini_batch_size = self.local_batch_size // self.num_mini_batches

    @property
    def adaptive_kl(self) -> bool:
        return self.kl_target is not None

    @property
    def uses_critic(self) -> bool:
        """Whether the run builds, trains and reads a value network: only GAE needs one."""
        return ESTIMATORS[self.advantage_estimator].critic

    @property
    def generations_per_prompt(self) -> int:
        """num_generations, or its default for the estimator: a group for the group estimators, else one."""
        if self.num_generations is not None:
            return self.num_generations
        return default_generations(self.advantage_estimator)

    @property
    def kl_penalty_in_reward(self) -> bool:
        """kl_in_reward, or its default for the estimator."""
        if self.kl_in_reward is not None:
            return self.kl_in_reward
        return default_kl_in_reward(self.advantage_estimator)

    @property
    def kl_coefficient(self) -> float:
        """The KL coefficient in force (the adaptive controller's starting value): kl_coef in the reward, beta in the
        loss."""
        return self.kl_coef if self.kl_penalty_in_reward else self.beta

    @property
    def clip_bounds(self) -> tuple[float, float]:
        """(cliprange_low, cliprange_high), each cliprange where null."""
        low = self.cliprange if self.cliprange_low is None else self.cliprange_low
        high = self.cliprange if self.cliprange_high is None else self.cliprange_high
        return low, high

    @property
    def named_rewards(self) -> list[tuple[str, str]]:
        """(field, spec) of each reward this config names, in scoring order: reward_model_path, then reward_funcs."""
        first = [("reward_model_path", self.reward_model_path)] if self.reward_model_path else []
        return first + [("reward_funcs", spec) for spec in self.reward_funcs or []]

    @property
    def reward_specs(self) -> list[str]:
        return [spec for _, spec in self.named_rewards]

    @property
    def named_judges(self) -> list[tuple[str, str]]:
        """(field, spec) of each held-out judge this config names, in scoring order: judge_model_path, then
        judge_funcs (a built-in task's gold, the judge when none is named, is not among them)."""
        first = [("judge_model_path", self.judge_model_path)] if self.judge_model_path else []
        return first + [("judge_funcs", spec) for spec in self.judge_funcs or []]

    def uses_bf16(self, gpu_supports_bf16: bool) -> bool:
        """bf16 autocast: as ``bf16`` says, else on where the GPU supports it or the frozen weights are bfloat16
        (autocast then computes the float32 trained weights in bf16 alike)."""
        return self.bf16 if self.bf16 is not None else gpu_supports_bf16 or self.dtype == "bfloat16"

    @property
    def effective_value_learning_rate(self) -> float:
        return self.learning_rate if self.value_learning_rate is None else self.value_learning_rate
