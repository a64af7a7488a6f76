"""Tiny, randomly initialised Hugging Face causal LMs and reward models, built offline, for tests and examples.

Every tokenizer here is trained from scratch with the ``tokenizers`` library on a small built-in corpus (nothing
comes from the Hugging Face hub) and wrapped in ``transformers.PreTrainedTokenizerFast``; every model is a random
tiny config. The writers save model and tokenizer with ``save_pretrained``, so a directory they write loads with
``AutoTokenizer.from_pretrained`` and ``AutoModelForCausalLM`` (or ``AutoModelForSequenceClassification``) exactly
as a user's own checkpoint would.

The four policy families cover the tokenizer styles users bring:

* ``gpt2``: GPT-2 byte-level BPE, ``<|endoftext|>`` as bos/eos/unk, appended last in the vocabulary, no pad token.
* ``gpt_neox``: Pythia-style byte-level BPE with ``<|endoftext|>`` (id 0) and a ``<|padding|>`` pad token (id 1).
* ``llama``: SentencePiece-style Metaspace BPE (or Unigram), ``<unk>``/``<s>``/``</s>`` = 0/1/2, a post-processor
  that prepends ``<s>``, NO pad token, and a Llama-2/Mistral ``[INST] ... [/INST]`` chat template whose template
  text itself starts with ``<s>`` (so tokenizing rendered chat text needs ``add_special_tokens=False``, as with the
  real models).
* ``qwen2``: ChatML byte-level BPE with ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` appended last, no bos,
  eos ``<|im_end|>``, pad ``<|endoftext|>``, a ChatML chat template, and (like Qwen's files) a
  ``generation_config.json`` whose ``eos_token_id`` lists both ``<|im_end|>`` and ``<|endoftext|>``.

``python -m tools.tiny_models OUTDIR`` writes every family plus reward models under OUTDIR and prints a summary.
"""

from __future__ import annotations

import argparse
import string
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    GenerationConfig,
    GPT2Config,
    GPT2ForSequenceClassification,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    GPTNeoXForSequenceClassification,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2ForSequenceClassification,
)

Architecture = Literal["gpt2", "gpt_neox", "llama", "qwen2"]
TokenizerKind = Literal["byte_level", "metaspace", "chatml", "word_level"]

# The policy and the tokenizers learn from this text. It holds the words of the prompt datasets in
# tools.tiny_data ("write words with the letter e:"), every lowercase letter on its own (so each letter is a
# single token a tiny policy can learn to emit), and the Llama chat markers, so BPE merges them into few tokens.
# (ChatML's markers are special tokens of the Qwen2 tokenizer, so they need no place here.)
CORPUS: tuple[str, ...] = (
    "write words with the letter e:",
    "Write words with the letter a.",
    "use the letter o a lot:",
    "Use the letter s a lot.",
    "say many words that contain i:",
    "Say many words that contain n.",
    "think of words with t in them:",
    "Think of words with r in them.",
    "the quick brown fox jumps over the lazy dog",
    "The Quick Brown Fox Jumps Over The Lazy Dog!",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z",
    "0 1 2 3 4 5 6 7 8 9 10 42 100",
    "see the tree, eat the cheese, keep the seeds; sleep, feel, need, free.",
    "a cat sat on a mat and had a nap at an old farm",
    "tonight the moon is soon over the pool, good food and cool rooms",
    "sisters sell sea shells; stars rise; sit still; test this set",
    "it is in the inn; invite nine tiny kittens into it",
    "hello world, this is a small test of a tiny model.",
    "you are a helpful assistant. answer the user in a few words.",
    "[INST] hello [/INST] hi there</s>",
    "[INST] write words with the letter e [/INST] tree see eel",
    'yes no maybe: why? because (it) [is] {so} - ok\' "quoted"',
    "#1 $2 %3 &4 *5 +6 =7 /8 \\9 |10 ~11 `12 ^13 @14 _15 <16>",
)

# Sampling defaults that would visibly change generation if a trainer inherited them from a checkpoint's
# generation_config.json (Qwen's files ship sampling defaults like these). The suppressed and banned ids are small
# ids that exist in every tokenizer here; ``poisoned_generation_defaults`` points them at the tokens of common
# letters instead, which also stops a letter reward from rising.
POISONED_GENERATION_DEFAULTS: dict[str, Any] = {
    "do_sample": True,
    "temperature": 0.2,
    "top_k": 2,
    "top_p": 0.5,
    "repetition_penalty": 3.0,
    "no_repeat_ngram_size": 1,
    "suppress_tokens": [3, 4, 5, 6],
    "bad_words_ids": [[7], [8]],
}

