"""The old path of :mod:`ppo_core.models.gguf`, kept for one release."""

from __future__ import annotations

from ppo_core.models.gguf import PACKAGED, cached_model_dir, content_hash, gguf_file

__all__ = ["PACKAGED", "cached_model_dir", "content_hash", "gguf_file"]
