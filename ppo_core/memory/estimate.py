"""``ppo-tune train CONFIG --estimate``: a run's parameters, memory per device and tokens per update, before any
weights load, so a config can be checked before a GPU is rented.

Each model is built from its ``config.json`` on PyTorch's meta device (shapes, no storage), LoRA adapters are added
there by peft, and the parameters are counted exactly. Only tokenizers and prompts load: to match vocabularies and to
measure the prompts. The models are laid out as a run lays them out (``ppo_core.setup.run_setup``):

* policy: every weight trained in float32; with ``use_peft`` the base is frozen in ``dtype`` and the adapter trains.
* reference: a frozen copy of the policy in ``dtype``; with ``use_peft`` the policy with its adapters off (0 bytes).
* reward models: frozen in ``dtype``; ``module:function`` rewards hold no model.
* value network: a trunk (``AutoModel``) plus a float32 ``hidden -> 1`` head; the trunk trains in float32, or with
  ``use_peft`` and ``value_use_peft`` is frozen in ``dtype`` under its own LoRA adapter.

Bytes count the tensors a run allocates on one device, not the CUDA context (about 0.5-1 GiB) or allocator slack.

Example::

    estimate = estimate_run(PPOConfig(task=None, sft_model_path="Qwen/Qwen2.5-0.5B", ...))
    print(estimate.peak_bytes / 2**30, "GiB")
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from ppo_core.algorithm.update import forward_group
from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.errors import first_line
from ppo_core.memory.sizes import (
    Shape,
    kv_cache_bytes,
    rollout_logits_bytes,
    trunk_activation_bytes,
    update_logits_bytes,
    weight_bytes,
)
from ppo_core.models.loading import LoadOptions, add_adapter, load_tokenizer
from ppo_core.models.lora import ParameterCount, count_parameters
from ppo_core.models.paths import is_function_spec, require_model, resolve_models
from ppo_core.models.prompt_data import PromptSet, prompt_sets
from ppo_core.rewards.models import same_vocabulary
from ppo_core.rollout.collect import encode_prompts
from ppo_core.setup.run_setup import load_task, task_part, task_prompts
from ppo_core.setup.trained_models import lora_config, value_trunk
from ppo_core.tasks.builtin_task import BuiltinTask
from ppo_core.tasks.variants import generated_length


@dataclass(frozen=True)
class ModelEstimate:
    """One network of the run: where it comes from, its parameters and the bytes they hold."""

    role: str  # policy, reference, reward or value
    path: str
    trainable: int  # float32, with a gradient and AdamW's moments
    frozen: int  # held in frozen_dtype, no gradient
    frozen_dtype: str
    note: str = ""

    @property
    def total(self) -> int:
        return self.trainable + self.frozen

    @property
    def memory_bytes(self) -> int:
        return weight_bytes(self.trainable, self.frozen, self.frozen_dtype)


@dataclass(frozen=True)
class TokenEstimate:
    """Episodes and tokens of one PPO update; responses counted at their full length (none stops early)."""

    batch_size: int  # episodes per update, over every process
    prompt_tokens_max: int
    prompt_tokens_mean: float
    response_length: int
    prompts_measured: bool  # False: max_prompt_length stands in for every prompt

    @property
    def sequence_length(self) -> int:
        """s = Q_max + R: a batch pads its prompts to the longest."""
        return self.prompt_tokens_max + self.response_length

    @property
    def tokens_per_update(self) -> int:
        """B·(Q_max + R), padding included."""
        return self.batch_size * self.sequence_length

    @property
    def mean_tokens_per_update(self) -> float:
        """B·(Q_mean + R)."""
        return self.batch_size * (self.prompt_tokens_mean + self.response_length)


@dataclass(frozen=True)
class ActivationEstimate:
    """Bytes that live during one phase only, on one device."""

    autocast_copies: int  # both phases: bf16 copies of the policy's and value network's float32 weights
    kv_cache: int  # rollout: generation's key/value cache
    rollout_logits: int  # rollout: the scoring forward passes after generation
    policy_activations: int  # update: kept for the backward pass
    value_activations: int
    update_logits: int

    @property
    def rollout(self) -> int:
        """Generation ends (its cache freed) before the scoring passes start."""
        return self.autocast_copies + max(self.kv_cache, self.rollout_logits)

    @property
    def update(self) -> int:
        """The policy and value losses are summed and back-propagated together."""
        return self.autocast_copies + self.policy_activations + self.value_activations + self.update_logits


@dataclass(frozen=True)
class RunEstimate:
    """A run's models, tokens and memory, from its config alone."""

    models: list[ModelEstimate]
    tokens: TokenEstimate
    activations: ActivationEstimate
    activation_dtype: str  # bfloat16 under bf16 autocast, else float32
    gradient_checkpointing: bool

    def model(self, role: str) -> ModelEstimate:
        """The first model in ``role``."""
        return next(model for model in self.models if model.role == role)

    @property
    def weight_bytes(self) -> int:
        """Every model's weights, and the gradients and moments of the trained ones, held all run long."""
        return sum(model.memory_bytes for model in self.models)

    @property
    def peak_bytes(self) -> int:
        """weights + max(rollout, update)."""
        return self.weight_bytes + max(self.activations.rollout, self.activations.update)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for model, row in zip(self.models, data["models"], strict=True):
            row.update(total=model.total, memory_bytes=model.memory_bytes)
        data["tokens"].update(sequence_length=self.tokens.sequence_length,
                              tokens_per_update=self.tokens.tokens_per_update,
                              mean_tokens_per_update=self.tokens.mean_tokens_per_update)
        data["activations"].update(rollout=self.activations.rollout, update=self.activations.update)
        return {**data, "weight_bytes": self.weight_bytes, "peak_bytes": self.peak_bytes}


