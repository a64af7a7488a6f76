"""Degenerate responses, made from real words: what gold must score low, and what a policy over-optimising a proxy
reward model may drift towards. Used to check the gold scorer and to report how it ranks them.

>>> repeated_word("good", 4)
'good good good good'
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def repeated_word(word: str, count: int) -> str:
    """``word`` ``count`` times: the cheapest way to stack sentiment."""
    return " ".join([word] * count)


def random_words(pool: Sequence[str], count: int, rng: random.Random) -> str:
    """``count`` words drawn from ``pool`` with replacement: from the corpus's running words, word salad as frequent
    as the corpus's words; from a list of positive words, a list with nothing joining them ("love happy great")."""
    return " ".join(rng.choice(pool) for _ in range(count))


def shuffled_words(text: str, rng: random.Random) -> str:
    """``text``'s whitespace-separated words in a random order: real words, no sentence."""
    tokens = text.split()
    rng.shuffle(tokens)
    return " ".join(tokens)


def invented_words(count: int, rng: random.Random, length: int = 6) -> str:
    """``count`` strings of ``length`` random letters: no word of any corpus."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return " ".join("".join(rng.choice(letters) for _ in range(length)) for _ in range(count))
