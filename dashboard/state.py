"""Session state shared by the sidebar and the pages: the study, the selected trials, auto-refresh."""

from __future__ import annotations

from collections.abc import Iterable

import streamlit as st

from dashboard.sources import StudyRef

STUDY_KEY = "study"
REFS_KEY = "_study_refs"  # label -> StudyRef for the picker's current options
SELECTED_KEY = "selected_trials"
REFRESH_KEY = "auto_refresh"
APP_RERUN_KEY = "_rerun_app"
REFRESH_EVERY_S = 5.0


def current_study() -> StudyRef | None:
    refs: dict[str, StudyRef] = st.session_state.get(REFS_KEY, {})
    return refs.get(st.session_state.get(STUDY_KEY, ""))


def selected_trials() -> list[int]:
    return [int(n) for n in st.session_state.get(SELECTED_KEY, [])]


def select_trials(numbers: Iterable[int]) -> None:
    """Replace the selection; only from callbacks or before the sidebar's picker is drawn."""
    st.session_state[SELECTED_KEY] = sorted({int(n) for n in numbers})
    # A page body running as a fragment does not redraw the sidebar; ask for a full rerun.
    st.session_state[APP_RERUN_KEY] = True


def selection_from_table(rows: Iterable[int], shown: list[int], before: Iterable[int]) -> list[int]:
    """The selection after the table's selected rows changed to ``rows`` (positions in ``shown``).

    Trials the table does not show (filtered out) keep their selection; the table owns only its rows.
    """
    picked = {shown[i] for i in rows if 0 <= i < len(shown)}
    return sorted(picked | {n for n in before if n not in shown})


def clear_selection() -> None:
    st.session_state[SELECTED_KEY] = []


def take_app_rerun_request() -> bool:
    return bool(st.session_state.pop(APP_RERUN_KEY, False))


def refresh_interval() -> float | None:
    """Seconds between automatic reruns of the page body, or None when auto-refresh is off."""
    return REFRESH_EVERY_S if st.session_state.get(REFRESH_KEY, False) else None
