"""``--format verl``: Hydra overrides for verl 0.9.1's ``ppo_trainer`` config (``python3 -m verl.trainer.main_ppo``),
written against verl/trainer/config/_generated_ppo_trainer.yaml, trainer/ppo/core_algos.py (estimators, KL
penalties, loss aggregation) and workers/config/{actor,optimizer}.py of the 0.9.1 release on PyPI.

verl counts prompts where ppo-tune counts completions: data.train_batch_size and actor.ppo_mini_batch_size are prompts,
each sampled actor_rollout_ref.rollout.n times (the trainer multiplies ppo_mini_batch_size by n); the micro-batch
sizes are completions per GPU. Its learning-rate warmup counts training steps (PPO updates), as ppo-tune's does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ppo_core.config.ppo_config import PPOConfig
from tuner.exports._common import (
    TASK_WHY,
    Differs,
    Lacks,
    Target,
    Why,
    actor_and_critic,
    generated_length_of,
    is_model,
    lora_lacks,
    one_process_remark,
    per_token_kl_target,
    piecewise_schedules,
    rendered,
    rollout_batch,
    unknown_estimator,
    updates,
    whole_prompt_passes,
)
from tuner.exports.computes import (
    Difference,
    Edge,
    clamped_kl,
    collect,
    fixed_scale_rewards_epsilon,
    whitening_kl_in_reward_returns,
)

ACTOR = "actor_rollout_ref.actor"
MODEL = "actor_rollout_ref.model"
ROLLOUT = "actor_rollout_ref.rollout"

# ppo-tune's estimator names against verl's (core_algos.AdvantageEstimator), and its KL estimators against verl's
# kl_penalty names (core_algos.kl_penalty_forward: kl is k1, mse is k2, low_var_kl is k3).
ESTIMATORS = {"gae": "gae", "grpo": "grpo", "rloo": "rloo", "reinforce_pp": "reinforce_plus_plus",
              "reinforce_pp_baseline": "reinforce_plus_plus_baseline"}
KL_PENALTIES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl", "abs": "abs"}
LOSS_AGG_MODES = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean",
                  "seq_mean_token_sum_norm": "seq-mean-token-sum-norm"}
SCHEDULES = ("constant", "cosine")  # FSDPOptimizerConfig accepts these two
GRPO_STD_EPSILON = 1e-6  # compute_grpo_outcome_advantage's epsilon, which no config key reaches
# clip_ratio_c where the trial had no dual clip: verl always applies one (default 3.0) and requires it above 1, so a
# bound no ratio reaches (exp(20), where verl clamps the log-ratio, is below it) leaves the loss unbounded as ours.
NO_DUAL_CLIP = 1e9

KEYS: dict[str, str | tuple[str, ...]] = {
    "sft_model_path": f"{MODEL}.path",
    "reward_model_path": ("reward.reward_model.enable", "reward.reward_model.model_path"),
    "value_model_path": "critic.model.path",
    "trust_remote_code": f"{MODEL}.trust_remote_code",
    "gradient_checkpointing": (f"{MODEL}.enable_gradient_checkpointing", "critic.model.enable_gradient_checkpointing"),
    "use_peft": f"{MODEL}.lora_rank",
    "lora_alpha": f"{MODEL}.lora_alpha",
    "lora_target_modules": f"{MODEL}.target_modules",
    "value_use_peft": ("critic.model.lora_rank", "critic.model.lora_alpha"),
    "learning_rate": f"{ACTOR}.optim.lr",
    "value_learning_rate": "critic.optim.lr",
    "lr_scheduler_type": (f"{ACTOR}.optim.lr_scheduler_type", "critic.optim.lr_scheduler_type"),
    "warmup_steps": (f"{ACTOR}.optim.lr_warmup_steps", "critic.optim.lr_warmup_steps"),
    "warmup_ratio": (f"{ACTOR}.optim.lr_warmup_steps_ratio", "critic.optim.lr_warmup_steps_ratio"),
    "weight_decay": (f"{ACTOR}.optim.weight_decay", "critic.optim.weight_decay"),
    "max_grad_norm": (f"{ACTOR}.optim.clip_grad", "critic.optim.clip_grad"),
    "per_device_train_batch_size": (f"{ACTOR}.ppo_micro_batch_size_per_gpu", "critic.ppo_micro_batch_size_per_gpu"),
    "gradient_accumulation_steps": "data.train_batch_size",
    "num_mini_batches": f"{ACTOR}.ppo_mini_batch_size",
    "num_ppo_epochs": f"{ACTOR}.ppo_epochs",
    "total_episodes": "trainer.total_training_steps",
    "num_train_epochs": "trainer.total_epochs",
    "local_rollout_forward_batch_size": (f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu",
                                         "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"),
    "cliprange_low": f"{ACTOR}.clip_ratio_low",
    "cliprange_high": f"{ACTOR}.clip_ratio_high",
    "cliprange_value": "critic.cliprange_value",
    "dual_clip": f"{ACTOR}.clip_ratio_c",
    "importance_sampling_level": f"{ACTOR}.policy_loss.loss_mode",
    "entropy_coef": f"{ACTOR}.entropy_coeff",
    "gamma": "algorithm.gamma",
    "lam": "algorithm.lam",
    "loss_type": (f"{ACTOR}.loss_agg_mode", f"{ACTOR}.loss_scale_factor"),
    "advantage_estimator": "algorithm.adv_estimator",
    "num_generations": f"{ROLLOUT}.n",
    "scale_rewards": "algorithm.norm_adv_by_std_in_grpo",
    "kl_in_reward": ("algorithm.use_kl_in_reward", f"{ACTOR}.use_kl_loss"),
    "kl_coef": "algorithm.kl_ctrl.kl_coef",
    "kl_estimator": "algorithm.kl_penalty",
    "beta": f"{ACTOR}.kl_loss_coef",
    "kl_loss_estimator": f"{ACTOR}.kl_loss_type",
    "kl_target": ("algorithm.kl_ctrl.type", "algorithm.kl_ctrl.target_kl"),
    "kl_horizon": "algorithm.kl_ctrl.horizon",
    "response_length": "data.max_response_length",
    "max_prompt_length": ("data.max_prompt_length", "data.truncation"),
    "temperature": f"{ROLLOUT}.temperature",
    "stop_token": f"{ROLLOUT}.ignore_eos",
    "seed": "data.seed",
}


def _reward_model(c: PPOConfig) -> tuple[Any, Any]:
    if c.reward_model_path is None:
        return None, None
    if is_model(c.reward_model_path):
        return True, c.reward_model_path
    why = ("verl's custom_reward_function is a file's compute_score(data_source, solution_str, ground_truth, "
           "extra_info), not a module:function with GRPOTrainer's signature: wrap it")
    return Lacks(why), None


def _mini_batch_prompts(c: PPOConfig) -> int | Differs:
    completions = rollout_batch(c) // c.num_mini_batches
    prompts, rest = divmod(completions, c.generations_per_prompt)
    if not rest:
        return prompts
    return Differs(max(1, prompts), f"ppo-tune's mini-batches of {completions} completions split groups of "
                                    f"{c.generations_per_prompt}; verl's ppo_mini_batch_size counts whole prompts")


def _kl_target(c: PPOConfig) -> tuple[Any, Any]:
    if not c.kl_penalty_in_reward:
        if c.kl_target is None:
            return None, None
        return Lacks("verl's adaptive controller steers the in-reward kl_coef only; kl_loss_coef stays fixed"), None
    if c.kl_target is None:
        return "fixed", None
    return "adaptive", per_token_kl_target(c, "algorithm.kl_ctrl.target_kl")


def _norm_by_std(c: PPOConfig) -> bool | Lacks:
    if c.scale_rewards == "batch":
        return Lacks("verl's grpo divides by the group's std or by nothing (norm_adv_by_std_in_grpo); "
                     "reinforce_plus_plus_baseline (group mean subtracted, whitened over the batch) is the nearest")
    return c.scale_rewards == "group"


VALUES: dict[str, Callable[[PPOConfig], Any]] = {
    "reward_model_path": _reward_model,
    "value_model_path": lambda c: c.value_model_path
    or (c.reward_model_path if is_model(c.reward_model_path) else c.sft_model_path),
    "gradient_checkpointing": actor_and_critic(lambda c: c.gradient_checkpointing),
    "use_peft": lambda c: c.lora_r if c.use_peft else 0,
    "value_use_peft": lambda c: (c.lora_r, c.lora_alpha) if c.value_use_peft else (0, None),
    "value_learning_rate": lambda c: c.effective_value_learning_rate,
    "lr_scheduler_type": actor_and_critic(lambda c: c.lr_scheduler_type if c.lr_scheduler_type in SCHEDULES
                                 else Lacks(f"verl's FSDP optimizer schedules {' or '.join(SCHEDULES)} only")),
    "warmup_steps": actor_and_critic(lambda c: c.warmup_steps or None),
    "warmup_ratio": actor_and_critic(lambda c: c.warmup_ratio),
    "weight_decay": actor_and_critic(lambda c: c.weight_decay),
    "max_grad_norm": actor_and_critic(lambda c: c.max_grad_norm if c.max_grad_norm > 0
                             else Lacks("verl always clips gradients: set a large clip_grad")),
    "per_device_train_batch_size": actor_and_critic(lambda c: c.per_device_train_batch_size),
    "gradient_accumulation_steps": lambda c: rollout_batch(c) // c.generations_per_prompt,
    "num_mini_batches": _mini_batch_prompts,
    "total_episodes": updates,
    "num_train_epochs": lambda c: whole_prompt_passes(c, "trainer.total_epochs"),
    "local_rollout_forward_batch_size": lambda c: (c.local_rollout_forward_batch_size,) * 2,
    "cliprange_low": lambda c: c.clip_bounds[0],
    "cliprange_high": lambda c: c.clip_bounds[1],
    # seq-mean-token-sum-norm divides by the padded length unless loss_scale_factor fixes it: ppo-tune's constant.
    "loss_type": lambda c: (LOSS_AGG_MODES.get(c.loss_type) or Lacks(
        "verl's token-mean is over the step's tokens; bnpo's per-micro-batch mean has no loss_agg_mode"),
        c.response_length if c.loss_type == "seq_mean_token_sum_norm" else None),
    # GSPO's sequence ratio is verl's gspo loss mode; the whole response's ratio (TRL RLOO's) it has not.
    "importance_sampling_level": lambda c: {"token": None, "sequence": "gspo"}.get(c.importance_sampling_level) or
    Lacks("verl's ratios are per token (vanilla) or the response's mean (gspo)"),
    "dual_clip": lambda c: c.dual_clip if c.dual_clip is not None else Differs(
        NO_DUAL_CLIP, "verl always dual-clips (default 3.0); ppo-tune did not: a bound no ratio reaches"),
    "advantage_estimator": lambda c: ESTIMATORS.get(c.advantage_estimator) or unknown_estimator(c, "verl"),
    "num_generations": lambda c: c.generations_per_prompt,
    "scale_rewards": _norm_by_std,
    "kl_in_reward": lambda c: (c.kl_penalty_in_reward, not c.kl_penalty_in_reward),
    "kl_estimator": lambda c: KL_PENALTIES[c.kl_estimator],
    "kl_loss_estimator": lambda c: KL_PENALTIES[c.kl_loss_estimator],
    "kl_target": _kl_target,
    "kl_horizon": lambda c: c.kl_horizon if c.kl_penalty_in_reward
    else Lacks("verl's adaptive controller steers the in-reward kl_coef only"),
    "response_length": generated_length_of,
    "max_prompt_length": lambda c: (c.max_prompt_length, "left") if c.max_prompt_length is not None else (None, None),
    "stop_token": lambda c: True if c.stop_token is None and c.stop_token_id is None else None,
}

WHY_NOT: dict[str, Why] = {
    **piecewise_schedules("verl"),
    "task": TASK_WHY,
    "task_seed": TASK_WHY,
    "dataset_name": "verl reads parquet files: convert the prompts and set data.train_files (see verl's "
                    "examples/data_preprocess)",
    "dataset_config": "verl reads parquet files: convert this configuration's prompts",
    "dataset_train_split": "verl reads parquet files: convert this split",
    "reward_funcs": "verl scores with one reward manager: combine the rewards in a custom_reward_function",
    "reward_weights": "verl scores with one reward manager: weigh the rewards in a custom_reward_function",
    "model_revision": "verl loads model paths: download this revision first",
    "dtype": "verl keeps FSDP weights in fsdp_config.model_dtype (fp32) and computes in bf16",
    "bf16": lambda c: None if c.bf16 is not False else "verl computes in bf16 (FSDP mixed precision)",
    "attn_implementation": "set it in actor_rollout_ref.model.override_config",
    "use_cpu": "verl trains on GPUs",
    "lora_dropout": "verl's LoRA has no dropout setting",
    **lora_lacks("verl"),
    "adam_epsilon": "verl's AdamW takes torch's eps=1e-8 unless optim.override_optimizer_config sets one",
    "vf_coef": "verl trains the critic with its own optimizer on an unscaled value loss",
    "whiten_rewards": "verl does not whiten rewards",
    "whiten_advantages": "verl always whitens GAE's advantages",
    "stop_token_id": "verl stops at the tokenizer's EOS: set the stop token in the rollout engine's kwargs",
    "missing_eos_penalty": "verl has no missing-EOS penalty: apply it in the reward function",
    "scale_rewards_epsilon": lambda c: None if c.scale_rewards_epsilon == GRPO_STD_EPSILON
    else f"verl's grpo adds {GRPO_STD_EPSILON!r} to the group's std, fixed",
}
SAME = {"dtype": "float32", "model_revision": "main", "use_cpu": False, "dataset_train_split": "train",
        "lora_task_type": "CAUSAL_LM", "use_rslora": False, "use_dora": False, "adam_epsilon": 1e-8,
        "whiten_rewards": False, "whiten_advantages": True}
CARRIED = {
    "lora_r": "use_peft's key, lora_rank (0: full fine-tuning)",
    "cliprange": "clip_ratio_low and clip_ratio_high (the clip bounds)",
}


def _remarks(c: PPOConfig) -> list[str]:
    return [one_process_remark(c, "data.train_batch_size", "rollout.n")]


def _setting_differs(name: str, theirs: object, why: str) -> Callable[[PPOConfig], str | None]:
    """A field whose value verl cannot take: the trial's differs from verl's fixed ``theirs``."""
    def differs(c: PPOConfig) -> str | None:
        ours = getattr(c, name)
        return None if ours == theirs else f"{name}={ours!r}: {why}"
    return differs


def _gspo_differs(c: PPOConfig) -> str | None:
    """verl's gspo carries the sequence ratio's value and each token's own gradient, which sums to GSPO's when a
    response has one advantage (the group estimators); it has no dual clip."""
    if c.importance_sampling_level == "token":
        return None
    if c.importance_sampling_level == "sequence_sum":
        return "importance_sampling_level=sequence_sum: verl's ratios are per token or the response's mean (gspo)"
    if c.advantage_estimator not in ("grpo", "rloo"):
        return (f"importance_sampling_level=sequence with {c.advantage_estimator}'s per-token advantages: verl's gspo "
                "weighs each token's gradient by its own advantage, ppo-tune by the response's mean ratio")
    if c.dual_clip is not None:
        return f"dual_clip={c.dual_clip!r}: verl's gspo loss has no dual clip"
    return None


def _differences(c: PPOConfig) -> list[str]:
    checks: list[Difference] = [
        lambda c: None if c.loss_type != "bnpo" else
        "loss_type=bnpo: verl has no per-micro-batch token mean; its token-mean divides by the step's tokens",
        lambda c: None if c.loss_type != "seq_mean_token_sum_norm" or c.response_length is not None else
        "loss_type=seq_mean_token_sum_norm without response_length: verl divides by each micro-batch's padded width",
        _gspo_differs,
        lambda c: None if c.advantage_estimator != "grpo" or c.scale_rewards != "batch" else
        "scale_rewards=batch: verl's grpo divides by the group's std or nothing",
        fixed_scale_rewards_epsilon("verl's grpo", GRPO_STD_EPSILON),
        whitening_kl_in_reward_returns("verl"),
        Edge(clamped_kl("verl", ("k3",))),
    ]
    if c.uses_critic:
        checks += [_setting_differs("whiten_advantages", True, "verl always whitens GAE's advantages"),
                   _setting_differs("whiten_rewards", False, "verl does not whiten rewards")]
    return collect(c, checks)


TARGET = Target(name="verl 0.9.1", layout="hydra", keys=KEYS, values=VALUES, why_not=WHY_NOT, same=SAME,
                carried=CARRIED, remarks=_remarks, differences=_differences,
                profile={"scale_rewards_epsilon": GRPO_STD_EPSILON})


verl_overrides = rendered(TARGET)