# --------------------------------------------------------------------------------------------------- formulas


def autocast_copy_bytes(models: list[ModelEstimate], itemsize: int) -> int:
    """2·N_fp32 under bf16 autocast: the bf16 copies autocast makes of the policy's and value network's float32
    weights are cached through the rollout and saved for the backward pass in the update (errs high for a
    float32 LoRA base in the rollout, whose copies are transient there). 0 without autocast."""
    if itemsize != 2:
        return 0
    return 2 * sum(model.trainable + (model.frozen if model.frozen_dtype == "float32" else 0)
                   for model in models if model.role in ("policy", "value"))


def frozen_dtype(model_config: PretrainedConfig, dtype: str) -> str:
    """``dtype``; with "auto", the checkpoint's own (config.json's ``dtype``), float32 when it names none."""
    if dtype != "auto":
        return dtype
    stored = getattr(model_config, "dtype", None)
    return "float32" if stored is None else str(stored).removeprefix("torch.")


def activation_itemsize(config: PPOConfig) -> int:
    """2 under bf16 autocast, else 4. ``bf16: null`` counts as on unless ``use_cpu``: the GPU a run is sized for
    (A100, H100, L4, ...) supports it."""
    return 2 if config.uses_bf16(gpu_supports_bf16=not config.use_cpu) else 4  # sized for a bf16-capable GPU


# --------------------------------------------------------------------------------------------------- the run


def estimate_run(config: PPOConfig) -> RunEstimate:
    """Every model's parameters and bytes, the tokens per update and the activations of each phase, for ``config``.

    Raises ConfigError naming the field when a path holds no model config or tokenizer. A GGUF is read from its
    dequantised copy in the cache, built on first use as a run builds it (as the built-in task is).
    """
    config = resolve_models(config)
    task = _task(config)
    options = LoadOptions.from_config(config)
    policy_path = config.sft_model_path or task_part(task, "sft_model_path").policy_path
    policy_config = _model_config(policy_path, "sft_model_path", config)
    tokenizer = load_tokenizer(policy_path, options)
    policy = _policy(config, policy_path, policy_config)
    reference = ModelEstimate("reference", policy_path, 0, 0 if config.use_peft else policy.total,
                              frozen_dtype(policy_config, config.dtype),
                              "policy, adapters off" if config.use_peft else "")
    reward_paths = _reward_model_paths(config, task)
    rewards = [_reward(config, field, path) for field, path in reward_paths]
    critic: list[ModelEstimate] = []  # a critic-free estimator builds no value network
    value_shape = None
    if config.uses_critic:
        value_field, value_path = _value_trunk(config, reward_paths, policy_path, tokenizer)
        value_config = _model_config(value_path, value_field, config)
        critic = [_value(config, value_field, value_path, value_config)]
        value_shape = Shape.from_config(value_config)
    tokens = _tokens(config, task, tokenizer)
    itemsize = activation_itemsize(config)
    return RunEstimate(
        models=[policy, reference, *rewards, *critic],
        tokens=tokens,
        activations=_activations(config, tokens, Shape.from_config(policy_config), value_shape,
                                 itemsize, autocast_copy_bytes([policy, *critic], itemsize)),
        activation_dtype="bfloat16" if itemsize == 2 else "float32",
        gradient_checkpointing=config.gradient_checkpointing,
    )


