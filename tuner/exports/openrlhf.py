"""``--format openrlhf``: flags for OpenRLHF 0.11.2's ``python3 -m openrlhf.cli.train_ppo_ray``, in the dotted
hierarchy it moved to in 0.11 (``--algo.advantage.estimator``, ``--actor.adam.lr``, ...; the flat
``--advantage_estimator`` spellings are gone). Written against openrlhf/cli/train_ppo_ray.py,
trainer/ppo_utils/experience_maker.py (estimators, KL, whitening) and trainer/ray/ppo_actor.py of the 0.11.2 release
on PyPI.

OpenRLHF counts prompts in --rollout.batch_size (each sampled --rollout.n_samples_per_prompt times) and completions
in --train.batch_size (one optimizer step each) and the micro-batch sizes. Its one KL coefficient,
--algo.kl.init_coef, scales the KL wherever --algo.kl.use_loss puts it, and its adaptive controller steers it in both
places. Switches (store_true flags) appear alone when on and are left out when off, their default.
"""

from __future__ import annotations

import math
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
    schedule_remark,
    scheduler_with_warmup,
    stops_at_eos,
    unknown_estimator,
    updates,
    whole_prompt_passes,
)
from tuner.exports.computes import Edge, biased_whitening, clamped_kl, collect, fixed_scale_rewards_epsilon

KL_ESTIMATORS = ("k1", "k2", "k3")
GROUP_NORM_EPSILON = 1e-9  # experience_maker.py adds it to the group's std, fixed
# The estimators OpenRLHF whitens over the batch, and those it gives per-token returns of the shaped reward (the KL
# penalty on each token, the centred score on the last), forcing gamma to 1 for all but reinforce.
WHITENED = ("gae", "reinforce_pp", "reinforce_pp_baseline")
LOSS_AGG_MODES = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean"}
# ppo-tune's estimators against OpenRLHF's (experience_maker.compute_advantages_and_returns); grpo's depends on
# scale_rewards (group_norm divides by the group's std, dr_grpo only centres).
ESTIMATORS = {"gae": "gae", "rloo": "rloo", "reinforce_pp": "reinforce", "reinforce_pp_baseline": "reinforce_baseline"}

KEYS: dict[str, str | tuple[str, ...]] = {
    "sft_model_path": "actor.model_name_or_path",
    "reward_model_path": "reward.model_name_or_path",
    "value_model_path": "critic.model_name_or_path",
    "dataset_name": "data.prompt_dataset",
    "dataset_train_split": "data.prompt_split",
    "attn_implementation": "ds.attn_implementation",
    "gradient_checkpointing": "actor.gradient_checkpointing_enable",
    "use_peft": "ds.lora.rank",
    "lora_alpha": "ds.lora.alpha",
    "lora_dropout": "ds.lora.dropout",
    "lora_target_modules": "ds.lora.target_modules",
    "learning_rate": "actor.adam.lr",
    "value_learning_rate": "critic.adam.lr",
    "lr_scheduler_type": ("actor.lr_scheduler", "critic.lr_scheduler"),
    "warmup_steps": ("actor.lr_warmup_ratio", "critic.lr_warmup_ratio"),
    "weight_decay": ("actor.adam.weight_decay", "critic.adam.weight_decay"),
    "adam_epsilon": ("actor.adam.eps", "critic.adam.eps"),
    "max_grad_norm": ("actor.max_norm", "critic.max_norm"),
    "per_device_train_batch_size": "train.micro_batch_size",
    "gradient_accumulation_steps": "rollout.batch_size",
    "num_mini_batches": "train.batch_size",
    "num_ppo_epochs": "train.max_epochs",
    "total_episodes": "data.max_samples",
    "num_train_epochs": "train.num_episodes",
    "local_rollout_forward_batch_size": "rollout.micro_batch_size",
    "cliprange_low": "actor.eps_clip_low_high",
    "cliprange_value": "critic.value_clip",
    "dual_clip": "actor.dual_clip",
    "importance_sampling_level": "actor.policy_loss_type",
    "entropy_coef": "actor.entropy_coef",
    "gamma": "algo.advantage.gamma",
    "lam": "algo.advantage.lambd",
    "loss_type": "actor.loss_agg_mode",
    "advantage_estimator": "algo.advantage.estimator",
    "num_generations": "rollout.n_samples_per_prompt",
    "kl_in_reward": ("algo.kl.use_loss", "algo.kl.init_coef", "algo.kl.estimator"),
    "kl_target": "algo.kl.target",
    "kl_horizon": "algo.kl.horizon",
    "response_length": "rollout.max_new_tokens",
    "max_prompt_length": "data.max_len",
    "temperature": "rollout.temperature",
    "seed": "train.seed",
}


