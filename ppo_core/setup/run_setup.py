"""Resolve a config into loaded models, a reward, prompts and a stop token: everything a run reads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase, TrainerState

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.models.generation import sampling_config
from ppo_core.models.loading import (
    LoadOptions,
    ValueModel,
    enable_gradient_checkpointing,
    load_causal_lm,
    load_tokenizer,
    load_trunk,
    without_dropout,
)
from ppo_core.models.lora import adapters_disabled, add_adapter
from ppo_core.models.paths import is_function_spec, resolve_models
from ppo_core.models.prompt_data import PromptSet, load_prompt_sets, text_prompts
from ppo_core.models.value_trunk import value_trunk
from ppo_core.rewards.base import Reward, WeightedRewards
from ppo_core.rewards.functions import FunctionReward
from ppo_core.rewards.judges import Judges, load_judges
from ppo_core.rewards.models import SequenceClassifierReward
from ppo_core.setup.reported_metrics import judge_names, reward_names
from ppo_core.tasks.builtin_task import BuiltinTask
from ppo_core.tasks.variants import generated_length


@dataclass
class RolloutModels:
    """What a rollout reads: the current policy, the frozen reference, the value network and the rewards."""

    policy: PreTrainedModel  # or a peft model with the policy's LoRA adapter
    reference: PreTrainedModel | None  # None: the LoRA policy with its adapters switched off
    value_model: ValueModel | None  # None: a critic-free estimator, which builds no value network
    rewards: WeightedRewards
    gold_score: Callable[[list[str], list[str]], list[float]] | None
    tokenizer: PreTrainedTokenizerBase

    @contextmanager
    def reference_policy(self) -> Iterator[PreTrainedModel]:
        """The frozen reference: its own copy, or under LoRA the shared base with the adapters off."""
        if self.reference is not None:
            yield self.reference
        else:
            with adapters_disabled(self.policy) as reference:
                yield reference


@dataclass
class RunSetup:
    """The loaded models, the prompts, and how to sample: built once per run from its config."""

    models: RolloutModels
    train_prompts: PromptSet
    eval_prompts: PromptSet
    stop_token_id: int | None
    generation_config: GenerationConfig  # its max_new_tokens is the response length
    policy_path: str  # where the policy and its tokenizer came from
    judges: Judges | None = None  # what scores the held-out evaluations, and nothing else
    # The run's progress that every reward and judge function is handed (ppo_core.rewards.functions); the trainer
    # keeps it. None outside a run.
    trainer_state: TrainerState | None = None

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self.models.tokenizer


@dataclass
class RunParts:
    """What a run reads besides the models it trains: the task, tokenizer, rewards, prompts and how to sample.
    A ppo_core run adds its policy, reference and value network (:func:`build_setup`); a TRL trial hands the policy's
    path to TRL's trainer instead (``tuner.trl_trial``)."""

    config: PPOConfig  # with every model path as it loads (resolve_models)
    task: BuiltinTask | None
    options: LoadOptions
    policy_path: str
    tokenizer: PreTrainedTokenizerBase
    rewards: WeightedRewards
    train_prompts: PromptSet
    eval_prompts: PromptSet
    stop_token_id: int | None
    generation_config: GenerationConfig
    judges: Judges | None

    @property
    def gold_score(self) -> Callable[[list[str], list[str]], list[float]] | None:
        return self.task.gold_score if self.task is not None else None

    def setup(self, models: RolloutModels, trainer_state: TrainerState | None = None) -> RunSetup:
        return RunSetup(models=models, train_prompts=self.train_prompts, eval_prompts=self.eval_prompts,
                        stop_token_id=self.stop_token_id, generation_config=self.generation_config,
                        policy_path=self.policy_path, judges=self.judges, trainer_state=trainer_state)


def build_setup(config: PPOConfig, device: torch.device) -> RunSetup:
    """Load what ``config`` names: its run parts (:func:`load_run_parts`), the policy and its reference, and the
    value network where the estimator reads one."""
    parts = load_run_parts(config, device)
    policy, reference = _policy_and_reference(config, parts.policy_path, parts.options)
    # Only GAE reads values: the critic-free estimators never load, hold or step a value network.
    value_model = _value_model(config, _value_trunk_path(parts.config, parts.rewards, parts.policy_path),
                               parts.options) if config.uses_critic else None
    return parts.setup(RolloutModels(
        policy=policy,
        reference=reference.to(device) if reference is not None else None,  # type: ignore[arg-type]
        value_model=value_model,
        rewards=parts.rewards,
        gold_score=parts.gold_score,
        tokenizer=parts.tokenizer,
    ))


def load_run_parts(config: PPOConfig, device: torch.device) -> RunParts:
    """Load what ``config`` names besides the trained models: explicit paths first, the built-in task's for the
    rest."""
    resolved = resolve_models(config)  # the model paths as they load; names and everything else come from config
    task = load_task(config)
    options = LoadOptions.from_config(config)
    sft_path = resolved.sft_model_path or task_part(task, "sft_model_path").policy_path
    tokenizer = load_tokenizer(sft_path, options)
    train_prompts, eval_prompts = prompt_sets(config, task, tokenizer)
    rewards = _load_rewards(resolved, task, options, tokenizer, reward_names(config))
    stop_token_id = _stop_token_id(config, tokenizer)
    judges = load_judges(resolved, task.gold_score if task is not None else None, options, tokenizer,
                         judge_names(config))
    if judges is not None and judges.pointwise is not None:
        judges.pointwise.to(device)
    return RunParts(
        config=resolved, task=task, options=options, policy_path=sft_path, tokenizer=tokenizer,
        rewards=rewards.to(device), train_prompts=train_prompts, eval_prompts=eval_prompts,
        stop_token_id=stop_token_id, judges=judges,
        generation_config=sampling_config(response_length(config, task), config.temperature, tokenizer,
                                          stop_token_id),
    )


