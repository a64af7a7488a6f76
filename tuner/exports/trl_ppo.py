"""``--format trl-ppo`` (also ``trl-args``, ``tuner.exports.FORMAT_ALIASES``): flags for TRL 1.12's PPO:
``trl.experimental.ppo.PPOConfig`` with the ``ScriptArguments`` and ``ModelConfig`` its PPO example script parses
beside it, under transformers 5 (the last TRL with a PPOTrainer; checked by parsing the export with TRL 1.12.0's own
classes). What TRL lacks becomes a comment.

ppo-tune's PPOConfig took TRL 1.12's names, so most fields map to themselves. TRL's PPO steps its learning-rate
schedule once per PPO update, as ppo-tune does, so warmup counts the same. transformers 5 dropped ``warmup_ratio``: a
ratio is given as a fractional ``--warmup_steps``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ppo_core.config.ppo_config import PPOConfig
from tuner.exports._common import (
    LORA_FIELDS,
    TASK_WHY,
    Lacks,
    Target,
    Why,
    generated_length_of,
    is_model,
    piecewise_schedules,
    rendered,
    scheduler_with_warmup,
)
from tuner.exports.computes import collect, micro_batches_per_step, no_dual_clip

SAME_NAMES = (
    "sft_model_path", "reward_model_path", "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay",
    "adam_epsilon", "max_grad_norm", "per_device_train_batch_size", "gradient_accumulation_steps", "num_mini_batches",
    "num_ppo_epochs", "total_episodes", "num_train_epochs", "local_rollout_forward_batch_size", "cliprange",
    "cliprange_value", "vf_coef", "gamma", "lam", "whiten_rewards", "kl_coef", "kl_estimator", "response_length",
    "temperature", "stop_token", "stop_token_id", "missing_eos_penalty", "num_sample_generations", "seed", "bf16",
    "use_cpu", "output_dir", "report_to", "gradient_checkpointing",
    # ScriptArguments and ModelConfig, which TRL's PPO script parses beside PPOConfig.
    "dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split", "model_revision", "dtype",
    "attn_implementation", "use_peft", *LORA_FIELDS,
)
KEYS = {name: name for name in SAME_NAMES}
KL_ESTIMATORS = ("k1", "k3")


def _clip(c: PPOConfig) -> float | Lacks:
    low, high = c.clip_bounds
    return low if low == high else Lacks("TRL 1.12's PPO clips the ratio symmetrically at cliprange")


VALUES: dict[str, Callable[[PPOConfig], Any]] = {
    "reward_model_path": lambda c: c.reward_model_path if is_model(c.reward_model_path) or c.reward_model_path is None
    else Lacks("TRL 1.12's PPOTrainer scores with a reward model; a function reward needs --format trl-grpo"),
    "lr_scheduler_type": scheduler_with_warmup,
    # transformers 5 takes a ratio as a fraction below 1.
    "warmup_steps": lambda c: c.warmup_ratio if c.warmup_ratio and not c.warmup_steps else c.warmup_steps,
    "kl_estimator": lambda c: c.kl_estimator if c.kl_estimator in KL_ESTIMATORS
    else Lacks("TRL 1.12 accepts only k1 or k3"),
    "cliprange": _clip,
    "response_length": generated_length_of,
}

WHY_NOT: dict[str, Why] = {
    **piecewise_schedules("TRL"),
    "task": TASK_WHY,
    "task_seed": TASK_WHY,
    "trust_remote_code": "TRL 1.12's PPO script has no such flag: load the models with trust_remote_code=True",
    "value_learning_rate": "TRL trains policy and value with one learning_rate",
    "kl_target": "TRL has no adaptive KL controller; use kl_coef as a fixed beta or port the controller",
    "kl_horizon": "adaptive KL controller horizon; TRL has no adaptive controller",
    "entropy_coef": "TRL has no entropy bonus",
    "whiten_advantages": "TRL always whitens advantages",
    "value_model_path": "pass the value model to PPOTrainer(value_model=...)",
    "value_use_peft": "ppo-tune trained a full value network; TRL's PPOTrainer trains the value_model you pass",
    "reward_funcs": "TRL 1.12's PPOTrainer takes one reward model; combine rewards in it, or use --format trl-grpo",
    "reward_weights": "TRL 1.12's PPOTrainer takes one reward model",
    "max_prompt_length": "truncate the prompts when you build TRL's train_dataset",
    "cliprange_low": "TRL 1.12's PPO clips the ratio symmetrically at cliprange",
    "cliprange_high": "TRL 1.12's PPO clips the ratio symmetrically at cliprange",
    "loss_type": "TRL 1.12's PPO averages the policy and value losses over each micro-batch's tokens (bnpo)",
    "advantage_estimator": "TRL's PPOTrainer only does GAE with a value network: see --format trl-grpo or trl-rloo",
    "num_generations": lambda c: None if c.generations_per_prompt == 1
    else "TRL 1.12's PPOTrainer samples one response per prompt",
    "scale_rewards": "TRL's PPO has no group of responses to scale by",
    "kl_in_reward": lambda c: None if c.kl_penalty_in_reward
    else "TRL 1.12's PPO penalises the reward only (kl_coef x KL per token); ppo-tune had beta x KL in the loss",
    "beta": "TRL 1.12's PPO has no KL loss term",
    "kl_loss_estimator": "TRL 1.12's PPO has no KL loss term",
    "importance_sampling_level": "TRL 1.12's PPO clips per-token ratios",
    "dual_clip": "TRL 1.12's PPO has no dual clip",
    "scale_rewards_epsilon": "TRL's PPO has no group to scale by",
}
SAME = {"entropy_coef": 0.0, "whiten_advantages": True, "trust_remote_code": False, "value_use_peft": True,
        "loss_type": "bnpo", "advantage_estimator": "gae", "importance_sampling_level": "token"}
CARRIED = {"warmup_ratio": "warmup_steps: transformers 5 takes a ratio as a fractional warmup_steps"}


def _remarks(c: PPOConfig) -> list[str]:
    remarks = []
    if c.num_mini_batches > 1:
        remarks.append("num_mini_batches > 1: TRL 1.12 counts gradient accumulation across mini-batch boundaries "
                       "and takes fewer optimizer steps than ppo-tune did (benchmarks/trl_comparison/README.md)")
    if c.max_grad_norm > 0:
        remarks.append("max_grad_norm: TRL 1.12's PPO loop does not clip gradients")
    return remarks


def _loss_type_differs(c: PPOConfig) -> str | None:
    if c.loss_type == "bnpo" or (c.loss_type == "token_mean" and micro_batches_per_step(c) == 1):
        return None
    return (f"loss_type={c.loss_type}: TRL 1.12's PPO averages the policy and value losses over each micro-batch's "
            "tokens (bnpo here)")


def _differences(c: PPOConfig) -> list[str]:
    return collect(c, [
        lambda c: None if c.advantage_estimator == "gae" else
        f"advantage_estimator={c.advantage_estimator}: TRL 1.12's PPOTrainer computes GAE with a value network",
        lambda c: None if c.kl_penalty_in_reward else "kl_in_reward=False: TRL 1.12's PPO penalises the reward only",
        _loss_type_differs,
        lambda c: None if c.clip_bounds[0] == c.clip_bounds[1] else
        f"cliprange_low/high={c.clip_bounds}: TRL 1.12's PPO clips symmetrically at cliprange",
        lambda c: None if c.importance_sampling_level == "token" else
        f"importance_sampling_level={c.importance_sampling_level}: TRL 1.12's PPO clips per-token ratios",
        no_dual_clip("TRL 1.12's PPO"),
        lambda c: None if c.entropy_coef == 0 else f"entropy_coef={c.entropy_coef!r}: TRL has no entropy bonus",
        lambda c: None if c.whiten_advantages else "whiten_advantages=False: TRL always whitens advantages",
        lambda c: None if c.value_learning_rate is None or c.value_learning_rate == c.learning_rate else
        f"value_learning_rate={c.value_learning_rate!r}: TRL trains the value network at learning_rate",
        lambda c: None if c.num_mini_batches == 1 or micro_batches_per_step(c) == 1 else
        "num_mini_batches > 1: TRL 1.12 counts gradient accumulation across mini-batch boundaries, so its optimizer "
        "steps mix mini-batches",
    ])


TARGET = Target(name="TRL 1.12 PPOConfig", layout="trl", keys=KEYS, values=VALUES, why_not=WHY_NOT, same=SAME,
                carried=CARRIED, remarks=_remarks, differences=_differences,
                profile={"loss_type": "bnpo"})


trl_arguments = rendered(TARGET)