METASPACE = "▁"
LLAMA_SPECIALS = ("<unk>", "<s>", "</s>")

# Llama-2 / Mistral style. The closing " [/INST]" is written before an assistant turn, or at the end when
# add_generation_prompt is set, so a whole conversation renders exactly like Llama-2's
# "<s>[INST] q [/INST] a</s>", while a prompt rendered WITHOUT add_generation_prompt visibly lacks the marker
# that tells the model to answer (a trainer that forgets the flag shows up in tests).
LLAMA_CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system_message = none %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if not loop.first %}{{- ' ' }}{%- endif %}"
    "{{- '[INST] ' }}"
    "{%- if loop.first and system_message %}{{- system_message + '\\n\\n' }}{%- endif %}"
    "{{- message['content'] }}"
    "{%- if loop.last and add_generation_prompt %}{{- ' [/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- ' [/INST] ' + message['content'] + eos_token }}"
    "{%- else %}"
    "{{- raise_exception('Only system, user and assistant roles are supported, got ' + message['role']) }}"
    "{%- endif %}"
    "{%- endfor %}"
)


def chatml_chat_template(default_system: str | None = None) -> str:
    """Qwen2's ChatML template; ``default_system`` is added as the system turn when a chat has none, as Qwen2 does."""
    prelude = ""
    if default_system is not None:
        # A Jinja string literal: escape what would end it early.
        literal = default_system.replace("\\", "\\\\").replace("'", "\\'")
        prelude = (
            "{%- if not messages or messages[0]['role'] != 'system' %}"
            "{{- '<|im_start|>system\\n" + literal + "<|im_end|>\\n' }}{%- endif %}"
        )
    return (
        prelude + "{%- for message in messages %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


# --------------------------------------------------------------------------------------------------- tokenizers


def _corpus(extra: Sequence[str]) -> list[str]:
    # Repeat the corpus so BPE has counts to rank merges by; the words stay the same.
    return list(CORPUS) * 4 + list(extra)


def byte_level_bpe_tokenizer(
    *,
    vocab_size: int = 384,
    eos_token: str = "<|endoftext|>",
    pad_token: str | None = None,
    extra_special_tokens: Sequence[str] = (),
    special_tokens_first: bool = False,
    extra_corpus: Sequence[str] = (),
    model_max_length: int = 256,
) -> PreTrainedTokenizerFast:
    """A GPT-2 style byte-level BPE tokenizer; ``eos_token`` doubles as bos and unk, as in GPT-2.

    The 256 byte symbols are always in the vocabulary, so any text round-trips. Special tokens go after the trained
    vocabulary (GPT-2 and Qwen put theirs last) unless ``special_tokens_first`` (Pythia puts its first). ``pad_token``
    ``None`` leaves the tokenizer without one, like GPT-2's; a pad token equal to ``eos_token`` reuses it.
    """
    specials = list(dict.fromkeys([eos_token, *([pad_token] if pad_token else []), *extra_special_tokens]))
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=specials if special_tokens_first else [],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(extra_corpus), trainer)
    if not special_tokens_first:
        backend.add_special_tokens(specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=eos_token,
        eos_token=eos_token,
        unk_token=eos_token,
        pad_token=pad_token,
        model_max_length=model_max_length,
    )


