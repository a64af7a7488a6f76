"""Results as strict JSON."""

from __future__ import annotations

from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` with every NaN as None: strict JSON has no NaN (an interval over one run is NaN at both ends)."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value
