"""Small sets of gold-scored responses to a few prompts, made by hand, for the proxy's pairs and fidelity tests."""

from __future__ import annotations

import random

from ppo_core.tasks.fortunes.pairs import ScoredResponse

PROMPTS = ("If a man", "The boy stood", "When in doubt,", "Love is")


def scored_responses(per_prompt: int = 4, seed: int = 0) -> list[ScoredResponse]:
    """``per_prompt`` responses to each of :data:`PROMPTS`, a prompt's together, with golds in [0, 1] drawn from
    ``seed`` (some apart by less than the pairs' margin, an exact tie per prompt of two or more)."""
    rng = random.Random(seed)
    scored: list[ScoredResponse] = []
    for prompt in PROMPTS:
        golds = [round(rng.random(), 2) for _ in range(per_prompt)]
        if per_prompt > 1:
            golds[-1] = golds[0]
        scored.extend(ScoredResponse(prompt, f"{prompt} answer {i}", gold) for i, gold in enumerate(golds))
    return scored
