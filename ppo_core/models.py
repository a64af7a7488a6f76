"""Loading the policy, reference and tokenizer, and the value network (a trunk with a scalar head)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from ppo_core.config import ConfigError
from ppo_core.quiet import transformers_errors_only


def load_tokenizer(path: str, field_name: str = "sft_model_path") -> PreTrainedTokenizerBase:
    """The policy's tokenizer, left-padding prompts so every response starts at the same column."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    except (OSError, ValueError) as error:
        raise ConfigError(f"{field_name}: cannot load a tokenizer from {path!r} ({_first_line(error)})") from None
    if tokenizer.pad_token_id is None:
        # Masks, not the pad id, decide what is padding, so borrowing EOS is safe here.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(path: str, field_name: str = "sft_model_path") -> PreTrainedModel:
    """A causal LM in eval mode: dropout off, because PPO's ratio must compare like with like."""
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{field_name}: cannot load a causal LM from {path!r} ({_first_line(error)})") from None
    return model.eval()


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
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).last_hidden_state
        return self.head(hidden.to(self.head.weight.dtype)).squeeze(-1)


def load_value_model(path: str, field_name: str = "value_model_path") -> ValueModel:
    """A value network on the trunk of any transformers model directory (a causal LM or a reward model)."""
    try:
        # A reward model's own head is expected to be left behind; transformers would report it as unexpected.
        with transformers_errors_only():
            trunk = AutoModel.from_pretrained(path, dtype=torch.float32)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{field_name}: cannot load a model trunk from {path!r} ({_first_line(error)})") from None
    return ValueModel(trunk).eval()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