def metaspace_tokenizer(
    *,
    model: Literal["bpe", "unigram"] = "bpe",
    vocab_size: int = 256,
    prepend_scheme: Literal["first", "always"] = "first",
    chat_template: str | None = LLAMA_CHAT_TEMPLATE,
    extra_corpus: Sequence[str] = (),
    model_max_length: int = 256,
) -> PreTrainedTokenizerFast:
    """A SentencePiece/Llama style tokenizer: "▁" for spaces, ``<unk>``/``<s>``/``</s>`` = 0/1/2, ``<s>`` prepended.

    It has no pad token, as Llama's has none. Characters outside printable ASCII map to ``<unk>`` (there is no byte
    fallback, to keep the vocabulary a few hundred tokens). Decoding drops the "▁" added in front of the first word,
    so ``decode(encode(text))`` gives ``text`` back for ASCII text that does not start with a space.
    """
    # Every printable ASCII character is a symbol of its own, so only non-ASCII text can ever hit <unk>.
    alphabet = sorted(set(string.printable) - set(string.whitespace) | {METASPACE, "\n"})
    backend: Tokenizer
    trainer: trainers.BpeTrainer | trainers.UnigramTrainer
    if model == "bpe":
        backend = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=2,
            special_tokens=list(LLAMA_SPECIALS),
            initial_alphabet=alphabet,
            show_progress=False,
        )
    else:
        backend = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=list(LLAMA_SPECIALS),
            unk_token="<unk>",
            initial_alphabet=alphabet,
            show_progress=False,
        )
    # SentencePiece replaces spaces with "▁" and splits in front of each; the decoder undoes both.
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme=prepend_scheme)
    backend.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme=prepend_scheme)
    backend.train_from_iterator(_corpus(extra_corpus), trainer)
    bos_id = backend.token_to_id("<s>")
    # Llama's fast tokenizer adds <s> in front of each sequence and nothing at the end.
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", bos_id)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=model_max_length,
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def chatml_tokenizer(
    *, vocab_size: int = 384, default_system: str | None = None, model_max_length: int = 256
) -> PreTrainedTokenizerFast:
    """Qwen2's tokenizer shape: byte-level BPE, eos ``<|im_end|>``, pad ``<|endoftext|>``, no bos, ChatML template."""
    tokenizer = byte_level_bpe_tokenizer(
        vocab_size=vocab_size,
        eos_token="<|endoftext|>",
        extra_special_tokens=("<|im_start|>", "<|im_end|>"),
        model_max_length=model_max_length,
    )
    # Qwen2 has no bos token; its eos (for chat models) is <|im_end|> and it pads with <|endoftext|>.
    tokenizer.bos_token = None
    tokenizer.unk_token = None
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.chat_template = chatml_chat_template(default_system)
    return tokenizer


