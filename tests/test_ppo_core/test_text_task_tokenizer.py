"""The text task's word-level tokenizer (ppo_core.tasks.fortunes.tokenizer): its vocabulary, how it decodes, and
its round trips on real text."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ppo_core.tasks.fortunes import TextSplit, load_corpus, split_examples
from ppo_core.tasks.fortunes.tokenizer import build_word_tokenizer, pieces
from ppo_core.tasks.tokenizer import SPECIAL_TOKENS, UNK


def round_trip(tokenizer: PreTrainedTokenizerFast, text: str, skip_special_tokens: bool = True) -> str:
    decoded = tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=skip_special_tokens)
    assert isinstance(decoded, str)
    return decoded


@pytest.mark.parametrize(("text", "decoded"), [
    ("When in doubt, mumble; when in trouble, delegate.", "when in doubt, mumble; when in trouble, delegate."),
    ('He said, "Don\'t panic (yet)." Then he left...', 'he said, "don\'t panic (yet)." then he left...'),
    ("The dogs' well-known toys: 50% off!", "the dogs' well-known toys: 50% off!"),
    ("'Tis [sic] #1 and/or $5 -- really?", "'tis [sic] #1 and/or $5 -- really?"),
    ('"Quoted from the start," she said', '"quoted from the start," she said'),
])
def test_decoding_attaches_punctuation_as_english_writes_it(text: str, decoded: str) -> None:
    tokenizer = build_word_tokenizer([text], vocab_size=100)
    assert round_trip(tokenizer, text) == decoded


def test_words_keep_their_apostrophes_and_quotes_know_their_side() -> None:
    assert pieces("'Don't,' she said.") == ["‘", "don't", ",", "’", "she", "said", "."]
    assert pieces("well-known") == ["well", "@-@", "known"]


TEXTS = ["The cat sat.", "The dog sat, the cat ran.", "A dog!", "The end."]


def test_the_vocabulary_is_the_special_tokens_then_the_most_frequent_pieces() -> None:
    tokenizer = build_word_tokenizer(TEXTS, vocab_size=10)
    counts = Counter(piece for text in TEXTS for piece in pieces(text))
    # Most frequent first, ties alphabetical: "the" 4, "." 3, then "cat", "dog", "sat" with 2 each.
    expected = sorted(counts, key=lambda piece: (-counts[piece], piece))[:6]
    assert tokenizer.convert_ids_to_tokens(list(range(10))) == [*SPECIAL_TOKENS, *expected]
    assert expected[:2] == ["the", "."] and len(tokenizer) == 10


def test_every_text_opens_with_bos_and_pads_on_the_side_asked() -> None:
    tokenizer = build_word_tokenizer(TEXTS, vocab_size=20, padding_side="right")
    special_ids = (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id)
    assert special_ids == (0, 1, 2, 3)
    batch = tokenizer(["The cat sat.", "A dog!"], padding=True)["input_ids"]
    assert batch[0][0] == batch[1][0] == tokenizer.bos_token_id
    assert batch[1][-1] == tokenizer.pad_token_id


def test_unknown_words_become_unk_and_vanish_when_specials_are_skipped() -> None:
    tokenizer = build_word_tokenizer(TEXTS, vocab_size=20)
    assert round_trip(tokenizer, "The zebra sat.", skip_special_tokens=False) == f"<bos> the {UNK} sat."
    assert round_trip(tokenizer, "The zebra sat.") == "the sat."


def test_vocab_size_must_leave_room_for_words() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        build_word_tokenizer(TEXTS, vocab_size=len(SPECIAL_TOKENS))


# --- on the real corpus -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_split() -> TextSplit:
    return split_examples(load_corpus().texts, num_heldout=1000, seed=0)


@pytest.fixture(scope="module")
def real_tokenizer(real_split: TextSplit) -> PreTrainedTokenizerFast:
    return build_word_tokenizer([example.text for example in real_split.train], vocab_size=4096)


def test_held_out_text_mostly_decodes_to_itself(real_split: TextSplit, real_tokenizer: PreTrainedTokenizerFast) -> None:
    vocab = real_tokenizer.get_vocab()
    texts = [example.text for example in real_split.heldout]
    words = [piece for text in texts for piece in pieces(text) if piece[0].isalpha()]
    unknown = sum(word not in vocab for word in words) / len(words)
    # At 4,096 tokens about one held-out word in eight is <unk> (13% at seed 0).
    assert 0.05 < unknown < 0.16
    known = [text for text in texts if all(piece in vocab for piece in pieces(text))]
    exact = sum(round_trip(real_tokenizer, text) == " ".join(text.split()).lower() for text in known)
    assert len(known) > 100 and exact / len(known) > 0.95


def test_decoding_then_encoding_gives_the_same_tokens(real_split: TextSplit,
                                                      real_tokenizer: PreTrainedTokenizerFast) -> None:
    # The trainer decodes what a policy writes with skip_special_tokens=True (ppo_core.rollout.collect), for the gold
    # scorer and a reward model that may encode it again: the same tokens must come back, less the <unk>s. Where an
    # <unk> was dropped, a mark beside it can change sides ("an all-<unk>." gives "an all -."): rare, and allowed.
    unk = real_tokenizer.unk_token_id
    shifted = []
    for example in real_split.heldout:
        ids = real_tokenizer(example.text)["input_ids"]
        again = real_tokenizer(real_tokenizer.decode(ids, skip_special_tokens=True))["input_ids"]
        if again != [token for token in ids if token != unk]:
            assert unk in ids, example.text
            shifted.append(example.text)
    assert len(shifted) < 0.03 * len(real_split.heldout)


def test_a_saved_tokenizer_loads_and_works_alike(tmp_path: Path, real_split: TextSplit,
                                                 real_tokenizer: PreTrainedTokenizerFast) -> None:
    real_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.padding_side == "left" and len(loaded) == 4096
    for example in real_split.heldout[:100]:
        ids = real_tokenizer(example.text)["input_ids"]
        assert loaded(example.text)["input_ids"] == ids
        assert loaded.decode(ids, skip_special_tokens=True) == real_tokenizer.decode(ids, skip_special_tokens=True)
