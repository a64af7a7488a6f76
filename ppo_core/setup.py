"""Resolve a config into loaded models, a reward, prompts and a stop token: everything a run reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from ppo_core.config import ConfigError, PPOConfig
from ppo_core.generation import sampling_config
from ppo_core.models import ValueModel, load_causal_lm, load_tokenizer, load_value_model
from ppo_core.prompts import read_prompts
from ppo_core.rewards import RewardFunction, SequenceClassifierReward, concatenate, load_reward
from ppo_core.tasks.base import BuiltinTask

TRL_DEFAULT_RESPONSE_LENGTH = 53


@dataclass
class RolloutModels:
    """What a rollout reads: the current policy, the frozen reference, the value network and the rewards."""

    policy: PreTrainedModel
    reference: PreTrainedModel
    value_model: ValueModel
    reward: RewardFunction
    gold_score: Callable[[list[str], list[str]], list[float]] | None
    tokenizer: PreTrainedTokenizerBase


@dataclass
class RunSetup:
    """The loaded models, the prompts, and how to sample: built once per run from its config."""

    models: RolloutModels
    train_prompts: list[str]
    eval_prompts: list[str]
    stop_token_id: int | None
    response_length: int
    generation_config: GenerationConfig

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self.models.tokenizer


def build_setup(config: PPOConfig, device: torch.device) -> RunSetup:
    """Load what ``config`` names: explicit paths first, the built-in task's parts for the rest."""
    task = None
    if config.task is not None:
        from ppo_core.tasks import get_task

        try:
            task = get_task(config.task, config.task_cache_dir)
        except ValueError as error:
            raise ConfigError(f"task: {error}") from None
    sft_path = config.sft_model_path or _task_part(task, "sft_model_path").policy_path
    reward_spec = config.reward_model_path or _task_part(task, "reward_model_path").reward_model_path
    reward_text = task.reward_text if task is not None and config.reward_model_path is None else concatenate

    tokenizer = load_tokenizer(sft_path)
    policy = load_causal_lm(sft_path)
    reference = load_causal_lm(sft_path).requires_grad_(False)
    reward = load_reward(reward_spec, config.local_rollout_forward_batch_size, reward_text)
    value_trunk = config.value_model_path or (
        reward_spec if isinstance(reward, SequenceClassifierReward) else sft_path
    )
    value_model = load_value_model(value_trunk)
    if isinstance(reward, SequenceClassifierReward):
        reward.model.requires_grad_(False)

    if config.prompts_path is not None:
        prompts = read_prompts(config.prompts_path)
        train_prompts, eval_prompts = prompts, prompts[: config.num_eval_prompts]
    else:
        train_prompts = _task_part(task, "prompts_path").train_prompts
        eval_prompts = _task_part(task, "prompts_path").eval_prompts[: config.num_eval_prompts]
    if len(train_prompts) < 1:
        raise ConfigError("prompts_path: no training prompts")

    models = RolloutModels(
        policy=policy,
        reference=reference.to(device),  # type: ignore[arg-type]  # transformers types .to() as a decorator
        value_model=value_model,
        reward=reward.to(device),
        gold_score=task.gold_score if task is not None else None,
        tokenizer=tokenizer,
    )
    stop_token_id = _stop_token_id(config, tokenizer)
    response_length = config.response_length or (task.response_length if task is not None else None) \
        or TRL_DEFAULT_RESPONSE_LENGTH
    return RunSetup(
        models=models,
        train_prompts=train_prompts,
        eval_prompts=eval_prompts,
        stop_token_id=stop_token_id,
        response_length=response_length,
        generation_config=sampling_config(response_length, config.temperature, tokenizer, stop_token_id),
    )


def _task_part(task: BuiltinTask | None, field_name: str) -> BuiltinTask:
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
