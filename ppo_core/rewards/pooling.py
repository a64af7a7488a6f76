"""Where a one-label sequence classifier's score is read: at the last attended token, as transformers reads it, or
averaged over every attended token.

A reward model says which in its config (``score_pooling``, saved in ``config.json``); one without the key is read
at the last token. The mean suits a head trained on a pretrained model's token states averaged over a text (a probe):
a linear head ``w`` on the mean state is the mean of ``w`` on each state, so the classifier's own head, applied at
every token and averaged, reads exactly what the probe learned.

>>> import torch
>>> pooled_scores(torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[1, 1, 0]]), "mean").tolist()
[2.0]
>>> pooled_scores(torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[1, 1, 0]]), "last").tolist()
[3.0]
"""

from __future__ import annotations

from typing import Any, Literal

import torch

SCORE_POOLING_KEY = "score_pooling"
"""The config attribute that names a reward model's pooling."""

Pooling = Literal["last", "mean"]
POOLINGS: tuple[Pooling, ...] = ("last", "mean")


def score_pooling(config: Any) -> Pooling:
    """The pooling ``config`` names (``"last"`` when it names none); ``ValueError`` naming the known ones otherwise."""
    pooling = getattr(config, SCORE_POOLING_KEY, "last")
    if pooling not in POOLINGS:
        raise ValueError(f"{SCORE_POOLING_KEY} {pooling!r} is not one of {', '.join(POOLINGS)}")
    return pooling  # type: ignore[no-any-return,unused-ignore]  # checked against POOLINGS above


def last_attended(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each row's last attended position, found from the mask (rows may be padded on both sides)."""
    return attention_mask.shape[1] - 1 - attention_mask.long().flip(dims=[1]).argmax(dim=1)


def pooled_scores(token_scores: torch.Tensor, attention_mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """One score per row from per-token scores ``s[b, t]``: ``s[b, last(b)]`` for ``"last"``; for ``"mean"``,
    ``sum_t m[b, t] s[b, t] / max(1, sum_t m[b, t])`` (a row with no attended token scores 0)."""
    if pooling == "last":
        return token_scores[torch.arange(token_scores.shape[0], device=token_scores.device),
                            last_attended(attention_mask)]
    mask = attention_mask.to(token_scores.dtype)
    return (token_scores * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
