"""A config turned into everything a run reads, each part loaded once: where every model comes from
(:func:`run_sources`, settled before anything loads), then the tokenizer, prompts, rewards, judges and how to sample
(:func:`load_run_parts`), then the trained models (:mod:`ppo_core.setup.trained_models`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase, TrainerState

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.metric_names import reward_name
from ppo_core.models.generation import sampling_config, stop_id
from ppo_core.models.loading import LoadOptions, ValueModel, load_tokenizer
from ppo_core.models.lora import adapters_disabled
from ppo_core.models.paths import resolve_models
from ppo_core.models.prompt_data import PromptSet, prompt_sets
from ppo_core.rewards.judges import Judges, load_judges
from ppo_core.rewards.weighted import WeightedRewards, load_rewards
from ppo_core.setup.reported_metrics import judge_names, reward_names
from ppo_core.setup.trained_models import policy_and_reference, value_network
from ppo_core.tasks.builtin_task import BuiltinTask
from ppo_core.tasks.variants import generated_length


@dataclass(frozen=True)
class RunSources:
    """Where each of a run's parts comes from, settled once before anything loads: the config's own, else its
    built-in task's."""

    config: PPOConfig  # every model path as it loads: checked, and a GGUF its dequantised copy (resolve_models)
    task: BuiltinTask | None
    policy_path: str  # the policy's and its tokenizer's: sft_model_path, else the task's
    reward_specs: list[tuple[str, str]]  # (field, spec as it loads) of each reward: the named ones, else the task's
    # The rewards' and the named judges' metric names, which the specs as the user wrote them give (a GGUF keeps
    # its file's name, not its cache directory's); the task's reward model is named by its directory.
    reward_names: list[str]
    judge_names: list[str]
    reward_text: Callable[[str, str], str] | None  # what the task's reward model reads instead of the episode
    task_prompts: tuple[list[str], list[str]] | None  # the task's training and held-out prompts; None: the dataset's


def run_sources(config: PPOConfig) -> RunSources:
    """Check every model path ``config`` names and dequantise its GGUFs (:func:`resolve_models`), build its task
    (:func:`load_task`), and take from the task what the config leaves unset: what every role's loader then reads,
    with no path checked twice."""
    resolved = resolve_models(config)
    task = load_task(config)
    policy_path = resolved.sft_model_path or task_part(task, "sft_model_path").policy_path
    reward_specs, reward_text = resolved.named_rewards, None
    if not reward_specs:  # the task's proxy reward model, on the text it was trained on
        task_reward = task_part(task, "reward_model_path")
        reward_specs, reward_text = [("reward_model_path", task_reward.reward_model_path)], task_reward.reward_text
    prompts = task_prompts(config, task)
    # The task's reward model is named by its directory, as any model reward is.
    names = reward_names(config) if resolved.named_rewards else [reward_name(reward_specs[0][1], is_function=False)]
    return RunSources(resolved, task, policy_path, reward_specs, names, judge_names(config), reward_text, prompts)


def task_prompts(config: PPOConfig, task: BuiltinTask | None) -> tuple[list[str], list[str]] | None:
    """The task's training and held-out prompts where the config names no dataset; None where it names one."""
    if config.dataset_name is not None:
        return None
    prompts = task_part(task, "dataset_name")
    return prompts.train_prompts, prompts.eval_prompts


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


def build_setup(config: PPOConfig, sources: RunSources, device: torch.device) -> RunSetup:
    """Load what ``config`` names from ``sources``: its run parts (:func:`load_run_parts`), the policy and its
    reference, and the value network where the estimator reads one."""
    parts = load_run_parts(config, sources, device)
    policy, reference = policy_and_reference(config, parts.policy_path, parts.options)
    # Only GAE reads values: the critic-free estimators never load, hold or step a value network.
    value_model = value_network(config, sources.config.value_model_path, parts.rewards, parts.policy_path,
                                parts.options) if config.uses_critic else None
    return parts.setup(RolloutModels(
        policy=policy,
        reference=reference.to(device) if reference is not None else None,  # type: ignore[arg-type]
        value_model=value_model,
        rewards=parts.rewards,
        gold_score=parts.gold_score,
        tokenizer=parts.tokenizer,
    ))


def load_run_parts(config: PPOConfig, sources: RunSources, device: torch.device) -> RunParts:
    """Load what ``config`` names besides the trained models, from where ``sources`` (:func:`run_sources`) says each
    part comes from."""
    task = sources.task
    options = LoadOptions.from_config(config)
    # The response length: the config's, else the task's, else TRL's default (the rule's one home).
    response_length = generated_length(config.response_length, config.task if task is not None else None,
                                       config.task_seed)
    tokenizer = load_tokenizer(sources.policy_path, options)
    stop_token_id = stop_id(config.stop_token, config.stop_token_id, tokenizer)
    generation_config = sampling_config(response_length, config.temperature, tokenizer, stop_token_id)
    train_prompts, eval_prompts = prompt_sets(config, sources.task_prompts, tokenizer)
    rewards = WeightedRewards(load_rewards(sources.reward_specs, sources.reward_names, options,
                                           config.local_rollout_forward_batch_size, tokenizer, sources.reward_text),
                              config.reward_weights).to(device)
    judges = load_judges(sources.config, task.gold_score if task is not None else None, options, tokenizer,
                         sources.judge_names)
    if judges is not None and judges.pointwise is not None:
        judges.pointwise.to(device)
    return RunParts(
        config=sources.config, task=task, options=options, policy_path=sources.policy_path, tokenizer=tokenizer,
        rewards=rewards, train_prompts=train_prompts, eval_prompts=eval_prompts,
        stop_token_id=stop_token_id, generation_config=generation_config, judges=judges,
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


def task_part(task: BuiltinTask | None, field_name: str) -> BuiltinTask:
    """The task that supplies what ``field_name`` leaves unset (PPOConfig requires the field when task is null)."""
    if task is None:
        raise ConfigError(f"{field_name}: required when task is null")
    return task
