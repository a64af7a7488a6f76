"""The parameters that fully determine a built text task (and therefore its cache key), beside the graph task's.

>>> TextTaskParams(seed=0, num_heldout=64, vocab_size=512, n_layer=1, n_embd=32, n_head=2, n_positions=48,
...                sft_steps=50, sft_batch_size=32, sft_lr=3e-3, response_length=16, rm_train_pairs=200,
...                rm_heldout_pairs=100, rm_epochs=2, rm_batch_size=32, rm_lr=2e-3,
...                rm_responses_per_prompt=2).cache_key().isalnum()
True
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from ppo_core.tasks.params import TrainingParams

TEXT_BUILD_VERSION = 2
"""Bumped whenever the text build changes what a given set of parameters produces, so old cache entries are not
silently reused."""


@dataclass(frozen=True)
class TextTaskParams(TrainingParams):
    """Everything a text (fortunes) task build depends on, beside what every task's build reads
    (:class:`TrainingParams`); the build is a pure function of this and the corpus."""

    num_heldout: int
    """Distinct prompts held out of every training stage: the task's evaluation prompts."""
    vocab_size: int
    """Tokens of the word-level tokenizer, the four special ones included; rarer words become ``<unk>``."""
    response_length: int
    """Most new tokens per response, at build time and in PPO."""
    rm_responses_per_prompt: int
    """SFT samples per prompt for the pairs (paired first with second, third with fourth, ...)."""
    rm_reference_pairs: int = 0
    """Gold-labelled pairs of two texts' human continuations, each cut to ``response_length`` tokens, added to the
    proxy's training pairs: up to this many, and up to a tenth as many held out (fewer when the texts run out).
    Fluent English the proxy learns gold on, beside the SFT policy's own samples, so that it still reads a
    pretrained model's fluent responses (see ``rm_pairs.py``)."""
    eval_samples_per_prompt: int = 8
    """SFT samples per held-out prompt for the build's gold report."""
    gold_version: int = 1
    """Which gold the task scores with (``fluency.GOLD_VERSIONS``): 1 reads a response's words, 2 its text as well,
    so that symbols, scripts, code, markup and lists do not pass for English, and 3 its word order as well, so
    that function words in no grammatical order do not either."""
    pair_policy: str | None = None
    """The model whose samples make the proxy's pairs, and which the task names as its policy: None for the
    companion trained here; else a model path or packaged name (``smollm2-135m-instruct``), so that the proxy
    learns gold on the text the policy PPO starts from actually writes."""
    proxy_version: int = 1
    """Where the proxy reward model's training on the pairs starts (``proxy.PROXY_VERSIONS``): 1 from the companion
    policy's transformer, 2 from a fresh GPT-2 of the task's shape that shares no weights with any policy."""

    def cache_key(self) -> str:
        """A 12-hex-digit hash of the parameters, the text build's version and the task's kind."""
        fields = asdict(self)
        # Fields added after tasks were first cached join the hash only when set, so a task built before keeps its
        # key (and its cache) when nothing about it changed.
        for name, default in _LATER_DEFAULTS.items():
            if fields[name] == default:
                del fields[name]
        # The kind keeps a text task's key apart from any graph task's, whatever fields the two ever share.
        payload = json.dumps({"kind": "fortunes", "build_version": TEXT_BUILD_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


_LATER_DEFAULTS = {"gold_version": 1, "pair_policy": None, "proxy_version": 1}
