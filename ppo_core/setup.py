"""Resolve a config into loaded models, a reward, prompts and a stop token: everything a run reads."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from ppo_core.config import ConfigError, PPOConfig
from ppo_core.models import load_causal_lm, load_tokenizer, load_value_model
from ppo_core.prompts import read_prompts
from ppo_core.rewards import SequenceClassifierReward, concatenate, load_reward
from ppo_core.rollout import RolloutModels


@dataclass
class RunSetup:
    models: RolloutModels
    train_prompts: list[str]
    eval_prompts: list[str]
    stop_token_id: int | None
    default_response_length: int | None

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
    sft_path = config.sft_model_path or task.policy_path  # type: ignore[union-attr]
    reward_spec = config.reward_model_path or task.reward_model_path  # type: ignore[union-attr]
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
        train_prompts = task.train_prompts  # type: ignore[union-attr]
        eval_prompts = task.eval_prompts[: config.num_eval_prompts]  # type: ignore[union-attr]
    if len(train_prompts) < 1:
        raise ConfigError("prompts_path: no training prompts")

    models = RolloutModels(
        policy=policy,
        reference=reference.to(device),
        value_model=value_model,
        reward=reward.to(device),
        gold_score=task.gold_score if task is not None else None,
        tokenizer=tokenizer,
    )
    return RunSetup(
        models=models,
        train_prompts=train_prompts,
        eval_prompts=eval_prompts,
        stop_token_id=_stop_token_id(config, tokenizer),
        default_response_length=task.response_length if task is not None else None,
    )


def _stop_token_id(config: PPOConfig, tokenizer: PreTrainedTokenizerBase) -> int | None:
    if config.stop_token == "eos":
        if tokenizer.eos_token_id is None:
            raise ConfigError("stop_token: the tokenizer has no EOS token; set stop_token_id instead")
        return int(tokenizer.eos_token_id)
    return config.stop_token_id
