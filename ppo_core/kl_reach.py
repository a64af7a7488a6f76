"""The old path of :mod:`ppo_core.algorithm.kl_reach`, kept for one release."""

from __future__ import annotations

from ppo_core.algorithm.kl_reach import adaptive_reach

__all__ = ["adaptive_reach"]
