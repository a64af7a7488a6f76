"""What a Streamlit session keeps between reruns: the caches around the study reader, and the session state
(the chosen study, the selected trials, auto-refresh).

Connections and study readers are resources kept for the life of the server. Everything derived
from a study is cached by (storage URL, study name, change token): the token is recomputed on every
run from a cheap incremental refresh, so a page shows new trials and updates as soon as they are
stored, and an unchanged study is never read twice. The short ttl bounds memory for studies no
one is looking at any more.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import sqlalchemy
import streamlit as st

from dashboard.advice import Advice, study_advice
from dashboard.frames import health_contexts
from dashboard.health_rules import Finding, diagnose_trials
from dashboard.study_reader import (
    StudyReader,
    StudyRef,
    StudyView,
    build_study_view,
    safe_url,
    study_names,
)
from ppo_core.errors import first_line
from tuner.search.peak_reading import PeakReading, read_metrics_peak
from tuner.store.database import open_read_only_engine
from tuner.study.inert_knobs import InertFinding, inert_findings

TTL_S = 120
MAX_STUDIES = 8
MAX_FIGURES = 48  # a few pages' charts for a few settings each; a 200-trial chart holds about 1 MB

STUDY_KEY = "study"
REFS_KEY = "_study_refs"  # label -> StudyRef for the picker's current options
SELECTED_KEY = "selected_trials"
REFRESH_KEY = "auto_refresh"
APP_RERUN_KEY = "_rerun_app"
REFRESH_EVERY_S = 5.0


@dataclass(frozen=True)
class Listing:
    """The studies found, and one line per storage that could not be read."""

    refs: tuple[StudyRef, ...]
    errors: tuple[str, ...]


@st.cache_resource(show_spinner=False)
def engine(url: str) -> sqlalchemy.Engine:
    return open_read_only_engine(url)


@st.cache_resource(show_spinner=False, max_entries=MAX_STUDIES)
def reader(url: str, name: str) -> StudyReader:
    return StudyReader(StudyRef(url, name), engine(url))


@st.cache_data(ttl=5, show_spinner=False)
def list_studies(urls: tuple[str, ...]) -> Listing:
    refs: list[StudyRef] = []
    errors: list[str] = []
    for url in urls:
        try:
            refs.extend(StudyRef(url, name) for name in study_names(engine(url)))
        except Exception as error:  # one unreadable file must not hide the others' studies
            errors.append(f"{safe_url(url)}: {type(error).__name__}: {first_line(error)}")
    return Listing(tuple(refs), tuple(errors))


def refresh(ref: StudyRef) -> str:
    """Read what is new in the study; the returned token keys every cached view of it."""
    return reader(ref.url, ref.name).refresh().token


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def study_view(url: str, name: str, token: str) -> StudyView:
    snapshot = reader(url, name).current()
    return build_study_view(StudyRef(url, name), snapshot)


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def metrics(url: str, name: str, token: str) -> pd.DataFrame:
    return reader(url, name).metrics()


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def samples(url: str, name: str, token: str) -> pd.DataFrame:
    return reader(url, name).samples()


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def health(url: str, name: str, token: str) -> dict[int, list[Finding]]:
    return diagnose_trials(metrics(url, name, token), health_contexts(study_view(url, name, token)))


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def gold_peak(url: str, name: str, token: str) -> PeakReading | None:
    """Where the study's gold peaks in KL, read from every trial's evaluations as the Frontier page reads it
    (``dashboard.frontier_reading.read_metrics_peak``); None for a study without a gold score."""
    return read_metrics_peak(metrics(url, name, token))


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def advice(url: str, name: str, token: str) -> list[Advice]:
    """What to try next for the whole study (``dashboard.advice``), from its view, its trials' health and where its
    gold peaks."""
    view, findings, peak = study_view(url, name, token), health(url, name, token), gold_peak(url, name, token)
    return study_advice(view, findings, view.constraint_values, peak, inert(url, name, token))


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def inert(url: str, name: str, token: str) -> list[InertFinding]:
    """The searched knobs whose metrics show they never acted in any trial (``tuner.study.inert_knobs``)."""
    return inert_findings(metrics(url, name, token), study_view(url, name, token).spec.search_space)


def _typed_arrays(figure: go.Figure) -> go.Figure:
    """The figure with its float arrays as Plotly's typed-array specs (base64), the form Plotly turns them into on
    every ``st.plotly_chart``: encoded once, a rerun skips Plotly's per-array checks, most of a redraw's time.
    The chart sent is the same, byte for byte."""
    for trace in figure.data:
        for axis in ("x", "y"):
            values = trace[axis]
            if isinstance(values, np.ndarray) and values.dtype == np.float64:
                trace[axis] = {"dtype": "f8", "bdata": base64.b64encode(values.astype("<f8").tobytes()).decode()}
    return figure


@st.cache_resource(ttl=TTL_S, max_entries=MAX_FIGURES, show_spinner=False)
def _figure(url: str, name: str, token: str, key: str, _draw: Callable[[], go.Figure]) -> go.Figure:
    return _typed_arrays(_draw())


def figure(ref: StudyRef, token: str, draw: Callable[..., go.Figure], *args: Any) -> go.Figure:
    """``draw(metrics, *args)``, drawn once per study change token and arguments (their repr is the key).

    A resource, not data: ``st.cache_data`` would pickle the figure, and unpickling a plotly figure validates every
    trace again, which is most of what drawing one costs. The figure is shared, so callers must not change it.
    """
    key = f"{draw.__module__}.{draw.__qualname__}{args!r}"
    return _figure(ref.url, ref.name, token, key, lambda: draw(metrics(ref.url, ref.name, token), *args))


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
