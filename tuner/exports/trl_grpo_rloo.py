"""``--format trl-grpo`` and ``--format trl-rloo``: flags for TRL 1.16.0's ``GRPOConfig`` and ``RLOOConfig`` with the
``ScriptArguments`` (with ``reward_model_name_or_path`` and ``reward_funcs``) and ``ModelConfig`` that ``trl grpo`` /
``trl rloo`` parse beside them, under transformers 5 (written against trl/trainer/grpo_config.py, rloo_config.py,
grpo_trainer.py, rloo_trainer.py and trl/scripts/grpo.py, rloo.py of the 1.16.0 release; the tests parse the export
with those classes).

The batch: ppo-tune's rollout batch of per_device_train_batch_size x gradient_accumulation_steps completions per
process is one generation, split into num_mini_batches mini-batches (one optimizer step each), num_ppo_epochs times.
TRL's ``steps_per_generation`` counts micro-steps (forward/backward passes of per_device_train_batch_size completions)
per generation, so it is our gradient_accumulation_steps; its ``gradient_accumulation_steps`` counts micro-steps per
optimizer step, our gradient_accumulation_steps / num_mini_batches; ``num_iterations`` is num_ppo_epochs. Then
generation_batch_size = per_device x processes x steps_per_generation is our rollout batch, and each generation
feeds num_mini_batches x num_ppo_epochs optimizer steps, as ours did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ppo_core.config import PPOConfig
from tuner.exports._common import (
    CRITIC_FIELDS,
    LORA_FIELDS,
    TASK_WHY,
    Differs,
    Lacks,
    Target,
    Why,
    dotted,
    export,
    is_model,
    optimizer_steps_per_update,
    schedule_remark,
    scheduler_with_warmup,
    stops_at_eos,
    updates,
)

TRL_VERSION = "1.16.0"

SAME_NAMES = (
    "learning_rate", "weight_decay", "adam_epsilon", "max_grad_norm", "per_device_train_batch_size", "seed", "bf16",
    "use_cpu", "gradient_checkpointing", "temperature", "output_dir", "report_to", "reward_weights",
    "trust_remote_code", "dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split",
    "model_revision", "dtype", "attn_implementation", "use_peft", *LORA_FIELDS,
)
KEYS = {
    **{name: name for name in SAME_NAMES},
    "sft_model_path": "model_name_or_path",
    "reward_model_path": "reward_model_name_or_path",
    "reward_funcs": "reward_funcs",
    "lr_scheduler_type": "lr_scheduler_type",
    "warmup_steps": "warmup_steps",
    "gradient_accumulation_steps": "steps_per_generation",
    "num_mini_batches": "gradient_accumulation_steps",
    "num_ppo_epochs": "num_iterations",
    "total_episodes": "max_steps",
    "num_train_epochs": "num_train_epochs",
    "num_generations": "num_generations",
    "cliprange_low": "epsilon",
    "cliprange_high": "epsilon_high",
    "response_length": "max_completion_length",
    "kl_in_reward": "beta",
}
# Our loss_type names against GRPOConfig's (grpo_trainer.py: "grpo" averages each response's tokens, then the
# responses; "dr_grpo" divides by max_completion_length; "dapo" by the tokens of the accumulated batch).
LOSS_TYPES = {"token_mean": "dapo", "seq_mean_token_mean": "grpo", "seq_mean_token_sum_norm": "dr_grpo"}


def _reward_funcs(c: PPOConfig) -> list[str] | Lacks | None:
    """The script's --reward_funcs: dotted import paths, scored after its one reward model, as ppo-tune orders them."""
    if any(is_model(spec) for spec in c.reward_funcs or []):
        return Lacks("trl's scripts load one reward model (reward_model_name_or_path): pass the others to the "
                     "trainer's reward_funcs yourself, in this order")
    functions = [spec for _, spec in c.named_rewards if not is_model(spec)]
    return [dotted(spec) for spec in functions] or None


def _max_steps(c: PPOConfig) -> Differs | None:
    count = updates(c)
    if count is None:
        return None
    return Differs(count * optimizer_steps_per_update(c),
                   f"optimizer steps of a one-process run: {count} PPO updates x {c.num_mini_batches} mini-batches x "
                   f"{c.num_ppo_epochs} epochs (divide by the processes you launch)")


def _generations(trainer: str) -> Callable[[PPOConfig], int | Lacks]:
    def generations(c: PPOConfig) -> int | Lacks:
        if c.generations_per_prompt >= 2:
            return c.generations_per_prompt
        return Lacks(f"{trainer} needs at least 2 responses per prompt; this trial sampled one")

    return generations


VALUES: dict[str, Callable[[PPOConfig], Any]] = {
    "reward_model_path": lambda c: c.reward_model_path if is_model(c.reward_model_path) else None,
    "reward_funcs": _reward_funcs,
    "lr_scheduler_type": scheduler_with_warmup,
    # Our warmup counts PPO updates, TRL's optimizer steps; transformers 5 takes a ratio as a fraction below 1.
    "warmup_steps": lambda c: c.warmup_ratio if c.warmup_ratio and not c.warmup_steps
    else c.warmup_steps * optimizer_steps_per_update(c),
    "num_mini_batches": lambda c: c.gradient_accumulation_steps // c.num_mini_batches,
    "total_episodes": _max_steps,
    "cliprange_low": lambda c: c.clip_bounds[0],
    "cliprange_high": lambda c: c.clip_bounds[1],
    "response_length": lambda c: c.response_length if c.response_length is not None
    else Lacks("ppo-tune used the built-in task's own length; TRL's default is 512"),
}

