"""The text task's prompts: each text's first words, its continuation kept as a reference, split by text.

>>> split_text("When in doubt, mumble.")
TextExample(prompt='When in doubt,', reference='mumble.')

Texts that open with the same words share a prompt ("There was a" opens 335 limericks), so the split is made over
distinct prompts: every text of a held-out prompt is held out, and no prompt string is in both parts.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ppo_core.config.checks import ConfigError

PROMPT_WORDS = 3
"""Words of a text that make its prompt: enough to set a topic ("If a man"), few enough to leave most of it."""


@dataclass(frozen=True)
class TextExample:
    """One text as a prompt and the rest of it, which a policy should continue towards."""

    prompt: str
    reference: str

    @property
    def text(self) -> str:
        return f"{self.prompt} {self.reference}"


def split_text(text: str, prompt_words: int = PROMPT_WORDS) -> TextExample:
    """The first ``prompt_words`` whitespace-separated words as the prompt, the rest (single-spaced) as reference."""
    tokens = text.split()
    return TextExample(prompt=" ".join(tokens[:prompt_words]), reference=" ".join(tokens[prompt_words:]))


@dataclass(frozen=True)
class TextSplit:
    """The examples a policy learns from and those it is evaluated on; no prompt is in both."""

    train: tuple[TextExample, ...]
    heldout: tuple[TextExample, ...]

    @property
    def train_prompts(self) -> list[str]:
        """The distinct training prompts, in order of first appearance."""
        return list(dict.fromkeys(example.prompt for example in self.train))

    @property
    def heldout_prompts(self) -> list[str]:
        """The distinct held-out prompts, in the order they were drawn."""
        return list(dict.fromkeys(example.prompt for example in self.heldout))


def split_examples(texts: Sequence[str], num_heldout: int, seed: int,
                   prompt_words: int = PROMPT_WORDS) -> TextSplit:
    """Hold out ``num_heldout`` distinct prompts, drawn with ``random.Random(seed)``, with every text that opens them.

    The same texts, count and seed give the same split on every machine. Raises :class:`ConfigError` naming the
    split that would be empty.
    """
    examples = [split_text(text, prompt_words) for text in texts]
    prompts = list(dict.fromkeys(example.prompt for example in examples))
    if num_heldout < 1:
        raise ConfigError(f"num_heldout={num_heldout} leaves the text task's held-out split empty")
    if num_heldout >= len(prompts):
        raise ConfigError(
            f"num_heldout={num_heldout} leaves the text task's train split empty: the corpus has {len(prompts)} prompts"
        )
    drawn = random.Random(seed).sample(prompts, num_heldout)
    rank = {prompt: index for index, prompt in enumerate(drawn)}
    heldout = sorted((example for example in examples if example.prompt in rank), key=lambda e: rank[e.prompt])
    train = [example for example in examples if example.prompt not in rank]
    return TextSplit(train=tuple(train), heldout=tuple(heldout))
