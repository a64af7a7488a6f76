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

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.config.schedules import shown_schedule
from tuner.exports._common import (
    CRITIC_FIELDS,
    LORA_FIELDS,
    SCHEDULE_FIELDS,
    TASK_WHY,
    Differs,
    Lacks,
    Target,
    Why,
    dotted,
    generated_length_of,
    is_model,
    optimizer_steps_per_update,
    rendered,
    schedule_remark,
    scheduler_with_warmup,
    stops_at_eos,
    updates,
)
from tuner.exports.computes import (
    collect,
    entropy_per_micro_batch,
    fixed_scale_rewards_epsilon,
    kl_loss_estimator_only,
    micro_batches_per_step,
    no_dual_clip,
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
# Our loss_type names against GRPOConfig's (grpo_trainer.py _compute_loss: "bnpo" is each micro-batch's token mean
# over the accumulation steps, "grpo" averages each response's tokens, then the responses, "dr_grpo" divides by
# max_completion_length). token_mean's, the step's own token count, has no exact name: see _loss_type.
LOSS_TYPES = {"bnpo": "bnpo", "seq_mean_token_mean": "grpo", "seq_mean_token_sum_norm": "dr_grpo"}
IMPORTANCE_LEVELS = ("token", "sequence")  # GRPOConfig's importance_sampling_level values; ours are named alike
GRPO_STD_EPSILON = 1e-4  # grpo_trainer.py adds it to the group's std, fixed


def _loss_type(c: PPOConfig) -> str:
    """token_mean divides each step by its own tokens. GRPOConfig's bnpo does so when a step is one micro-batch;
    its dapo divides by the rollout's tokens over its optimizer steps, the step's own when a rollout is one step."""
    if c.loss_type != "token_mean":
        return LOSS_TYPES[c.loss_type]
    return "bnpo" if micro_batches_per_step(c) == 1 else "dapo"


def _token_mean_differs(c: PPOConfig) -> str | None:
    if _loss_type(c) != "dapo" or c.num_mini_batches == 1:
        return None
    return (f"loss_type=token_mean: GRPOTrainer's dapo divides each optimizer step's token sum by the rollout's "
            f"tokens / {c.num_mini_batches} (its mean per step), ppo-tune by the step's own tokens: a step of longer "
            "responses weighs more there; tune loss_type bnpo, or one micro-batch per step, to match")


def _sequence_sum_differs(c: PPOConfig) -> str | None:
    if c.importance_sampling_level in IMPORTANCE_LEVELS:
        return None
    return ("importance_sampling_level=sequence_sum: GRPOTrainer's ratio is per token or the response's mean "
            "(sequence); the whole response's ratio is RLOOTrainer's (--format trl-rloo)")


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
    "response_length": generated_length_of,
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
               f"{ESTIMATOR_HINTS.get(c.advantage_estimator, 'no trainer export knows it yet')}"

    return why


WHY_NOT: dict[str, Why] = {
    **dict.fromkeys(SCHEDULE_FIELDS, lambda c: None),  # carried by the callback the remarks print (_schedule_callback)
    "task": TASK_WHY,
    "task_seed": TASK_WHY,
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


# Where the callback that runs a schedule in TRL's trainer lives (the trl_trial wing, above the exports: named, not
# imported; a test runs the printed line against TRL's trainer).
SCHEDULE_CALLBACK = "tuner.trl_trial.schedule_callback"
CALLBACK_REMARK = "the schedules run as a callback: "


def _schedule_callback(c: PPOConfig) -> list[str]:
    """The Python line that adds ppo-tune's schedules to a TRL trainer built from these arguments, where the config
    has one: TRL's configs take one learning rate and one beta for a run."""
    schedules = [f"{name}={shown_schedule(getattr(c, name))}" for name in SCHEDULE_FIELDS if getattr(c, name)]
    if not schedules:
        return []
    return [f"{CALLBACK_REMARK}from {SCHEDULE_CALLBACK} import ScheduleCallback; "
            f"trainer.add_callback(ScheduleCallback(trainer, {', '.join(schedules)}))  # before trainer.train()"]


def _remarks(c: PPOConfig) -> list[str]:
    return schedule_remark(c, "TRL") + _schedule_callback(c)


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


def _estimator_differs(trainer: str, own: str) -> Callable[[PPOConfig], str | None]:
    return lambda c: None if c.advantage_estimator == own else \
        f"advantage_estimator={c.advantage_estimator}: {trainer} computes {own}'s advantages"


def _kl_placement_differs(trainer: str, in_reward: bool) -> Callable[[PPOConfig], str | None]:
    def differs(c: PPOConfig) -> str | None:
        if c.kl_penalty_in_reward == in_reward or c.kl_coefficient == 0:
            return None
        where = "the reward (beta x k1 summed over the response)" if in_reward else "the loss (beta x k3)"
        return f"kl_in_reward={c.kl_penalty_in_reward}: {trainer} has KL only in {where}; exported with beta 0"
    return differs


def _grpo_differences(c: PPOConfig) -> list[str]:
    return collect(c, [_estimator_differs("GRPOTrainer", "grpo"), _kl_placement_differs("GRPOTrainer", False),
                       kl_loss_estimator_only("GRPOTrainer", ("k3",)), _token_mean_differs, _sequence_sum_differs,
                       no_dual_clip("GRPOTrainer"), fixed_scale_rewards_epsilon("GRPOTrainer", GRPO_STD_EPSILON),
                       entropy_per_micro_batch("GRPOTrainer")])


def _rloo_importance_differs(c: PPOConfig) -> str | None:
    if c.importance_sampling_level == "sequence_sum" and c.loss_type == "seq_mean_token_mean":
        return None
    return (f"importance_sampling_level={c.importance_sampling_level}, loss_type={c.loss_type}: RLOOTrainer clips "
            "the whole response's probability ratio and averages over responses (sequence_sum with "
            "seq_mean_token_mean here); its gradient at the same learning rate is several times ppo-tune's")


def _rloo_kl_estimator_differs(c: PPOConfig) -> str | None:
    if not c.kl_penalty_in_reward or c.kl_coef == 0 or c.kl_estimator == "k1":
        return None
    return f"kl_estimator={c.kl_estimator}: RLOOTrainer's reward KL is k1"


def _rloo_differences(c: PPOConfig) -> list[str]:
    return collect(c, [_estimator_differs("RLOOTrainer", "rloo"), _kl_placement_differs("RLOOTrainer", True),
                       _rloo_kl_estimator_differs, _rloo_importance_differs, no_dual_clip("RLOOTrainer"),
                       lambda c: None if c.entropy_coef == 0 else
                       f"entropy_coef={c.entropy_coef!r}: RLOOTrainer has no entropy bonus"])


def _grpo_fixed(c: PPOConfig) -> dict[str, Any]:
    """TRL multiplies the KL term by the importance ratio unless told not to; ppo-tune's is beta x k3 as is."""
    return {"use_bias_correction_kl": False} if not c.kl_penalty_in_reward and c.beta != 0 else {}


GRPO = Target(
    name=f"TRL {TRL_VERSION} GRPOConfig",
    layout="trl",
    keys={**KEYS, "loss_type": "loss_type", "scale_rewards": "scale_rewards", "entropy_coef": "entropy_coef",
          "importance_sampling_level": "importance_sampling_level"},
    values={**VALUES, "num_generations": _generations("GRPOTrainer"), "kl_in_reward": _grpo_beta,
            "loss_type": _loss_type,
            "importance_sampling_level": lambda c: c.importance_sampling_level
            if c.importance_sampling_level in IMPORTANCE_LEVELS else Lacks("GRPOTrainer's ratio is per token or "
                                                                           "the response's mean")},
    why_not={
        **WHY_NOT,
        "advantage_estimator": _estimator("GRPOTrainer", "grpo", "GRPO's group-normalised advantages"),
        "kl_loss_estimator": lambda c: None if c.kl_loss_estimator == "k3" else "GRPOTrainer's KL loss is k3",
        "dual_clip": "GRPOTrainer has no dual clip (its --delta caps the ratio for every advantage)",
        "scale_rewards_epsilon": lambda c: None if c.scale_rewards_epsilon == GRPO_STD_EPSILON
        else f"GRPOTrainer adds {GRPO_STD_EPSILON!r} to the std, fixed",
    },
    same=SAME,
    carried={**CARRIED, "beta": "beta (kl_in_reward's key)", "kl_coef": "kl_in_reward's comment",
             "kl_estimator": "kl_in_reward's comment"},
    remarks=_remarks,
    fixed=_grpo_fixed,
    differences=_grpo_differences,
)

RLOO = Target(
    name=f"TRL {TRL_VERSION} RLOOConfig",
    layout="trl",
    keys=KEYS,
    values={**VALUES, "num_generations": _generations("RLOOTrainer"), "kl_in_reward": _rloo_beta},
    why_not={
        **WHY_NOT,
        "advantage_estimator": _estimator("RLOOTrainer", "rloo", "leave-one-out advantages"),
        "loss_type": lambda c: None if c.loss_type == "seq_mean_token_mean" else
        "RLOOTrainer averages its per-response losses over the responses (seq_mean_token_mean)",
        "importance_sampling_level": lambda c: None if c.importance_sampling_level == "sequence_sum" else
        "RLOOTrainer clips the ratio of whole-response probabilities (sequence_sum)",
        "scale_rewards": "RLOOTrainer has no group scaling (--normalize_advantages whitens over the batch)",
        "scale_rewards_epsilon": "RLOOTrainer has no group scaling",
        "entropy_coef": "RLOOTrainer has no entropy bonus",
        "kl_estimator": lambda c: None if c.kl_estimator == "k1" else "RLOOTrainer's reward KL is k1",
        "dual_clip": "RLOOTrainer has no dual clip",
    },
    same={**SAME, "entropy_coef": 0.0},
    carried={**CARRIED, "kl_coef": "beta (kl_in_reward's key)", "beta": "kl_in_reward's comment",
             "kl_loss_estimator": "kl_in_reward's comment"},
    remarks=_remarks,
    differences=_rloo_differences,
    profile={"importance_sampling_level": "sequence_sum", "loss_type": "seq_mean_token_mean"},
)


grpo_arguments = rendered(GRPO)


rloo_arguments = rendered(RLOO)
