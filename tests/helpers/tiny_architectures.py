"""One tiny model of each decoder architecture the sampling paths must serve, loaded with a left-padding tokenizer:
what the sampling loop's, the static decode's and the shared prompts' tests run on."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from tools import tiny_models

WRITERS = {"gpt2": tiny_models.write_gpt2, "gpt_neox": tiny_models.write_gpt_neox,
           "llama": tiny_models.write_llama, "qwen2": tiny_models.write_qwen2}


def load_left_padded(architecture: str, directory: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A tiny ``architecture`` model written under ``directory`` (seed 1), in eval mode, and its tokenizer padding on
    the left, with a pad token where the architecture has none."""
    path = WRITERS[architecture](directory / "model", seed=1)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return AutoModelForCausalLM.from_pretrained(path).eval(), tokenizer
