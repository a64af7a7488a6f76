"""A tiny Llama written as a GGUF file, as llama.cpp writes one: for tests of GGUF loading (and of anything that
trains from a GGUF policy) that must never touch a real model.

The tokenizer is ``tools.tiny_models.chatml_tokenizer()`` (byte-level BPE trained on the tiny corpus, ChatML's
special tokens, its chat template), stored under llama.cpp's ``tokenizer.ggml.*`` keys with model ``gpt2``, which
is what transformers' GGUF reader rebuilds a byte-level tokenizer from. The weights are random, drawn from
``seed``; the feed-forward matrices are stored as Q8_0 blocks (``quantized``), the rest as F32, so that loading
the file dequantises at least one block type::

    path = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import quantize

from tools.tiny_models import chatml_tokenizer

CONTROL = 3  # llama.cpp's token type for special tokens
NORMAL = 1


@dataclass(frozen=True)
class TinyLlamaShape:
    """The shapes of the tiny Llama: every matrix's rows are a multiple of 32, as Q8_0's blocks need."""

    layers: int = 2
    hidden: int = 32
    heads: int = 4
    kv_heads: int = 2
    feed_forward: int = 64
    context: int = 128


def write_tiny_llama_gguf(path: Path, seed: int = 0, shape: TinyLlamaShape = TinyLlamaShape(),
                          quantized: bool = True) -> Path:
    """Write the tiny Llama to ``path`` (its directory is made) and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny llama for tests")
    writer.add_context_length(shape.context)
    writer.add_block_count(shape.layers)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.hidden // shape.heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    vocab_size = _add_tokenizer(writer)
    writer.add_vocab_size(vocab_size)
    for name, array in _weights(shape, vocab_size, seed).items():
        if quantized and ".ffn_" in name:
            writer.add_tensor(name, quantize(array, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_tokenizer(writer: gguf.GGUFWriter) -> int:
    """The ChatML tokenizer's vocabulary, merges, special ids and chat template; the vocabulary's size."""
    tokenizer = chatml_tokenizer()
    specials = set(tokenizer.all_special_tokens)
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([CONTROL if token in specials else NORMAL for token in tokens])
    writer.add_token_merges([" ".join(merge) if isinstance(merge, list) else merge for merge in merges])
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(str(tokenizer.chat_template))
    return len(tokens)


def _weights(shape: TinyLlamaShape, vocab_size: int, seed: int) -> dict[str, np.ndarray]:
    """Every tensor under llama.cpp's name, in (out, in) order; the writer stores dimensions reversed, as ggml
    does. No ``output.weight``: the head is tied to the embedding."""
    rng = np.random.default_rng(seed)
    kv_width = shape.kv_heads * (shape.hidden // shape.heads)

    def matrix(rows: int, columns: int) -> np.ndarray:
        return rng.normal(0.0, 0.2, (rows, columns)).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + rng.normal(0.0, 0.05, shape.hidden)).astype(np.float32)

    weights = {"token_embd.weight": matrix(vocab_size, shape.hidden)}
    for layer in range(shape.layers):
        block = f"blk.{layer}"
        weights.update({
            f"{block}.attn_norm.weight": norm(),
            f"{block}.attn_q.weight": matrix(shape.hidden, shape.hidden),
            f"{block}.attn_k.weight": matrix(kv_width, shape.hidden),
            f"{block}.attn_v.weight": matrix(kv_width, shape.hidden),
            f"{block}.attn_output.weight": matrix(shape.hidden, shape.hidden),
            f"{block}.ffn_norm.weight": norm(),
            f"{block}.ffn_gate.weight": matrix(shape.feed_forward, shape.hidden),
            f"{block}.ffn_up.weight": matrix(shape.feed_forward, shape.hidden),
            f"{block}.ffn_down.weight": matrix(shape.hidden, shape.feed_forward),
        })
    weights["output_norm.weight"] = norm()
    return weights
