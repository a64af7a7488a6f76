"""Page state in the URL: each widget named here reads its value from the query string when a page opens (a copied
link, a reload) and writes it back after every run, so a link opens the same view. The study and the selected
trials are kept by the sidebar (dashboard.ui); these are the pages' own choices."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st


@dataclass(frozen=True)
class UrlField:
    """A widget key's spelling in the URL: how its text becomes the widget's value and back."""

    parse: Callable[[str], Any]
    render: Callable[[Any], str]


def _numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip().lstrip("-").isdigit()]


TEXT = UrlField(str, str)
NUMBER = UrlField(float, lambda value: f"{value:g}")
TEXTS = UrlField(lambda text: [part for part in text.split(",") if part], lambda values: ",".join(map(str, values)))
NUMBERS = UrlField(_numbers, lambda values: ",".join(str(v) for v in values))

FIELDS: dict[str, UrlField] = {
    "curves_x": TEXT,
    "curves_smoothing": NUMBER,
    "curves_more": TEXTS,
    "analysis_view": TEXT,
    "compare_trials": NUMBERS,
    "frontier_fit_scope": TEXT,
}
"""Widget key -> its URL field; the query parameter is named after the key."""


def restore(key: str) -> None:
    """Before the widget is made: the URL's value for ``key``, unless this session already chose one. A value the
    widget cannot take is left for the page's own check (keep_valid) to replace."""
    if key in st.session_state or key not in st.query_params:
        return
    with contextlib.suppress(ValueError):  # a hand-edited link: the widget's default stands
        st.session_state[key] = FIELDS[key].parse(st.query_params[key])


def keep(key: str, default: Any = None) -> None:
    """After the widget is made: its value in the URL, or none where it is the default."""
    value = st.session_state.get(key)
    if value is None or value == default or value == []:
        st.query_params.pop(key, None)
    else:
        st.query_params[key] = FIELDS[key].render(value)
