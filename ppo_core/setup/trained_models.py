"""The models a run trains, each loaded in one pass and made ready to train
(:func:`ppo_core.models.loading.prepare_for_training`, under the LoRA adapter :func:`lora_config` reads from the
config with TRL ModelConfig's names): the policy with its frozen reference, and the value network on the trunk
:func:`value_trunk` chooses (one rule for a run and for its estimate, ``ppo_core.memory.estimate``, so that
``--estimate`` sizes the network a run loads).

Trained weights load in float32, the master copy that bf16 autocast computes from and AdamW updates; frozen ones (the
reference, a LoRA base) in ``dtype`` (:meth:`ppo_core.models.loading.LoadOptions.trainable`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from peft import LoraConfig
from transformers import PreTrainedModel

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.models.loading import LoadOptions, ValueModel, load_causal_lm, load_trunk, prepare_for_training
from ppo_core.rewards.models import SequenceClassifierReward
from ppo_core.rewards.weighted import WeightedRewards


def policy_and_reference(config: PPOConfig, path: str,
                         options: LoadOptions) -> tuple[PreTrainedModel, PreTrainedModel | None]:
    """The trained policy and its frozen reference. Under LoRA the base is frozen in ``dtype`` and is itself the
    reference once the adapters are off (None here): one copy of the weights instead of two."""
    lora = config.use_peft
    adapter = lora_config(config, config.lora_task_type) if lora else None
    policy = load_causal_lm(path, options if lora else options.trainable())
    reference = None if lora else load_causal_lm(path, options).requires_grad_(False)
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
    """V(s) on the trunk :func:`value_trunk` chooses among ``value_model_path`` (as it loads), the loaded reward
    models and the policy: under LoRA (unless value_use_peft is off) a frozen trunk in ``dtype`` with its own
    adapter, else a fully trained float32 trunk; the scalar head is always trained in float32."""
    models = {reward.path: reward for reward in rewards.rewards if isinstance(reward, SequenceClassifierReward)}
    _, trunk_path = value_trunk(value_model_path, [("reward_model_path", path) for path in models], policy_path,
                                lambda _, path: models[path].vocabulary_matches)
    lora = config.use_peft and config.value_use_peft
    adapter = lora_config(config, None) if lora else None
    trunk = load_trunk(trunk_path, options if lora else options.trainable())
    return ValueModel(prepare_for_training(trunk, adapter, config.gradient_checkpointing, "value_use_peft")).eval()


def lora_config(config: PPOConfig, task_type: str | None) -> LoraConfig:
    """peft's LoraConfig from the run's lora_* fields, as TRL's ``get_peft_config`` builds it.

    ``task_type`` is the policy's ``lora_task_type``, or None for a bare trunk (the value network's).
    """
    targets: list[str] | str | None = config.lora_target_modules
    if targets is not None and len(targets) == 1:
        targets = targets[0]  # peft reads the string "all-linear" as a keyword, a one-item list as a module name
    return LoraConfig(
        task_type=task_type, r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
        target_modules=targets, target_parameters=config.lora_target_parameters,
        modules_to_save=config.lora_modules_to_save, use_rslora=config.use_rslora, use_dora=config.use_dora,
        bias="none",
    )