def _reward_model(c: PPOConfig) -> str | Lacks | None:
    if c.reward_model_path is None or is_model(c.reward_model_path):
        return c.reward_model_path
    return Lacks("OpenRLHF's --reward.remote_url takes a Python file's reward_func(queries, prompts, labels), not a "
                 "module:function with GRPOTrainer's signature: wrap it")


def _warmup(c: PPOConfig) -> float | Differs | Lacks:
    """OpenRLHF warms up over a fraction of the run (default 0.03, so 0 is said too)."""
    if not c.warmup_steps:
        return c.warmup_ratio
    count = updates(c)
    if count is None:
        return Lacks("OpenRLHF warms up over a ratio of the run (--actor.lr_warmup_ratio): divide warmup_steps by the "
                     "run's PPO updates")
    return Differs(min(1.0, c.warmup_steps / count), f"warmup_steps over the run's {count} PPO updates, as the ratio "
                                                     "OpenRLHF takes")


def _prompts(c: PPOConfig) -> Differs | None:
    """total_episodes completions as one pass over that many prompts (--train.num_episodes keeps its default, 1)."""
    if c.total_episodes is None:
        return None
    prompts = math.ceil(c.total_episodes / c.generations_per_prompt)
    return Differs(prompts, f"ppo-tune trained on total_episodes completions, {c.generations_per_prompt} per prompt: "
                            "one pass over this many prompts (if the dataset holds fewer, raise --train.num_episodes)")


def _estimator(c: PPOConfig) -> str | Differs | Lacks:
    if c.advantage_estimator != "grpo":
        return ESTIMATORS.get(c.advantage_estimator) or unknown_estimator(c, "OpenRLHF")
    if c.scale_rewards == "batch":
        return Differs("group_norm", "scale_rewards=batch: OpenRLHF's group_norm divides by the group's std; "
                                     "reinforce_baseline (group mean subtracted, whitened over the batch) is the "
                                     "nearest")
    return "group_norm" if c.scale_rewards == "group" else "dr_grpo"


def _kl(c: PPOConfig) -> tuple[Any, Any, Any]:
    estimator = c.kl_estimator if c.kl_penalty_in_reward else c.kl_loss_estimator
    lacks = Lacks(f"OpenRLHF's KL estimators are {', '.join(KL_ESTIMATORS)}")
    named = estimator if estimator in KL_ESTIMATORS else lacks
    return not c.kl_penalty_in_reward, c.kl_coefficient, named


VALUES: dict[str, Callable[[PPOConfig], Any]] = {
    "reward_model_path": _reward_model,
    "use_peft": lambda c: c.lora_r if c.use_peft else None,
    "value_learning_rate": lambda c: c.effective_value_learning_rate,
    "lr_scheduler_type": actor_and_critic(scheduler_with_warmup),
    "warmup_steps": actor_and_critic(_warmup),
    "weight_decay": actor_and_critic(lambda c: c.weight_decay),
    "adam_epsilon": actor_and_critic(lambda c: c.adam_epsilon),
    "max_grad_norm": actor_and_critic(lambda c: c.max_grad_norm),
    "gradient_accumulation_steps": lambda c: rollout_batch(c) // c.generations_per_prompt,
    "num_mini_batches": lambda c: rollout_batch(c) // c.num_mini_batches,
    "total_episodes": _prompts,
    "num_train_epochs": lambda c: whole_prompt_passes(c, "--train.num_episodes"),
    "cliprange_low": lambda c: list(c.clip_bounds),
    "importance_sampling_level": lambda c: {"token": None, "sequence": "gspo"}.get(c.importance_sampling_level) or
    Lacks("OpenRLHF's ratios are per token (ppo) or the response's mean (gspo)"),
    "entropy_coef": lambda c: c.entropy_coef or None,  # 0 would still compute the entropy (for its logs)
    "loss_type": lambda c: LOSS_AGG_MODES.get(c.loss_type) or Lacks(
        "OpenRLHF aggregates token-mean or seq-mean-token-mean only"),
    "advantage_estimator": _estimator,
    "num_generations": lambda c: c.generations_per_prompt,
    "kl_in_reward": _kl,
    "kl_target": lambda c: None if c.kl_target is None else per_token_kl_target(c, "--algo.kl.target"),
    "response_length": generated_length_of,
    "max_prompt_length": lambda c: None if c.max_prompt_length is None else (
        Differs(c.max_prompt_length + c.response_length, "OpenRLHF caps prompt and response together")
        if c.response_length is not None else Lacks("OpenRLHF caps prompt and response together (--data.max_len)")),
}