def _task(config: PPOConfig) -> BuiltinTask | None:
    """The built-in task when it supplies anything the config leaves unset (building it may train tiny models once)."""
    needed = config.sft_model_path is None or config.dataset_name is None or not config.named_rewards \
        or config.response_length is None
    return load_task(config) if needed else None


def _model_config(path: str, field_name: str, config: PPOConfig) -> PretrainedConfig:
    require_model(path, field_name)
    try:
        model_config: PretrainedConfig = AutoConfig.from_pretrained(path, revision=config.model_revision,
                                                                    trust_remote_code=config.trust_remote_code)
        return model_config
    except (OSError, ValueError) as error:
        raise ConfigError(f"{field_name}: cannot read a model config from {path!r} ({first_line(error)})") from None


def _meta_model(auto_class: Any, model_config: PretrainedConfig, path: str, field_name: str,
                config: PPOConfig) -> PreTrainedModel:
    """The model's shapes without storage. (accelerate's init_empty_weights would untie tied embeddings here and
    count them twice.)"""
    try:
        with torch.device("meta"):
            model: PreTrainedModel = auto_class.from_config(model_config, trust_remote_code=config.trust_remote_code)
    except (ValueError, KeyError) as error:
        raise ConfigError(f"{field_name}: cannot build {auto_class.__name__} from {path!r} ({first_line(error)})") \
            from None
    return model


def _split(role: str, path: str, counted: ParameterCount, dtype: str, note: str = "", extra: int = 0) -> ModelEstimate:
    """A counted model, plus ``extra`` trained parameters (the value head)."""
    return ModelEstimate(role, path, counted.trainable + extra, counted.total - counted.trainable, dtype, note)


def _policy(config: PPOConfig, path: str, model_config: PretrainedConfig) -> ModelEstimate:
    model = _meta_model(AutoModelForCausalLM, model_config, path, "sft_model_path", config)
    if not config.use_peft:
        return ModelEstimate("policy", path, count_parameters(model).total, 0, "float32")
    adapted = _adapted(model, config, config.lora_task_type, "lora_target_modules")
    return _split("policy", path, count_parameters(adapted), frozen_dtype(model_config, config.dtype),
                  f"LoRA r={config.lora_r}")


def _adapted(model: PreTrainedModel, config: PPOConfig, task_type: str | None, field_name: str) -> nn.Module:
    """The run's own ``add_adapter``, minus the FutureWarning peft triggers in transformers 5 on every model."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return add_adapter(model, lora_config(config, task_type), field_name)


def _reward_model_paths(config: PPOConfig, task: BuiltinTask | None) -> list[tuple[str, str]]:
    """(field, path) of each reward model, in scoring order; the task's when the config names no reward."""
    if not config.named_rewards:
        return [("reward_model_path", task_part(task, "reward_model_path").reward_model_path)]
    return [(field, spec) for field, spec in config.named_rewards if not is_function_spec(spec)]


def _reward(config: PPOConfig, field_name: str, path: str) -> ModelEstimate:
    model_config = _model_config(path, field_name, config)
    model = _meta_model(AutoModelForSequenceClassification, model_config, path, field_name, config)
    return ModelEstimate("reward", path, 0, count_parameters(model).total, frozen_dtype(model_config, config.dtype))


