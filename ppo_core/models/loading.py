"""Loading the policy, reference and tokenizer, and the value network (a trunk with a scalar head), and making a
loaded model ready to train (:func:`prepare_for_training`: gradient checkpointing, a LoRA adapter, dropout off).

Every model loads with torch's fused kernel for the tanh GELU that GPT-2-family models compute op by op
(:func:`fuse_activations`): transformers' ``gelu_new`` (GPT-2, GPT-J, CodeGen...) and ``gelu_fast`` write the tanh
approximation of GELU as seven elementwise ops, each a kernel that keeps its input for the backward pass, while
``torch.nn.GELU(approximate="tanh")`` is the same formula in one forward and one backward kernel: fewer passes over
the MLP's widest activation and fewer tensors held for the backward. The swap is of modules only; the model's config,
and so what ``save_pretrained`` writes, keeps its own activation name.

Every loader takes a model path as :func:`ppo_core.models.paths.resolve_model` returns it: a run resolves and checks
each path once, before anything loads (a GGUF is its dequantised copy by then), so the loaders do not check again."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import torch
from peft import LoraConfig, get_peft_model
from safetensors import SafetensorError
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.activations import FastGELUActivation, NewGELUActivation

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.errors import first_line
from ppo_core.models.quiet import transformers_errors_only

UNREADABLE = (OSError, ValueError, SafetensorError)
"""What ``from_pretrained`` raises on a model directory it cannot read: files missing or unreadable, a config that is
not JSON, or weights whose bytes are damaged (safetensors' own error, which is neither of the others)."""

ModuleT = TypeVar("ModuleT", bound=nn.Module)

# Both compute GELU_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); gelu_fast rounds √(2/π) to 10 digits.
UNFUSED_TANH_GELUS: tuple[type[nn.Module], ...] = (NewGELUActivation, FastGELUActivation)

DTYPES: dict[str, torch.dtype | str] = {
    "auto": "auto", "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
}


@dataclass(frozen=True)
class LoadOptions:
    """How every model of a run loads (TRL ModelConfig's fields)."""

    dtype: str = "float32"
    attn_implementation: str | None = None
    trust_remote_code: bool = False
    revision: str = "main"

    @classmethod
    def from_config(cls, config: PPOConfig) -> LoadOptions:
        return cls(config.dtype, config.attn_implementation, config.trust_remote_code, config.model_revision)

    def trainable(self) -> LoadOptions:
        """Trained weights load in float32: the master copy that bf16 autocast computes from and AdamW updates.
        Only frozen weights (reference, rewards, a LoRA base) take ``dtype``."""
        return dataclasses.replace(self, dtype="float32")

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"dtype": DTYPES[self.dtype], "revision": self.revision,
                                  "trust_remote_code": self.trust_remote_code}
        if self.attn_implementation is not None:
            kwargs["attn_implementation"] = self.attn_implementation
        return kwargs


def load_tokenizer(path: str, options: LoadOptions = LoadOptions(),
                   field_name: str = "sft_model_path") -> PreTrainedTokenizerBase:
    """The policy's tokenizer: prompts padded and, past max_prompt_length, cut on the left, so every response
    starts at the same column right after the prompt's end. A tokenizer without a pad token borrows EOS."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left", truncation_side="left",
                                                  revision=options.revision,
                                                  trust_remote_code=options.trust_remote_code)
    except UNREADABLE as error:
        raise ConfigError(f"{field_name}: cannot load a tokenizer from {path!r} ({first_line(error)})") from None
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ConfigError(f"{field_name}: the tokenizer of {path!r} has neither a pad nor an EOS token")
        # Llama's tokenizers have no pad token. Masks, not the pad id, decide what is padding, so borrowing
        # EOS is safe here.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def copy_tokenizer(path: str, options: LoadOptions, directory: Path) -> None:
    """Save the tokenizer as the user's own files define it.

    The run's copy pads and cuts prompts on the left, may borrow EOS as its pad token, and its backend keeps the
    last call's padding and truncation lengths; written out, those would change how the trained model's users
    tokenize. PPO never changes a tokenizer, so a fresh load of the original is the faithful copy.
    """
    AutoTokenizer.from_pretrained(path, revision=options.revision,
                                  trust_remote_code=options.trust_remote_code).save_pretrained(directory)


def load_pretrained(auto_class: Any, path: str, options: LoadOptions, field_name: str, what: str) -> PreTrainedModel:
    """``auto_class.from_pretrained(path)`` as ``options`` say, with torch's fused tanh GELU
    (:func:`fuse_activations`); a directory that cannot be read is a one-line ConfigError naming the
    field and ``what`` was expected there."""
    try:
        model = auto_class.from_pretrained(path, **options.from_pretrained_kwargs())
    except UNREADABLE as error:
        raise ConfigError(f"{field_name}: cannot load {what} from {path!r} ({first_line(error)})") from None
    fused: PreTrainedModel = fuse_activations(model)
    return fused


def fuse_activations(model: ModuleT) -> ModuleT:
    """Replace every op-by-op tanh GELU in ``model`` with ``nn.GELU(approximate="tanh")``, in place.

    GELU_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), in one kernel; values agree to float rounding.
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, UNFUSED_TANH_GELUS):
                setattr(parent, name, nn.GELU(approximate="tanh"))
    return model


