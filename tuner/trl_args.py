"""A config as command-line flags for TRL 1.12's PPOConfig, with what TRL cannot express as comments."""

from __future__ import annotations

from typing import Any

# PPOConfig fields that TRL 1.12's PPOConfig (with TrainingArguments) accepts under the same name.
TRL_FIELDS = (
    "sft_model_path", "reward_model_path", "learning_rate", "lr_scheduler_type", "warmup_ratio", "warmup_steps",
    "weight_decay", "adam_epsilon", "max_grad_norm", "per_device_train_batch_size", "gradient_accumulation_steps",
    "num_mini_batches", "num_ppo_epochs", "total_episodes", "num_train_epochs", "local_rollout_forward_batch_size",
    "cliprange", "cliprange_value", "vf_coef", "gamma", "lam", "whiten_rewards", "kl_coef", "kl_estimator",
    "response_length", "temperature", "stop_token", "stop_token_id", "missing_eos_penalty",
    "num_sample_generations", "seed", "bf16", "use_cpu", "output_dir", "report_to",
    # ScriptArguments and ModelConfig, which TRL's PPO script parses beside PPOConfig.
    "dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split",
    "model_revision", "dtype", "attn_implementation", "trust_remote_code",
)
TRL_KL_ESTIMATORS = ("k1", "k3")

WHY_NOT_IN_TRL = {
    "value_learning_rate": "TRL trains policy and value with one learning_rate",
    "kl_target": "TRL has no adaptive KL controller; use kl_coef as a fixed beta or port the controller",
    "kl_horizon": "adaptive KL controller horizon; TRL has no adaptive controller",
    "entropy_coef": "TRL has no entropy bonus",
    "whiten_advantages": "TRL always whitens advantages",
    "value_model_path": "pass the value model to PPOTrainer(value_model=...)",
    "reward_funcs": "TRL 1.12's PPOTrainer takes one reward model; combine rewards in it, or use GRPOTrainer",
    "reward_weights": "TRL 1.12's PPOTrainer takes one reward model",
    "max_prompt_length": "truncate the prompts when you build TRL's train_dataset",
    "task": "ppo-tune's built-in offline task",
}
# Values of ours that behave as TRL does, so they need no comment.
SAME_AS_TRL = {"entropy_coef": 0.0, "whiten_advantages": True}


def _flag_value(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(_flag_value(item) for item in value)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def trl_arguments(config: dict[str, Any]) -> str:
    """Flags (one per line, shell-continued) plus ``#`` comments for what TRL lacks."""
    flags, comments = [], []
    for name in TRL_FIELDS:
        value = config.get(name)
        if value is None:
            continue
        if name == "kl_estimator" and value not in TRL_KL_ESTIMATORS:
            comments.append(f"# kl_estimator={value}: TRL 1.12 accepts only k1 or k3")
            continue
        if name == "lr_scheduler_type" and value == "constant":
            value = "constant_with_warmup" if (config.get("warmup_steps") or config.get("warmup_ratio")) else "constant"
        flags.append(f"--{name} {_flag_value(value)}")
    for name, why in WHY_NOT_IN_TRL.items():
        value = config.get(name)
        if value is None or SAME_AS_TRL.get(name, object()) == value:
            continue
        if name == "kl_horizon" and config.get("kl_target") is None:
            continue
        comments.append(f"# {name}={_flag_value(value)}: {why}")
    if config.get("response_length") is None:
        comments.append("# response_length: the built-in task's own length was used; TRL would default to 53")
    if (config.get("num_mini_batches") or 1) > 1:
        comments.append("# num_mini_batches > 1: TRL 1.12 counts gradient accumulation across mini-batch boundaries "
                        "and takes fewer optimizer steps than ppo-tune did (benchmarks/README.md)")
    if (config.get("max_grad_norm") or 0) > 0:
        comments.append("# max_grad_norm: TRL 1.12's PPO loop does not clip gradients")
    if config.get("task") is not None and config.get("sft_model_path") is None:
        comments.append("# sft_model_path / reward_model_path: the built-in task's models (ppo-tune's cache)")
    return " \\\n".join(flags) + ("\n" + "\n".join(comments) if comments else "") + "\n"
