"""Model and data fixtures shared by both sides: one tokenizer, four model directories, one prompt set."""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from benchmarks.trl_comparison.sizes import ModelSize
from benchmarks.trl_comparison.workload import Workload

SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")


@dataclass(frozen=True)
class Fixture:
    """Directories written with ``save_pretrained``; the policy and reference both load ``sft_dir``."""

    root: Path
    sft_dir: Path
    reward_dir: Path
    value_dir: Path
    prompts_path: Path

    @classmethod
    def at(cls, root: Path) -> Fixture:
        return cls(root, root / "sft", root / "reward", root / "value", root / "prompts.txt")

    def prompt_ids(self) -> list[list[int]]:
        return json.loads((self.root / "prompt_ids.json").read_text())


def _word(index: int) -> str:
    """A distinct lowercase word per index (a, b, ..., z, ba, bb, ...)."""
    letters = string.ascii_lowercase
    word = letters[index % 26]
    index //= 26
    while index:
        word = letters[index % 26] + word
        index //= 26
    return word


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Word-level and whitespace-split, so decoding and re-encoding a response gives back the same ids.

    ppo_core scores rewards from decoded text while TRL scores token ids; a round-trip-exact
    tokenizer makes the reward model see the same tokens on both sides.
    """
    words = [_word(index) for index in range(vocab_size - len(SPECIAL_TOKENS))]
    vocab = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *words])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def _decode(tokenizer: PreTrainedTokenizerFast, ids: list[int]) -> str:
    """One sequence's text (``decode`` is typed for a batch too, as ``str | list[str]``)."""
    text = tokenizer.decode(ids)
    assert isinstance(text, str)
    return text


def build_fixture(root: Path, size: ModelSize, workload: Workload) -> Fixture:
    """Write the tokenizer, the policy, reward and value checkpoints and the prompts under ``root``."""
    fixture = Fixture.at(root)
    tokenizer = build_tokenizer(size.vocab_size)
    config = size.build(tokenizer.pad_token_id, tokenizer.eos_token_id)
    # Different seeds so the reward and value networks are not copies of the policy's trunk.
    for seed, directory, model_class in (
        (workload.seed, fixture.sft_dir, AutoModelForCausalLM),
        (workload.seed + 1, fixture.reward_dir, AutoModelForSequenceClassification),
        (workload.seed + 2, fixture.value_dir, AutoModelForSequenceClassification),
    ):
        torch.manual_seed(seed)
        model_class.from_config(config).save_pretrained(directory)
        tokenizer.save_pretrained(directory)

    rng = random.Random(workload.seed)
    first_word = len(SPECIAL_TOKENS)
    prompt_ids = [
        [rng.randrange(first_word, size.vocab_size) for _ in range(workload.prompt_length)]
        for _ in range(workload.num_prompts)
    ]
    # The trailing space matters: ppo_core scores the text prompt + response, and without it the last
    # prompt word and the first response word would fuse into one (unknown) token for its reward model.
    prompts = [_decode(tokenizer, ids) + " " for ids in prompt_ids]
    assert [tokenizer(p)["input_ids"] for p in prompts] == prompt_ids, "prompts must round-trip exactly"
    fixture.prompts_path.write_text("\n".join(prompts) + "\n", encoding="utf-8")
    (root / "prompt_ids.json").write_text(json.dumps(prompt_ids))
    return fixture


def _distinct_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def _matmul_parameters(model: PreTrainedModel) -> int:
    """Parameters that take part in a matrix multiply per token: embedding lookups excluded,
    a tied output projection (the embedding reused as the LM head) counted once."""
    lookups = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is model.get_input_embeddings().weight
    return _distinct_parameters(model) - lookups + (head.weight.numel() if tied else 0)


def count_parameters(fixture: Fixture) -> dict[str, int]:
    """Distinct parameters of each network (tied embeddings counted once) and their matmul parameters."""
    networks = {
        "policy": AutoModelForCausalLM.from_pretrained(fixture.sft_dir),
        "value": AutoModelForSequenceClassification.from_pretrained(fixture.value_dir),
        "reward": AutoModelForSequenceClassification.from_pretrained(fixture.reward_dir),
    }
    counts = {name: _distinct_parameters(model) for name, model in networks.items()}
    counts.update({f"{name}_matmul": _matmul_parameters(model) for name, model in networks.items()})
    return counts
