"""Samples of the policy PPO will start from, for the proxy's pairs: drawn a chunk at a time, each chunk kept on disk
as it finishes, so an interrupted build resumes where it stopped.

A proxy trained on another model's text says little about the text the policy writes (a proxy trained on the
companion's word salad had a Spearman correlation of 0.27 with gold on SmolLM2-135M-Instruct's responses), so a task
with a ``pair_policy`` draws its pairs from that model, as RLHF labels the SFT policy's own samples. Chunk ``i`` is
sampled with a generator seeded by ``(seed, i)``, so a resumed build draws what an uninterrupted one would have.

>>> chunked(["a", "b", "c"], 2)
[['a', 'b'], ['c']]
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ppo_core.tasks.sampling import sample_responses_cached

logger = logging.getLogger(__name__)

PROMPTS_PER_CHUNK = 16
"""Prompts sampled together (times the responses per prompt: a batch of 64 at 4 each, where SmolLM2 samples fastest
on 2 CPU cores), and the unit an interrupted build loses at most."""

@dataclass(frozen=True)
class PolicySample:
    """One response of the pair policy to a prompt."""

    prompt: str
    response: str


def chunked(items: Sequence[str], size: int) -> list[list[str]]:
    """``items`` cut into consecutive lists of ``size`` (the last one shorter)."""
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def _finished_chunks(path: Path) -> dict[int, list[PolicySample]]:
    """The chunks a previous build wrote whole; a line cut short by an interruption is dropped and sampled again."""
    chunks: dict[int, list[PolicySample]] = {}
    if not path.is_file():
        return chunks
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            chunks[int(record["chunk"])] = [PolicySample(p, r) for p, r in record["samples"]]
        except (ValueError, KeyError, TypeError):
            continue
    return chunks


def _line(index: int, samples: list[PolicySample]) -> str:
    return json.dumps({"chunk": index, "samples": [[s.prompt, s.response] for s in samples]}) + "\n"


def policy_chunks(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                  responses_per_prompt: int, max_new_tokens: int, seed: int,
                  path: Path) -> Iterator[list[PolicySample]]:
    """Chunk by chunk, ``responses_per_prompt`` samples (temperature 1) of each prompt, a prompt's samples together:
    chunks already in ``path`` are read back, each new one is appended as it finishes. A caller that has enough
    stops iterating, and the chunks after are never drawn."""
    done = _finished_chunks(path)
    chunks = chunked(prompts, PROMPTS_PER_CHUNK)
    if done:
        logger.info("resuming the pair policy's samples in %s: %d chunks already drawn", path, len(done))
    # The whole chunks written again, so that a line an interruption cut short is gone before the next is appended.
    staged = path.with_name(path.name + ".tmp")
    staged.write_text("".join(_line(index, samples) for index, samples in sorted(done.items())))
    staged.replace(path)
    started, drawn, report_every = time.perf_counter(), 0, max(1, len(chunks) // 20)
    with path.open("a") as out:
        for index, chunk in enumerate(chunks):
            if index not in done:
                batch = [prompt for prompt in chunk for _ in range(responses_per_prompt)]
                generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
                responses = sample_responses_cached(model, tokenizer, batch, 1.0, max_new_tokens, generator)
                done[index] = [PolicySample(p, r) for p, r in zip(batch, responses, strict=True)]
                out.write(_line(index, done[index]))
                out.flush()
                drawn += 1
                if drawn % report_every == 0:  # about twenty lines over the draw, each with the time it has left
                    left = sum(1 for later in range(index + 1, len(chunks)) if later not in done)
                    per_chunk = (time.perf_counter() - started) / drawn
                    logger.info("sampling the pair policy's responses: chunk %d of %d, about %.0f s left at most",
                                index + 1, len(chunks), left * per_chunk)
            yield done[index]
