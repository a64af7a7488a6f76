"""The old path of :mod:`ppo_core.models.paths`, kept for one release."""

from __future__ import annotations

from ppo_core.models.paths import is_function_spec, require_model, resolve_model, resolve_models

__all__ = ["is_function_spec", "require_model", "resolve_model", "resolve_models"]
