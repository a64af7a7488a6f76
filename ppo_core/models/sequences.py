"""Token-level bookkeeping for left-padded prompts followed by right-padded responses."""

from __future__ import annotations

import torch


def response_mask_after_stop(responses: torch.Tensor, stop_token_id: int | None) -> torch.Tensor:
    """Mask of the tokens that belong to each response: everything up to and including the first stop token.

    m_t = 1 if no stop token occurs strictly before t; every position is valid when there is no stop token.
    """
    if stop_token_id is None:
        return torch.ones_like(responses, dtype=torch.bool)
    is_stop = responses == stop_token_id
    stops_before = torch.cumsum(is_stop.long(), dim=1) - is_stop.long()
    return stops_before == 0


def contains_stop(responses: torch.Tensor, stop_token_id: int | None) -> torch.Tensor:
    """Whether each response emitted the stop token (always False without one)."""
    if stop_token_id is None:
        return torch.zeros(responses.shape[0], dtype=torch.bool, device=responses.device)
    return (responses == stop_token_id).any(dim=1)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """p_t = (number of attended tokens before t), so the first real token sits at 0 whatever the left padding."""
    return (torch.cumsum(attention_mask.long(), dim=1) - 1).clamp(min=0)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """log pi(y_t) = log_softmax(z_t / T)[y_t]: the temperature used for sampling, also in the update."""
    scaled = logits.float() / temperature
    return torch.gather(scaled.log_softmax(dim=-1), -1, tokens.unsqueeze(-1)).squeeze(-1)
