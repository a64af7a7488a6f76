"""A word-level tokenizer for the shortest-path task, built offline with ``tokenizers``.

One token per word: the prompt words, one name per node, and four special tokens. The
post-processor prepends ``<bos>`` to every encoded text (prompts, SFT sequences and RM
inputs alike), so the same call gives the same ids everywhere. ``<pad>`` is distinct from
``<eos>`` so a padded batch never looks like it ends early.
"""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from ppo_core.tasks.graph.text import PROMPT_WORDS

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)


def build_tokenizer(num_nodes: int, model_max_length: int, padding_side: str) -> PreTrainedTokenizerFast:
    """Return the task tokenizer for a graph on ``num_nodes`` nodes.

    ``padding_side`` is ``"left"`` for the policy (batched generation continues the
    prompts on the right) and ``"right"`` for the reward model (which reads the last
    non-pad token; right padding keeps absolute positions the same as in training).
    """
    words = [*SPECIAL_TOKENS, *PROMPT_WORDS, *(str(n) for n in range(num_nodes))]
    vocab = {word: index for index, word in enumerate(words)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A $B",
        special_tokens=[(BOS, vocab[BOS])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side=padding_side,
        # Cleanup would glue punctuation such as ":" to its neighbour and break the text round trip.
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
