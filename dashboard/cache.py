"""Streamlit caches around the plain loaders.

Connections and study readers are resources kept for the life of the server. Everything derived
from a study is cached by (storage URL, study name, change token): the token is recomputed on every
run from a cheap incremental refresh, so a page shows new trials and updates as soon as they are
stored, and an unchanged study is never read twice. The short ttl bounds memory for studies no
one is looking at any more.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import sqlalchemy
import streamlit as st
from optuna.storages import RDBStorage

from dashboard.data import StudyView, build_study_view
from dashboard.health import Finding, HealthContext, diagnose_trials
from dashboard.reader import StudyReader
from dashboard.sources import StudyRef, open_read_only_engine, open_read_only_storage, study_names

TTL_S = 120
MAX_STUDIES = 8


@dataclass(frozen=True)
class Listing:
    """The studies found, and one line per storage that could not be read."""

    refs: tuple[StudyRef, ...]
    errors: tuple[str, ...]


@st.cache_resource(show_spinner=False)
def storage(url: str) -> RDBStorage:
    return open_read_only_storage(url)


@st.cache_resource(show_spinner=False)
def engine(url: str) -> sqlalchemy.Engine:
    return open_read_only_engine(url)


@st.cache_resource(show_spinner=False, max_entries=MAX_STUDIES)
def reader(url: str, name: str) -> StudyReader:
    return StudyReader(StudyRef(url, name), storage(url), engine(url))


@st.cache_data(ttl=5, show_spinner=False)
def list_studies(urls: tuple[str, ...]) -> Listing:
    refs, errors = [], []
    for url in urls:
        try:
            refs.extend(StudyRef(url, name) for name in study_names(storage(url)))
        except Exception as error:  # one unreadable file must not hide the others' studies
            first = (str(error).strip().splitlines() or [""])[0]
            errors.append(f"{safe_url(url)}: {type(error).__name__}: {first}")
    return Listing(tuple(refs), tuple(errors))


def safe_url(url: str) -> str:
    """The URL with any password masked, for display."""
    return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)


def refresh(ref: StudyRef) -> str:
    """Read what is new in the study; the returned token keys every cached view of it."""
    return reader(ref.url, ref.name).refresh().token


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def study_view(url: str, name: str, token: str) -> StudyView:
    ref = StudyRef(url, name)
    return build_study_view(ref, reader(url, name).current())


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def metrics(url: str, name: str, token: str) -> pd.DataFrame:
    return reader(url, name).metrics()


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def samples(url: str, name: str, token: str) -> pd.DataFrame:
    return reader(url, name).samples()


@st.cache_data(ttl=TTL_S, max_entries=MAX_STUDIES, show_spinner=False)
def health(url: str, name: str, token: str) -> dict[int, list[Finding]]:
    view = study_view(url, name, token)
    targets = view.kl_targets()
    contexts = {
        number: HealthContext(view.kl_guard.threshold, view.kl_guard.metric, targets.get(number))
        for number in view.numbers
    }
    return diagnose_trials(metrics(url, name, token), contexts)