def load_task(config: PPOConfig) -> BuiltinTask | None:
    """The config's built-in task, or None when ``task`` is null (building it may train tiny models once)."""
    if config.task is None:
        return None
    from ppo_core.tasks import get_task

    try:
        return get_task(config.task, config.task_cache_dir, config.task_seed)
    except ValueError as error:
        raise ConfigError(f"task: {error}") from None


def prompt_sets(config: PPOConfig, task: BuiltinTask | None,
                tokenizer: PreTrainedTokenizerBase) -> tuple[PromptSet, PromptSet]:
    """The training and evaluation prompts: the dataset's when the config names one, else the task's."""
    if config.dataset_name is not None:
        return load_prompt_sets(config, tokenizer)
    task_prompts = task_part(task, "dataset_name")
    return (text_prompts(task_prompts.train_prompts),
            text_prompts(task_prompts.eval_prompts[: config.num_eval_prompts]))


def response_length(config: PPOConfig, task: BuiltinTask | None) -> int:
    """Tokens generated per response: the config's, else the task's, else TRL's default
    (:func:`ppo_core.tasks.variants.generated_length`, the rule's one home)."""
    return generated_length(config.response_length, config.task if task is not None else None, config.task_seed)


def _policy_and_reference(config: PPOConfig, path: str,
                          options: LoadOptions) -> tuple[PreTrainedModel, PreTrainedModel | None]:
    """The trained policy and its frozen reference. Under LoRA the base is frozen in ``dtype`` and is itself the
    reference once the adapters are off: one copy of the weights instead of two."""
    if config.use_peft:
        base = load_causal_lm(path, options)
        if config.gradient_checkpointing:
            enable_gradient_checkpointing(base)
        policy = add_adapter(base, config, config.lora_task_type, "lora_target_modules")
        return without_dropout(policy), None
    policy = without_dropout(load_causal_lm(path, options.trainable()))
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
    return policy, load_causal_lm(path, options).requires_grad_(False)


def _value_model(config: PPOConfig, trunk_path: str, options: LoadOptions) -> ValueModel:
    """V(s) on ``trunk_path``: under LoRA (unless value_use_peft is off) a frozen trunk in ``dtype`` with its own
    adapter, else a fully trained float32 trunk; the scalar head is always trained in float32."""
    lora = config.use_peft and config.value_use_peft
    trunk = load_trunk(trunk_path, options if lora else options.trainable())
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(trunk)
    if lora:
        trunk = add_adapter(trunk, config, None, "value_use_peft")
    return ValueModel(without_dropout(trunk)).eval()


def _load_rewards(config: PPOConfig, task: BuiltinTask | None, options: LoadOptions,
                  tokenizer: PreTrainedTokenizerBase, names: list[str]) -> WeightedRewards:
    """The rewards the config names, in order, or the task's proxy reward model on the text it was trained on.
    ``names`` are the rewards' metric names, which the specs as the user wrote them give (a GGUF reward keeps its
    file's name, not its cache directory's)."""
    batch_size = config.local_rollout_forward_batch_size
    if not config.named_rewards:
        task_reward = task_part(task, "reward_model_path")
        model = SequenceClassifierReward(task_reward.reward_model_path, options, batch_size, tokenizer,
                                         reward_text=task_reward.reward_text)
        return WeightedRewards([model], config.reward_weights)
    rewards: list[Reward] = [
        FunctionReward(spec, field) if is_function_spec(spec)
        else SequenceClassifierReward(spec, options, batch_size, tokenizer)
        for field, spec in config.named_rewards
    ]
    for reward, name in zip(rewards, names, strict=True):
        reward.name = name  # distinct: two rewards of one name would share one metric
    return WeightedRewards(rewards, config.reward_weights)


def _value_trunk_path(config: PPOConfig, rewards: WeightedRewards, sft_path: str) -> str:
    """The value trunk :func:`ppo_core.models.value_trunk.value_trunk` chooses among the loaded reward models."""
    models = {reward.path: reward for reward in rewards.rewards if isinstance(reward, SequenceClassifierReward)}
    return value_trunk(config.value_model_path, [("reward_model_path", path) for path in models], sft_path,
                       lambda _, path: models[path].vocabulary_matches)[1]


def task_part(task: BuiltinTask | None, field_name: str) -> BuiltinTask:
    """The task that supplies what ``field_name`` leaves unset (PPOConfig requires the field when task is null)."""
    if task is None:
        raise ConfigError(f"{field_name}: required when task is null")
    return task


def _stop_token_id(config: PPOConfig, tokenizer: PreTrainedTokenizerBase) -> int | None:
    if config.stop_token == "eos":
        if tokenizer.eos_token_id is None:
            raise ConfigError("stop_token: the tokenizer has no EOS token; set stop_token_id instead")
        return int(tokenizer.eos_token_id)
    return config.stop_token_id