ESTIMATOR_HINTS = {
    "gae": "a value network: see --format trl-ppo (TRL 1.12), verl or openrlhf",
    "grpo": "see --format trl-grpo",
    "rloo": "see --format trl-rloo",
    "reinforce_pp": "REINFORCE++ whitens returns over the batch: see --format verl or openrlhf",
    "reinforce_pp_baseline": "REINFORCE++-baseline: GRPO with --scale_rewards batch is the nearest; see --format "
                             "verl or openrlhf",
}


def _estimator(trainer: str, own: str, what: str) -> Why:
    def why(c: PPOConfig) -> str | None:
        if c.advantage_estimator == own:
            return None
        return f"{trainer} computes {what}; this trial used {c.advantage_estimator}: " \
               f"{ESTIMATOR_HINTS[c.advantage_estimator]}"

    return why


WHY_NOT: dict[str, Why] = {
    "task": TASK_WHY,
    "max_prompt_length": "truncate the prompts when you build the dataset",
    **dict.fromkeys(CRITIC_FIELDS, "TRL's GRPO and RLOO train no value network"),
    "gamma": "one reward per response, undiscounted",
    "whiten_rewards": "TRL does not whiten rewards",
    "stop_token": stops_at_eos("TRL"),
    "stop_token_id": "TRL stops at the tokenizer's EOS: set eos_token_id in --generation_kwargs",
    "missing_eos_penalty": "TRL has no missing-EOS penalty (--mask_truncated_completions drops such responses from "
                           "the loss instead)",
    "kl_target": "TRL has no adaptive KL controller: beta stays fixed",
    "kl_horizon": "TRL has no adaptive KL controller",
}
SAME = {"gamma": 1.0, "whiten_rewards": False}
CARRIED = {
    "cliprange": "epsilon and epsilon_high (the clip bounds)",
    "warmup_ratio": "warmup_steps: transformers 5 takes a ratio as a fractional warmup_steps",
}


def _remarks(c: PPOConfig) -> list[str]:
    return schedule_remark(c, "TRL")


def _grpo_beta(c: PPOConfig) -> float | Differs:
    if not c.kl_penalty_in_reward:
        return c.beta
    return Differs(0.0, f"GRPOTrainer has KL only as a loss term (beta x k3); ppo-tune subtracted kl_coef="
                        f"{c.kl_coef!r} x kl_estimator={c.kl_estimator} KL from each token's reward: set --beta for "
                        "a KL loss")


def _rloo_beta(c: PPOConfig) -> float | Differs:
    if c.kl_penalty_in_reward:
        return c.kl_coef
    return Differs(0.0, f"RLOOTrainer penalises the reward only (beta x k1 KL summed over the response); ppo-tune "
                        f"added beta={c.beta!r} x kl_loss_estimator={c.kl_loss_estimator} KL to the loss: set --beta "
                        "to penalise the reward instead")


GRPO = Target(
    name=f"TRL {TRL_VERSION} GRPOConfig",
    layout="trl",
    keys={**KEYS, "loss_type": "loss_type", "scale_rewards": "scale_rewards", "entropy_coef": "entropy_coef"},
    values={**VALUES, "num_generations": _generations("GRPOTrainer"), "kl_in_reward": _grpo_beta,
            "loss_type": lambda c: LOSS_TYPES[c.loss_type]},
    why_not={
        **WHY_NOT,
        "advantage_estimator": _estimator("GRPOTrainer", "grpo", "GRPO's group-normalised advantages"),
        "kl_loss_estimator": lambda c: None if c.kl_loss_estimator == "k3" else "GRPOTrainer's KL loss is k3",
    },
    same=SAME,
    carried={**CARRIED, "beta": "beta (kl_in_reward's key)", "kl_coef": "kl_in_reward's comment",
             "kl_estimator": "kl_in_reward's comment"},
    remarks=_remarks,
)

RLOO = Target(
    name=f"TRL {TRL_VERSION} RLOOConfig",
    layout="trl",
    keys=KEYS,
    values={**VALUES, "num_generations": _generations("RLOOTrainer"), "kl_in_reward": _rloo_beta},
    why_not={
        **WHY_NOT,
        "advantage_estimator": _estimator("RLOOTrainer", "rloo", "leave-one-out advantages"),
        "loss_type": "RLOOTrainer clips the ratio of whole-response probabilities and averages over responses: no "
                     "per-token loss to aggregate",
        "scale_rewards": "RLOOTrainer has no group scaling (--normalize_advantages whitens over the batch)",
        "entropy_coef": "RLOOTrainer has no entropy bonus",
        "kl_estimator": lambda c: None if c.kl_estimator == "k1" else "RLOOTrainer's reward KL is k1",
    },
    same={**SAME, "entropy_coef": 0.0},
    carried={**CARRIED, "kl_coef": "beta (kl_in_reward's key)", "beta": "kl_in_reward's comment",
             "kl_loss_estimator": "kl_in_reward's comment"},
    remarks=_remarks,
)


def grpo_arguments(config: dict[str, Any]) -> str:
    return export(GRPO, config).render(GRPO.layout)


def rloo_arguments(config: dict[str, Any]) -> str:
    return export(RLOO, config).render(RLOO.layout)
