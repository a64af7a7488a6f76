"""A word-level tokenizer for the text task's small policy, built offline with ``tokenizers`` from the corpus.

One token per lower-cased word ("don't" is one word) or punctuation mark, for the corpus's most frequent ones, and
four special tokens; the rest become ``<unk>``. A word-level policy writes whole words, which VADER and the gold
scorer can read, where a small BPE one invents words. Decoding joins the tokens with spaces and then attaches
punctuation as English writes it:

>>> tokenizer = build_word_tokenizer(corpus.texts, vocab_size=4096)  # doctest: +SKIP
>>> tokenizer.decode(tokenizer('He said, "Don\\'t panic (yet)."')["input_ids"], skip_special_tokens=True)
... # doctest: +SKIP
'he said, "don\\'t panic (yet)."'

Quotes are told apart when normalising: a ``"`` or ``'`` at the start of a word opens (becomes ``“``/``‘``), any
other closes (``”``/``’``), so decoding knows which side to attach them to; a hyphen between letters becomes the
token ``@-@`` (as in WikiText), so "well-known" costs two common words and no rare one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tokenizers import Regex, decoders, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from ppo_core.tasks.fortunes.words import WORD_PATTERN
from ppo_core.tasks.tokenizer import SPECIAL_TOKENS, word_level_tokenizer

HYPHEN = "@-@"

# A piece is the hyphen token, an ellipsis, a double dash, a word, a number, or any other single character.
_PIECE = rf"{HYPHEN}|\.\.\.|--|{WORD_PATTERN}|[0-9]+|\S"

# (text after the tokens are joined with spaces, what it becomes): in this order, each on the whole decoded text.
_ATTACH: tuple[tuple[str, str], ...] = (
    *((f" {mark}", mark) for mark in ".,!?;:)%"),
    *((f"{mark} ", mark) for mark in "([$#`"),
    (" ]", "]"),
    (" / ", "/"),
    (f" {HYPHEN} ", "-"),
    ("“ ", '"'), (" ”", '"'), ("‘ ", "'"), (" ’", "'"),
    # A quote at the very start or end of a response has no space to drop: still plain ASCII.
    ("“", '"'), ("”", '"'), ("‘", "'"), ("’", "'"), (HYPHEN, "-"),
)


def _normalizer() -> normalizers.Normalizer:
    return normalizers.Sequence([
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r'(?<![^\s(\[])"'), "“"),
        normalizers.Replace('"', "”"),
        # An apostrophe between letters stays in its word ("don't"); at a word's start it opens, elsewhere closes.
        normalizers.Replace(Regex(r"(?<![^\s(\[])'"), "‘"),
        normalizers.Replace(Regex(r"'(?![a-z])|(?<![a-z])'"), "’"),
        normalizers.Replace(Regex(r"(?<=[a-z])-(?=[a-z])"), f" {HYPHEN} "),
    ])


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Split(Regex(_PIECE), behavior="isolated"),
    ])


def _decoder() -> decoders.Decoder:
    # WordPiece joins the tokens with spaces (no token starts with its "##"), Fuse makes them one string, and each
    # Replace then works on the whole text.
    return decoders.Sequence([
        decoders.WordPiece(prefix="##", cleanup=False),
        decoders.Fuse(),
        *(decoders.Replace(pattern, content) for pattern, content in _ATTACH),
    ])


def pieces(text: str) -> list[str]:
    """The tokens ``text`` splits into before the vocabulary is consulted (words, marks, ``@-@``)."""
    normalized = _normalizer().normalize_str(text)
    return [piece for piece, _ in _pre_tokenizer().pre_tokenize_str(normalized)]


def top_pieces(texts: Iterable[str], count: int) -> list[str]:
    """The ``count`` most frequent pieces of ``texts``, most frequent first, ties alphabetical (every machine builds
    the same vocabulary)."""
    normalizer, pre_tokenizer = _normalizer(), _pre_tokenizer()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(piece for piece, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    return [piece for piece, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:count]]


def build_word_tokenizer(texts: Iterable[str], vocab_size: int = 4096, model_max_length: int = 64,
                         padding_side: str = "left") -> PreTrainedTokenizerFast:
    """The text task's tokenizer: ``vocab_size`` tokens in all, the four special ones first, then the most frequent
    pieces of ``texts``.

    Its special tokens, ``<bos>`` and padding are both tasks' (:func:`ppo_core.tasks.tokenizer.word_level_tokenizer`);
    the decoder attaches the punctuation, so transformers' clean-up is off.
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must leave room for words beyond the {len(SPECIAL_TOKENS)} special tokens")
    words = top_pieces(texts, vocab_size - len(SPECIAL_TOKENS))
    return word_level_tokenizer(words, model_max_length, padding_side, _pre_tokenizer(), _normalizer(), _decoder())