WHY_NOT: dict[str, Why] = {
    **piecewise_schedules("OpenRLHF"),
    "task": TASK_WHY,
    "task_seed": TASK_WHY,
    "dataset_config": "name the configuration in --data.prompt_dataset's path",
    "reward_funcs": "OpenRLHF sums no extra rewards: combine them in the reward model or a remote reward function",
    "reward_weights": "OpenRLHF sums no extra rewards",
    "model_revision": "OpenRLHF loads model paths: download this revision first",
    "dtype": "OpenRLHF trains in --ds.param_dtype (bf16 or fp16) under DeepSpeed",
    "bf16": lambda c: None if c.bf16 is not False else "OpenRLHF trains in bf16 or fp16 (--ds.param_dtype)",
    "trust_remote_code": "OpenRLHF has no flag for it",
    "use_cpu": "OpenRLHF trains on GPUs",
    **lora_lacks("OpenRLHF"),
    "value_use_peft": lambda c: None if c.value_use_peft
    else "--ds.lora.* put adapters on the critic as on the actor; ppo-tune trained a full value network",
    "vf_coef": "OpenRLHF trains the critic with its own optimizer on an unscaled value loss",
    "whiten_rewards": "OpenRLHF does not whiten rewards per batch (--reward.normalize_enable keeps running statistics)",
    "whiten_advantages": "OpenRLHF always whitens GAE's advantages (--algo.advantage.no_std_norm only skips the std)",
    "stop_token": stops_at_eos("OpenRLHF"),
    "stop_token_id": "OpenRLHF stops at the tokenizer's EOS",
    "missing_eos_penalty": "--reward.stop_properly_penalty_coef scales or replaces truncated responses' rewards; "
                           "ppo-tune subtracted this penalty",
    "scale_rewards_epsilon": lambda c: None if c.scale_rewards_epsilon == GROUP_NORM_EPSILON
    else f"OpenRLHF's group_norm adds {GROUP_NORM_EPSILON!r} to the group's std, fixed",
}
SAME = {"model_revision": "main", "dtype": "float32", "trust_remote_code": False, "use_cpu": False,
        "lora_task_type": "CAUSAL_LM", "use_rslora": False, "use_dora": False, "whiten_rewards": False,
        "whiten_advantages": True}
CARRIED = {
    "lora_r": "use_peft's key, --ds.lora.rank",
    "cliprange": "--actor.eps_clip_low_high (the clip bounds)",
    "cliprange_high": "--actor.eps_clip_low_high (the clip bounds)",
    "warmup_ratio": "warmup_steps' keys, --actor.lr_warmup_ratio",
    "scale_rewards": "the estimator: group_norm divides by the group's std, dr_grpo does not",
    "kl_coef": "kl_in_reward's keys: --algo.kl.init_coef, the coefficient in force",
    "beta": "kl_in_reward's keys: --algo.kl.init_coef, the coefficient in force",
    "kl_estimator": "kl_in_reward's keys: --algo.kl.estimator, the estimator in force",
    "kl_loss_estimator": "kl_in_reward's keys: --algo.kl.estimator, the estimator in force",
}


def _fixed(c: PPOConfig) -> dict[str, Any]:
    """ppo-tune's AdamW takes torch's betas; OpenRLHF's default is (0.9, 0.95)."""
    return {f"{model}.adam.betas": (0.9, 0.999) for model in ("actor", "critic")[: 2 if c.uses_critic else 1]}