def load_causal_lm(path: str, options: LoadOptions = LoadOptions(),
                   field_name: str = "sft_model_path") -> PreTrainedModel:
    """A causal LM in eval mode: dropout off, because PPO's ratio must compare like with like."""
    model = load_pretrained(AutoModelForCausalLM, path, options, field_name, "a causal LM")
    model.eval()
    return model


def prepare_for_training(model: PreTrainedModel, adapter: LoraConfig | None, gradient_checkpointing: bool,
                         field_name: str) -> PreTrainedModel:
    """``model`` as a run trains it: with gradient checkpointing where asked, under ``adapter`` where one is given
    (the model then frozen), and with every dropout zeroed, the adapter's own included (:func:`without_dropout`)."""
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if adapter is not None:
        model = add_adapter(model, adapter, field_name)
    return without_dropout(model)


def add_adapter(model: PreTrainedModel, adapter: LoraConfig, field_name: str) -> PreTrainedModel:
    """``model`` frozen, with a trainable LoRA adapter; a target that matches nothing is the user's error.

    Typed as the model it wraps: a PeftModel forwards, generates and saves through the same calls.
    """
    try:
        with warnings.catch_warnings():
            # Two warnings peft prints for every adapter, about its own code, that a user can do nothing about: on
            # GPT-2's Conv1D layers it sets fan_in_fan_out itself, and it reads transformers 5's deprecated
            # is_gradient_checkpointing. A study printed both for every trial.
            warnings.filterwarnings("ignore", message=r"fan_in_fan_out is set to False", category=UserWarning)
            warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated",
                                    category=FutureWarning)
            return cast(PreTrainedModel, get_peft_model(model, adapter))
    except (ValueError, KeyError) as error:
        raise ConfigError(f"{field_name}: cannot add a LoRA adapter to {model.config.model_type!r} "
                          f"({first_line(error)})") from None


def without_dropout(model: ModuleT) -> ModuleT:
    """Zero every dropout of a model that trains, so training mode (which gradient checkpointing needs) computes
    what eval mode does: the update's log-probabilities must match the rollout's for the first ratio to be 1."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        # Attention kernels take their dropout as a float attribute (Llama, Qwen2, GPT-NeoX), not a module.
        if isinstance(getattr(module, "attention_dropout", None), float):
            setattr(module, "attention_dropout", 0.0)  # noqa: B010  # mypy types Module attributes as tensors
    return model


def enable_gradient_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each layer's activations in the backward pass. The non-reentrant kind needs no gradient on the
    inputs, so it works under a frozen LoRA base; it takes effect only while the model is in training mode."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


class ValueModel(nn.Module):
    """V(s_t): a transformer trunk and a linear head mapping each hidden state to a scalar.

    The head starts at zero so the first value estimates are 0 rather than noise that the
    first advantages would inherit (Huang et al., "The N+ implementation details of RLHF with PPO").
    """

    def __init__(self, trunk: PreTrainedModel) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = nn.Linear(trunk.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.trunk(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        values: torch.Tensor = self.head(hidden.to(self.head.weight.dtype)).squeeze(-1)
        return values


def load_trunk(path: str, options: LoadOptions = LoadOptions(),
               field_name: str = "value_model_path") -> PreTrainedModel:
    """The transformer trunk (no head) of any transformers model directory: a causal LM or a reward model."""
    # A reward model's own head is expected to be left behind; transformers would report it as unexpected.
    with transformers_errors_only():
        return load_pretrained(AutoModel, path, options, field_name, "a model trunk")


def load_value_model(path: str, options: LoadOptions = LoadOptions(),
                     field_name: str = "value_model_path") -> ValueModel:
    """A value network on the trunk of any transformers model directory (a causal LM or a reward model)."""
    return ValueModel(load_trunk(path, options, field_name)).eval()
