"""Words and their counts in the corpus: the text task's only notion of English, taken from the corpus itself.

The gold scorer judges a response by how its words and adjacent word pairs compare with the corpus, so it depends on
no model: not the policy's tokenizer, not the proxy reward model. Calibrating it asks how a real text fares against
the *rest* of the corpus, which :class:`LeaveOneOut` answers exactly without recounting.

>>> counts = CorpusCounts.from_texts(["The cat sat.", "The dog sat."])
>>> counts.word_count("the"), counts.pair_count("dog", "sat"), counts.vocabulary_size
(2, 1, 4)
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

# A word is a run of letters, with inner apostrophes ("don't", "o'clock"); digits and punctuation are not words.
WORD_PATTERN = r"[a-z]+(?:'[a-z]+)*"
_WORD = re.compile(WORD_PATTERN)


def words(text: str) -> list[str]:
    """The lower-cased words of ``text``, in order."""
    return _WORD.findall(text.lower())


def word_pairs(tokens: list[str]) -> list[tuple[str, str]]:
    """Adjacent pairs of ``tokens``: ``[(w0, w1), (w1, w2), ...]``, empty for fewer than two."""
    return list(itertools.pairwise(tokens))


class Counts(Protocol):
    """How often each word and each adjacent pair of words occurs in a body of text."""

    @property
    def total_words(self) -> int: ...

    @property
    def vocabulary_size(self) -> int: ...

    def word_count(self, word: str) -> int: ...

    def pair_count(self, first: str, second: str) -> int: ...


@dataclass(frozen=True)
class CorpusCounts:
    """Word and adjacent-pair counts over a list of texts (pairs never span two texts)."""

    words: Counter[str]
    pairs: Counter[tuple[str, str]]

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> CorpusCounts:
        word_counts: Counter[str] = Counter()
        pair_counts: Counter[tuple[str, str]] = Counter()
        for text in texts:
            tokens = words(text)
            word_counts.update(tokens)
            pair_counts.update(word_pairs(tokens))
        return cls(word_counts, pair_counts)

    @cached_property
    def total_words(self) -> int:
        return sum(self.words.values())

    @cached_property
    def vocabulary_size(self) -> int:
        return len(self.words)

    def word_count(self, word: str) -> int:
        return self.words.get(word, 0)

    def pair_count(self, first: str, second: str) -> int:
        return self.pairs.get((first, second), 0)

    def most_common(self, count: int) -> frozenset[str]:
        """The ``count`` most frequent words (ties broken alphabetically, so every build picks the same ones)."""
        ranked = sorted(self.words.items(), key=lambda item: (-item[1], item[0]))
        return frozenset(word for word, _ in ranked[:count])


class LeaveOneOut:
    """The counts of a corpus without one of its texts: what the rest of the corpus says about that text.

    Subtracts the text's own counts on each look-up, so calibrating over every text costs one pass, not one recount
    per text.
    """

    def __init__(self, counts: CorpusCounts, text: str) -> None:
        self._counts = counts
        tokens = words(text)
        self._own_words = Counter(tokens)
        self._own_pairs = Counter(word_pairs(tokens))
        self._total = counts.total_words - len(tokens)
        vanished = sum(1 for word, own in self._own_words.items() if counts.word_count(word) == own)
        self._vocabulary_size = counts.vocabulary_size - vanished

    @property
    def total_words(self) -> int:
        return self._total

    @property
    def vocabulary_size(self) -> int:
        return self._vocabulary_size

    def word_count(self, word: str) -> int:
        return self._counts.word_count(word) - self._own_words.get(word, 0)

    def pair_count(self, first: str, second: str) -> int:
        return self._counts.pair_count(first, second) - self._own_pairs.get((first, second), 0)
