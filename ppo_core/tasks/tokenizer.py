"""The word-level tokenizer both built-in tasks use, built offline with ``tokenizers``: four special tokens first,
then one token per entry of the task's vocabulary.

The post-processor prepends ``<bos>`` to every encoded text (prompts, SFT sequences and reward-model inputs alike), so
the same call gives the same ids everywhere. ``<pad>`` is distinct from ``<eos>`` so a padded batch never looks like
it ends early. ``padding_side`` is ``"left"`` for the policy (batched generation continues the prompts on the right)
and ``"right"`` for a reward model (which reads the last non-pad token; right padding keeps absolute positions the
same as in training).
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)


def word_level_tokenizer(
    words: Sequence[str],
    model_max_length: int,
    padding_side: str,
    pre_tokenizer: pre_tokenizers.PreTokenizer,
    normalizer: normalizers.Normalizer | None = None,
    decoder: decoders.Decoder | None = None,
) -> PreTrainedTokenizerFast:
    """A tokenizer whose ids are :data:`SPECIAL_TOKENS` then ``words`` in order, anything else ``<unk>``; the task
    splits text with its ``pre_tokenizer`` (after its ``normalizer``) and joins tokens with its ``decoder`` (None:
    tokenizers' default, a space between tokens)."""
    vocab = {word: index for index, word in enumerate([*SPECIAL_TOKENS, *words])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizer
    if decoder is not None:
        backend.decoder = decoder
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side=padding_side,
        # transformers' clean-up would glue punctuation such as ":" to its neighbour, breaking the graph task's text
        # round trip, and blur where the text task's decoder has already placed it.
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
