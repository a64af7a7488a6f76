"""Helpers for widgets whose options change as a study runs, and for showing model text safely."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import streamlit as st

_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|>~<$])")


def keep_valid(key: str, options: Sequence[Any], default: Any) -> None:
    """Reset a keyed widget's stored value when it is no longer among ``options`` (before drawing it)."""
    value = st.session_state.get(key)
    if isinstance(value, list):
        kept = [v for v in value if v in options]
        if kept != value:
            st.session_state[key] = kept
    elif key not in st.session_state or value not in options:
        st.session_state[key] = default


def escape_markdown(text: str) -> str:
    """Model-written text shown inside markdown, so '#', '*' or '<' in it are printed, not interpreted."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", text)


def number(value: Any, digits: int = 4) -> str:
    """A score for display: '—' when missing."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{float(value):.{digits}g}"