def word_level_tokenizer(*, extra_words: Sequence[str] = (), model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """A small lowercase word-level tokenizer (a reward model with a vocabulary unlike any policy's).

    Its vocabulary is ``<pad>``, ``<eos>``, ``<unk>`` (ids 0, 1, 2), the single letters, and the corpus's words;
    punctuation is split off, and anything else becomes ``<unk>``. Decoding joins tokens with spaces, so it does
    not round-trip text exactly.
    """
    probe = Tokenizer(models.WordLevel(vocab={"<unk>": 0}, unk_token="<unk>"))
    probe.normalizer = normalizers.Lowercase()
    probe.pre_tokenizer = pre_tokenizers.Whitespace()
    words: dict[str, None] = dict.fromkeys(string.ascii_lowercase)
    for text in (*CORPUS, *extra_words):
        for word, _ in probe.pre_tokenizer.pre_tokenize_str(probe.normalizer.normalize_str(text)):
            words.setdefault(word)
    vocab = {token: index for index, token in enumerate(["<pad>", "<eos>", "<unk>", *words])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        model_max_length=model_max_length,
    )


class _TokenizerBuilder(Protocol):
    def __call__(self) -> PreTrainedTokenizerFast: ...


# The tokenizer each policy family ships with, by family; reward models pick theirs by TokenizerKind.
TOKENIZERS: dict[TokenizerKind, _TokenizerBuilder] = {
    "byte_level": lambda: byte_level_bpe_tokenizer(pad_token="<|pad|>"),
    "metaspace": metaspace_tokenizer,
    "chatml": chatml_tokenizer,
    "word_level": word_level_tokenizer,
}


# ------------------------------------------------------------------------------------------------------ configs


@dataclass(frozen=True)
class TinySize:
    """Model dimensions: small enough that a forward pass on a few hundred tokens takes milliseconds on a CPU."""

    hidden_size: int = 32
    num_layers: int = 2
    num_heads: int = 2
    max_position_embeddings: int = 256


def tiny_config(
    architecture: Architecture, tokenizer: PreTrainedTokenizerFast, size: TinySize | None = None, **overrides: Any
) -> PretrainedConfig:
    """A tiny config of ``architecture`` whose vocabulary size and special token ids match ``tokenizer``."""
    size = size or TinySize()
    # Token ids come from the tokenizer so that generation stops at its eos and padding finds its pad.
    ids: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config: PretrainedConfig
    if architecture == "gpt2":
        config = GPT2Config(
            n_embd=size.hidden_size,
            n_layer=size.num_layers,
            n_head=size.num_heads,
            n_positions=size.max_position_embeddings,
            tie_word_embeddings=True,
            **ids,
        )
    elif architecture == "gpt_neox":
        config = GPTNeoXConfig(
            hidden_size=size.hidden_size,
            num_hidden_layers=size.num_layers,
            num_attention_heads=size.num_heads,
            intermediate_size=4 * size.hidden_size,
            max_position_embeddings=size.max_position_embeddings,
            tie_word_embeddings=True,
            **ids,
        )
    elif architecture == "llama":
        config = LlamaConfig(
            hidden_size=size.hidden_size,
            intermediate_size=2 * size.hidden_size,
            num_hidden_layers=size.num_layers,
            num_attention_heads=size.num_heads,
            num_key_value_heads=size.num_heads,
            max_position_embeddings=size.max_position_embeddings,
            tie_word_embeddings=True,
            **ids,
        )
    elif architecture == "qwen2":
        config = Qwen2Config(
            hidden_size=size.hidden_size,
            intermediate_size=2 * size.hidden_size,
            num_hidden_layers=size.num_layers,
            num_attention_heads=size.num_heads,
            # Grouped-query attention, as in every Qwen2 checkpoint.
            num_key_value_heads=1,
            max_position_embeddings=size.max_position_embeddings,
            tie_word_embeddings=True,
            **ids,
        )
    else:
        raise ValueError(f"unknown architecture {architecture!r}; known: gpt2, gpt_neox, llama, qwen2")
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


# ------------------------------------------------------------------------------------------------------ writers


def poisoned_generation_defaults(tokenizer: PreTrainedTokenizerFast, letters: str = "aeost") -> dict[str, Any]:
    """``POISONED_GENERATION_DEFAULTS`` with ``suppress_tokens`` set to the single-letter tokens of ``letters``.

    Both the bare letter and its word-initial form ("e", "Ġe" or "▁e") are suppressed, so a policy that samples with
    these defaults can hardly ever write those letters, and a letter reward on them cannot rise.
    """
    vocab = tokenizer.get_vocab()
    suppressed = sorted(
        {vocab[piece] for letter in letters for piece in (letter, "Ġ" + letter, METASPACE + letter) if piece in vocab}
    )
    return {**POISONED_GENERATION_DEFAULTS, "suppress_tokens": suppressed}


def _generation_config(config: PretrainedConfig, defaults: Mapping[str, Any] | None, **ids: Any) -> GenerationConfig:
    fields: dict[str, Any] = {
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
        **ids,
        **(defaults or {}),
    }
    return GenerationConfig(**fields)


def _save(
    directory: Path,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _write_policy(
    architecture: Architecture,
    directory: Path,
    tokenizer: PreTrainedTokenizerFast,
    seed: int,
    size: TinySize | None,
    generation_defaults: Mapping[str, Any] | None,
    generation_ids: Mapping[str, Any] | None = None,
) -> Path:
    model_class: type[PreTrainedModel] = POLICY_CLASSES[architecture]
    config = tiny_config(architecture, tokenizer, size)
    # Seeded so two writes with the same seed give identical weights.
    torch.manual_seed(seed)
    model = model_class(config)
    model.generation_config = _generation_config(config, generation_defaults, **(generation_ids or {}))
    return _save(directory, model, tokenizer)


def write_gpt2(
    directory: Path,
    *,
    seed: int = 0,
    pad_token: str | None = None,
    size: TinySize | None = None,
    generation_defaults: Mapping[str, Any] | None = None,
) -> Path:
    """A GPT2LMHeadModel with a byte-level BPE tokenizer; no pad token unless ``pad_token`` names one, as in GPT-2."""
    tokenizer = byte_level_bpe_tokenizer(pad_token=pad_token)
    return _write_policy("gpt2", directory, tokenizer, seed, size, generation_defaults)


def write_gpt_neox(
    directory: Path,
    *,
    seed: int = 0,
    size: TinySize | None = None,
    generation_defaults: Mapping[str, Any] | None = None,
) -> Path:
    """A GPTNeoXForCausalLM with Pythia's token layout: ``<|endoftext|>`` id 0 (bos/eos/unk), ``<|padding|>`` id 1."""
    tokenizer = byte_level_bpe_tokenizer(pad_token="<|padding|>", special_tokens_first=True)
    return _write_policy("gpt_neox", directory, tokenizer, seed, size, generation_defaults)


def write_llama(
    directory: Path,
    *,
    seed: int = 0,
    tokenizer_model: Literal["bpe", "unigram"] = "bpe",
    prepend_scheme: Literal["first", "always"] = "first",
    size: TinySize | None = None,
    generation_defaults: Mapping[str, Any] | None = None,
) -> Path:
    """A LlamaForCausalLM with a Metaspace tokenizer: ``<s>`` prepended, no pad token, ``[INST]`` chat template."""
    tokenizer = metaspace_tokenizer(model=tokenizer_model, prepend_scheme=prepend_scheme)
    return _write_policy("llama", directory, tokenizer, seed, size, generation_defaults)


def write_qwen2(
    directory: Path,
    *,
    seed: int = 0,
    default_system: str | None = None,
    size: TinySize | None = None,
    generation_defaults: Mapping[str, Any] | None = None,
) -> Path:
    """A Qwen2ForCausalLM with a ChatML tokenizer; its generation config stops at <|im_end|> or <|endoftext|>."""
    tokenizer = chatml_tokenizer(default_system=default_system)
    # Qwen2's generation_config.json lists both stop tokens while config.json names only <|im_end|>.
    stops = {"eos_token_id": [tokenizer.eos_token_id, tokenizer.pad_token_id]}
    return _write_policy("qwen2", directory, tokenizer, seed, size, generation_defaults, stops)


def write_reward_model(
    directory: Path,
    *,
    architecture: Architecture = "gpt2",
    tokenizer: TokenizerKind | PreTrainedTokenizerFast = "byte_level",
    seed: int = 0,
    size: TinySize | None = None,
) -> Path:
    """A one-label sequence classifier (a reward model) loadable with ``AutoModelForSequenceClassification``.

    ``tokenizer`` is a kind from ``TOKENIZERS`` or a tokenizer object, so it can differ from the policy's. A
    tokenizer without a pad token gets ``<pad>`` added: sequence classifiers find each row's last real token
    through ``config.pad_token_id``, and a distinct pad keeps a trailing eos from being taken for padding.
    """
    backend = TOKENIZERS[tokenizer]() if isinstance(tokenizer, str) else tokenizer
    if backend.pad_token is None:
        backend.add_special_tokens({"pad_token": "<pad>"})
    config = tiny_config(architecture, backend, size, num_labels=1)
    torch.manual_seed(seed)
    model = REWARD_CLASSES[architecture](config)
    return _save(directory, model, backend)


POLICY_CLASSES: dict[Architecture, type[PreTrainedModel]] = {
    "gpt2": GPT2LMHeadModel,
    "gpt_neox": GPTNeoXForCausalLM,
    "llama": LlamaForCausalLM,
    "qwen2": Qwen2ForCausalLM,
}
REWARD_CLASSES: dict[Architecture, type[PreTrainedModel]] = {
    "gpt2": GPT2ForSequenceClassification,
    "gpt_neox": GPTNeoXForSequenceClassification,
    "llama": LlamaForSequenceClassification,
    "qwen2": Qwen2ForSequenceClassification,
}
ARCHITECTURES: dict[Architecture, Callable[..., Path]] = {
    "gpt2": write_gpt2,
    "gpt_neox": write_gpt_neox,
    "llama": write_llama,
    "qwen2": write_qwen2,
}


# ---------------------------------------------------------------------------------------------------------- CLI


def write_all(outdir: Path, seed: int = 0) -> dict[str, Path]:
    """Every policy family, a Qwen2 with poisoned sampling defaults, and two reward models, under ``outdir``."""
    outdir = Path(outdir)
    written: dict[str, Path] = {name: writer(outdir / name, seed=seed) for name, writer in ARCHITECTURES.items()}
    qwen_tokenizer = chatml_tokenizer()
    written["qwen2_poisoned_generation"] = write_qwen2(
        outdir / "qwen2_poisoned_generation",
        seed=seed,
        generation_defaults=poisoned_generation_defaults(qwen_tokenizer),
    )
    written["reward_gpt2_byte_level"] = write_reward_model(outdir / "reward_gpt2_byte_level", seed=seed + 1)
    written["reward_llama_word_level"] = write_reward_model(
        outdir / "reward_llama_word_level", architecture="llama", tokenizer="word_level", seed=seed + 2
    )
    return written


def describe(directory: Path) -> str:
    """One line about a written model directory: its class, vocabulary, special tokens and size."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)

    def token(name: str) -> str:
        value = getattr(tokenizer, f"{name}_token")
        return f"{name}={value}({getattr(tokenizer, f'{name}_token_id')})" if value is not None else f"{name}=None"

    chat = "chat template" if tokenizer.chat_template else "no chat template"
    return (
        f"{directory}: {config.architectures[0]}, vocab {config.vocab_size}, "
        f"{' '.join(token(name) for name in ('bos', 'eos', 'pad'))}, {chat}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.tiny_models", description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="directory to write the models under")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    # save_pretrained draws a progress bar per shard; the summary below is what a reader wants.
    hf_logging.disable_progress_bar()
    for directory in write_all(args.outdir, args.seed).values():
        print(describe(directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
