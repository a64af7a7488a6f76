"""The shortest-path task's tokenizer: one token per word, the prompt words and one name per node, after the four
special tokens (:mod:`ppo_core.tasks.tokenizer`, which both tasks share)."""

from __future__ import annotations

from tokenizers import pre_tokenizers
from transformers import PreTrainedTokenizerFast

from ppo_core.tasks.graph.text import PROMPT_WORDS
from ppo_core.tasks.tokenizer import word_level_tokenizer


def build_tokenizer(num_nodes: int, model_max_length: int, padding_side: str) -> PreTrainedTokenizerFast:
    """Return the task tokenizer for a graph on ``num_nodes`` nodes, padded on ``padding_side``."""
    words = [*PROMPT_WORDS, *(str(n) for n in range(num_nodes))]
    return word_level_tokenizer(words, model_max_length, padding_side, pre_tokenizers.Whitespace())