def _remarks(c: PPOConfig) -> list[str]:
    return [one_process_remark(c, "--rollout.batch_size", "--rollout.n_samples_per_prompt"),
            "OpenRLHF clips rewards, after any group baseline, to --reward.clip_range (-10 10 by default); ppo-tune "
            "does not clip them",
            *schedule_remark(c, "OpenRLHF")]


def _kl_per_token_differs(c: PPOConfig) -> str | None:
    """OpenRLHF leaves the KL penalty on each token of every estimator; ppo-tune's grpo and rloo sum it into the
    response's reward before the group statistics."""
    if c.advantage_estimator not in ("grpo", "rloo") or not c.kl_penalty_in_reward or c.kl_coef == 0:
        return None
    return (f"advantage_estimator={c.advantage_estimator} with the KL in the reward: OpenRLHF centres the score "
            "alone and adds each token's remaining KL penalty (its return), ppo-tune centred the score plus the "
            "summed KL: advantages differ by up to kl_coef x the response's KL")


def _gspo_differs(c: PPOConfig) -> str | None:
    if c.importance_sampling_level == "token":
        return None
    if c.importance_sampling_level == "sequence_sum":
        return "importance_sampling_level=sequence_sum: OpenRLHF's ratios are per token or the response's mean"
    if c.loss_type != "seq_mean_token_mean":
        return (f"importance_sampling_level=sequence, loss_type={c.loss_type}: OpenRLHF's gspo averages over "
                "responses (seq-mean-token-mean), whatever --actor.loss_agg_mode says")
    return None


def _kl_and_entropy_token_means(c: PPOConfig) -> str | None:
    """OpenRLHF aggregates its KL loss and entropy terms as token means over the step whatever the policy loss's
    mode (ppo_actor.training_step)."""
    terms = [name for name, on in (("the KL loss", not c.kl_penalty_in_reward and c.beta != 0),
                                   ("the entropy bonus", c.entropy_coef != 0)) if on]
    if c.loss_type == "token_mean" or not terms:
        return None
    return (f"loss_type={c.loss_type}: OpenRLHF averages {' and '.join(terms)} over the step's tokens, ppo-tune "
            "aggregates them as the policy loss")


def _differences(c: PPOConfig) -> list[str]:
    return collect(c, [
        lambda c: None if c.loss_type in LOSS_AGG_MODES else
        f"loss_type={c.loss_type}: OpenRLHF aggregates token-mean or seq-mean-token-mean only",
        _gspo_differs,
        _kl_and_entropy_token_means,
        Edge(lambda c: None if c.advantage_estimator == "gae" else
             "rewards: OpenRLHF clips each reward at +-10 (--reward.clip_range) after the group baseline, ppo-tune "
             "not at all: the same where no centred reward passes 10"),
        lambda c: None if c.advantage_estimator != "grpo" or c.scale_rewards != "batch" else
        "scale_rewards=batch: OpenRLHF's group_norm divides by the group's std",
        fixed_scale_rewards_epsilon("OpenRLHF's group_norm", GROUP_NORM_EPSILON),
        Edge(biased_whitening("OpenRLHF", WHITENED)),
        lambda c: None if c.advantage_estimator != "reinforce_pp_baseline" or c.gamma == 1.0 else
        f"gamma={c.gamma!r}: OpenRLHF sets gamma to 1 for reinforce_baseline",
        _kl_per_token_differs,
        Edge(clamped_kl("OpenRLHF", KL_ESTIMATORS)),
        lambda c: None if not c.uses_critic or c.whiten_advantages else
        "whiten_advantages=False: OpenRLHF always whitens GAE's advantages",
        lambda c: None if not c.uses_critic or not c.whiten_rewards else
        "whiten_rewards=True: OpenRLHF does not whiten rewards per batch",
    ])


TARGET = Target(name="OpenRLHF 0.11.2", layout="openrlhf", keys=KEYS, values=VALUES, why_not=WHY_NOT, same=SAME,
                carried=CARRIED, remarks=_remarks, fixed=_fixed, differences=_differences,
                profile={"scale_rewards_epsilon": GROUP_NORM_EPSILON})


openrlhf_arguments = rendered(TARGET)
