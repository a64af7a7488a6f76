"""Model sizes the benchmark runs: randomly initialised GPT-2 / GPT-NeoX configs, nothing downloaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import GPT2Config, GPTNeoXConfig, PretrainedConfig, Qwen2Config


@dataclass(frozen=True)
class ModelSize:
    """One architecture; ``build`` turns it into a transformers config for a tokenizer's special ids."""

    name: str
    family: str  # "gpt2", "gpt_neox" or "qwen2"
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    max_positions: int
    note: str = ""
    kv_heads: int | None = None  # qwen2: grouped-query attention's key/value heads
    intermediate: int | None = None  # qwen2: the MLP's width

    def build(self, pad_token_id: int, eos_token_id: int) -> PretrainedConfig:
        common: dict[str, Any] = {
            "vocab_size": self.vocab_size,
            "pad_token_id": pad_token_id,
            "eos_token_id": eos_token_id,
            "bos_token_id": eos_token_id,
            "num_labels": 1,
        }
        if self.family == "gpt2":
            # Dropout zero: both trainers disable it anyway, and it keeps the two sides' forwards identical.
            return GPT2Config(
                n_embd=self.hidden, n_layer=self.layers, n_head=self.heads, n_positions=self.max_positions,
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common,
            )
        if self.family == "gpt_neox":
            # Pythia-160M's shape: untied embeddings, rotary on a quarter of each head, parallel residual.
            # rotary_pct is read from **kwargs at runtime (convert_rope_params_to_dict); the dataclass typing omits it.
            return GPTNeoXConfig(  # type: ignore[call-arg]
                hidden_size=self.hidden, num_hidden_layers=self.layers, num_attention_heads=self.heads,
                intermediate_size=4 * self.hidden, max_position_embeddings=self.max_positions,
                rotary_pct=0.25, use_parallel_residual=True, tie_word_embeddings=False,
                hidden_dropout=0.0, attention_dropout=0.0, **common,
            )
        if self.family == "qwen2":
            # Qwen2-0.5B's shape: grouped-query attention, SwiGLU MLP, tied embeddings.
            return Qwen2Config(
                hidden_size=self.hidden, num_hidden_layers=self.layers, num_attention_heads=self.heads,
                num_key_value_heads=self.kv_heads or self.heads, intermediate_size=self.intermediate or 4 * self.hidden,
                max_position_embeddings=self.max_positions, tie_word_embeddings=True, attention_dropout=0.0,
                **common,
            )
        raise ValueError(f"unknown model family {self.family!r}")


SIZES: dict[str, ModelSize] = {
    "0.1M": ModelSize("0.1M", "gpt2", vocab_size=256, hidden=48, layers=3, heads=4, max_positions=64,
                      note="GPT-2, about 0.1M parameters"),
    "5M": ModelSize("5M", "gpt2", vocab_size=256, hidden=256, layers=6, heads=8, max_positions=64,
                    note="GPT-2, about 5M parameters"),
    "pythia-160m": ModelSize("pythia-160m", "gpt_neox", vocab_size=50304, hidden=768, layers=12, heads=12,
                             max_positions=2048, note="GPT-NeoX shaped like Pythia-160M (CUDA only)"),
    # --quick on CUDA: the full CUDA run's architecture (GPT-NeoX, untied, rotary) at a size that runs in seconds.
    "neox-tiny": ModelSize("neox-tiny", "gpt_neox", vocab_size=256, hidden=64, layers=2, heads=4, max_positions=64,
                           note="GPT-NeoX, about 0.1M parameters (--quick on CUDA)"),
    "qwen2-0.5b": ModelSize("qwen2-0.5b", "qwen2", vocab_size=151936, hidden=896, layers=24, heads=14,
                            max_positions=4096, kv_heads=2, intermediate=4864,
                            note="Qwen2 shaped like Qwen2-0.5B (CUDA only)"),
    "qwen2-tiny": ModelSize("qwen2-tiny", "qwen2", vocab_size=256, hidden=64, layers=2, heads=4, max_positions=64,
                            kv_heads=2, intermediate=128, note="Qwen2, about 0.1M parameters (--quick)"),
}

CPU_SIZES = ("0.1M", "5M")
CUDA_SIZES = ("pythia-160m",)
QUICK_CPU_SIZES = ("0.1M",)
QUICK_CUDA_SIZES = ("neox-tiny",)
