"""Statistics over the valid (unpadded) tokens of a batch.

Padded positions may hold anything, NaN and inf included: they are selected away with
``torch.where`` rather than multiplied by zero, because ``NaN * 0`` is NaN.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum_t m_t x_t over all positions, ignoring whatever padded positions hold."""
    return torch.where(mask.bool(), values, torch.zeros_like(values)).sum()


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """mean(x) = sum_t m_t x_t / sum_t m_t; 0 when nothing is valid."""
    return masked_sum(values, mask) / mask.sum().clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """var(x) = sum_t m_t (x_t - mean)^2 / (n - 1), with n = sum_t m_t (Bessel-corrected)."""
    mean = masked_mean(values, mask)
    count = mask.sum()
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased and count > 1:
        variance = variance * count / (count - 1)
    return variance


def local(value: torch.Tensor) -> torch.Tensor:
    """A statistic of this process's rows as it is: the ``total`` of a single-process run."""
    return value


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8,
    total: Callable[[torch.Tensor], torch.Tensor] = local,
) -> torch.Tensor:
    """whiten(x) = (x - mean) / sqrt(var + eps), plus the mean back when ``shift_mean`` is False, with
    mean = sum_t m_t x_t / n and var = sum_t m_t (x_t - mean)^2 / (n - 1), n = sum_t m_t.

    ``total`` sums a statistic over every process's rows (the identity in one process), so that a data-parallel
    run whitens its global batch, as one process holding all of it would. Padded positions come back as 0.
    """
    count = total(mask.sum().to(values.dtype))
    mean = total(masked_sum(values, mask)) / count.clamp(min=1)
    variance = total(masked_sum((values - mean) ** 2, mask)) / (count - 1).clamp(min=1)
    whitened = (values - mean) * torch.rsqrt(variance + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask.bool(), whitened, torch.zeros_like(whitened))


def per_row_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """s_i = sum_t m_it x_it, one number per sequence."""
    return torch.where(mask.bool(), values, torch.zeros_like(values)).sum(dim=1)
