"""Shared fixtures: tiny real transformers models saved to disk, loaded by the same code users run."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel, PreTrainedTokenizerFast

WORDS = list(string.ascii_lowercase)


def _tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: index for index, token in enumerate(["<pad>", "<eos>", "<unk>", *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def _gpt2_config(tokenizer: PreTrainedTokenizerFast) -> GPT2Config:
    return GPT2Config(
        vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id, num_labels=1,
    )


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer GPT-2 and its word-level tokenizer, saved with save_pretrained."""
    directory = tmp_path_factory.mktemp("tiny_lm")
    tokenizer = _tokenizer()
    torch.manual_seed(0)
    GPT2LMHeadModel(_gpt2_config(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised one-label GPT-2 sequence classifier: a reward model."""
    directory = tmp_path_factory.mktemp("tiny_rm")
    tokenizer = _tokenizer()
    torch.manual_seed(1)
    GPT2ForSequenceClassification(_gpt2_config(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def prompts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    generator = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(64):
        length = int(torch.randint(1, 6, (1,), generator=generator))
        lines.append(" ".join(WORDS[int(i)] for i in torch.randint(0, 26, (length,), generator=generator)))
    path.write_text("\n".join(lines) + "\n")
    return path