def _value_trunk(config: PPOConfig, reward_paths: list[tuple[str, str]], policy_path: str,
                 tokenizer: PreTrainedTokenizerBase) -> tuple[str, str]:
    """(field, path) of the value trunk, as a run chooses it (:func:`ppo_core.setup.trained_models.value_trunk`): a
    reward model reads the policy's ids when its tokenizer has the policy's vocabulary (``same_vocabulary``, as a run
    compares them: equal token -> id maps)."""
    def reads_policy_ids(field_name: str, path: str) -> bool:
        try:
            reward_tokenizer = AutoTokenizer.from_pretrained(path, revision=config.model_revision,
                                                             trust_remote_code=config.trust_remote_code)
        except (OSError, ValueError) as error:
            raise ConfigError(f"{field_name}: cannot load a tokenizer from {path!r} ({first_line(error)})") from None
        return same_vocabulary(reward_tokenizer, tokenizer)

    return value_trunk(config.value_model_path, reward_paths, policy_path, reads_policy_ids)


def _value(config: PPOConfig, field_name: str, path: str, model_config: PretrainedConfig) -> ModelEstimate:
    trunk = _meta_model(AutoModel, model_config, path, field_name, config)
    head = Shape.from_config(model_config).hidden_size + 1
    if config.use_peft and config.value_use_peft:
        adapted = _adapted(trunk, config, None, "value_use_peft")
        return _split("value", path, count_parameters(adapted), frozen_dtype(model_config, config.dtype),
                      f"LoRA r={config.lora_r} + head", extra=head)
    return ModelEstimate("value", path, count_parameters(trunk).total + head, 0, "float32", "trunk + head")


def _tokens(config: PPOConfig, task: BuiltinTask | None, tokenizer: PreTrainedTokenizerBase) -> TokenEstimate:
    responses = generated_length(config.response_length, config.task if task is not None else None, config.task_seed)
    if config.max_prompt_length is not None:
        return TokenEstimate(config.batch_size, config.max_prompt_length, config.max_prompt_length, responses,
                             prompts_measured=False)
    lengths = prompt_lengths(prompt_sets(config, task_prompts(config, task), tokenizer)[0], tokenizer)
    return TokenEstimate(config.batch_size, max(lengths), sum(lengths) / len(lengths), responses,
                         prompts_measured=True)


def prompt_lengths(prompts: PromptSet, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Tokens of each prompt as the rollout encodes it (its own ``encode_prompts``), padding not counted."""
    return [int(n) for n in encode_prompts(tokenizer, prompts, None)["attention_mask"].sum(dim=1)]


def _activations(config: PPOConfig, tokens: TokenEstimate, policy: Shape, value: Shape | None, itemsize: int,
                 autocast_copies: int) -> ActivationEstimate:
    """The rollout generates and scores ``local_rollout_forward_batch_size`` rows at a time (at most a rollout
    batch); the update runs ``per_device_train_batch_size`` rows through the policy and the value network (none
    without one), or ``update_forward_batch_size`` rows (whole micro-batches) at a time when that is set."""
    sequence, response = tokens.sequence_length, tokens.response_length
    rollout_rows = min(config.local_rollout_forward_batch_size, config.local_batch_size)
    rows = config.per_device_train_batch_size * forward_group(config)
    eager = config.attn_implementation == "eager"
    checkpointing = config.gradient_checkpointing
    return ActivationEstimate(
        autocast_copies=autocast_copies,
        kv_cache=kv_cache_bytes(policy, sequence, rollout_rows, itemsize),
        rollout_logits=rollout_logits_bytes(rollout_rows, response, policy.vocab_size, itemsize),
        policy_activations=trunk_activation_bytes(policy, sequence, rows, itemsize, eager, checkpointing),
        value_activations=trunk_activation_bytes(value, sequence, rows, itemsize, eager, checkpointing)
        if value is not None else 0,
        update_logits=update_logits_bytes(rows, response, policy.vocab_size),
    )


# --------------------------------------------------------------------------------------------------- printing
