"""The models a run trains, each loaded in one pass: the policy (with its frozen reference) and the value network,
on the trunk :func:`value_trunk` chooses (one rule for a run and for its estimate, ``ppo_core.memory.estimate``, so
that ``--estimate`` sizes the network a run loads).

Trained weights load in float32, the master copy that bf16 autocast computes from and AdamW updates; frozen ones (the
reference, a LoRA base) in ``dtype`` (:meth:`ppo_core.models.loading.LoadOptions.trainable`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from transformers import PreTrainedModel

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.models.loading import LoadOptions, ValueModel, load_causal_lm, load_trunk
from ppo_core.models.lora import lora_config, prepare_for_training
from ppo_core.rewards.base import WeightedRewards
from ppo_core.rewards.models import SequenceClassifierReward


def policy_and_reference(config: PPOConfig, path: str,
                         options: LoadOptions) -> tuple[PreTrainedModel, PreTrainedModel | None]:
    """The trained policy and its frozen reference. Under LoRA the base is frozen in ``dtype`` and is itself the
    reference once the adapters are off (None here): one copy of the weights instead of two."""
    lora = config.use_peft
    policy = load_causal_lm(path, options if lora else options.trainable())
    reference = None if lora else load_causal_lm(path, options).requires_grad_(False)
    adapter = lora_config(config, config.lora_task_type) if lora else None
    return prepare_for_training(policy, adapter, config.gradient_checkpointing, "lora_target_modules"), reference


def value_trunk(value_model_path: str | None, reward_models: Sequence[tuple[str, str]], policy_path: str,
                reads_policy_ids: Callable[[str, str], bool]) -> tuple[str, str]:
    """(field, path) of the value trunk: ``value_model_path`` when set; else the first reward model (field, path),
    in scoring order, whose tokenizer has the policy's vocabulary (``reads_policy_ids(field, path)``); else the
    policy. A trunk on another vocabulary would read the policy's token ids as other tokens, or index past its
    embedding table; a reward model's trunk already knows what the reward looks at."""
    if value_model_path is not None:
        return "value_model_path", value_model_path
    for field_name, path in reward_models:
        if reads_policy_ids(field_name, path):
            return field_name, path
    return "sft_model_path", policy_path


def value_network(config: PPOConfig, value_model_path: str | None, rewards: WeightedRewards, policy_path: str,
                  options: LoadOptions) -> ValueModel:
    """V(s) on the trunk :func:`value_trunk` chooses among ``value_model_path`` (as it
    loads), the loaded reward models and the policy: under LoRA (unless value_use_peft is off) a frozen trunk in
    ``dtype`` with its own adapter, else a fully trained float32 trunk; the scalar head is always trained in
    float32."""
    models = {reward.path: reward for reward in rewards.rewards if isinstance(reward, SequenceClassifierReward)}
    _, trunk_path = value_trunk(value_model_path, [("reward_model_path", path) for path in models], policy_path,
                                lambda _, path: models[path].vocabulary_matches)
    lora = config.use_peft and config.value_use_peft
    trunk = load_trunk(trunk_path, options if lora else options.trainable())
    adapter = lora_config(config, None) if lora else None
    trunk = prepare_for_training(trunk, adapter, config.gradient_checkpointing, "value_use_peft")
    return ValueModel(trunk).eval()
