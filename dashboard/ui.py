"""The Streamlit side the pages share: the sidebar, the page frame (:func:`run_page` and its
:class:`PageContext`), widgets whose options change as a study runs, and the trial table's columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dashboard import session
from dashboard.charts import CurveStyle, trial_label
from dashboard.frames import MISSING, config_groups, grouping_options, objective_labels, partial_column
from dashboard.health_rules import Finding
from dashboard.study_reader import PARAM_PREFIX, StudyRef, StudyView, safe_url
from tuner.store.default_storage import DEFAULT_STUDIES_DIR

T = TypeVar("T")
_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|>~<$])")


def picked(value: T | None, default: T) -> T:
    """A widget's value, typed as set: Streamlit types a radio's or selectbox's value as optional (None when it has
    no options or no index), where the pages always give both."""
    return default if value is None else value


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


def trial_table_config(table: pd.DataFrame, view: StudyView) -> dict[str, Any]:
    """``st.dataframe`` column settings for the trial table: labels, number formats, widths."""
    kl_help = (f"{view.kl_guard.metric}: the training KL to the reference the KL guard reads, summed over a "
               "response (its estimator's: k1 can dip below 0)")
    config: dict[str, Any] = {
        "number": st.column_config.NumberColumn("trial", format="%d", width="small", pinned=True),
        "state": st.column_config.TextColumn("state", pinned=True),
        "feasible": st.column_config.CheckboxColumn("feasible", pinned=True,
                                                    help="Kept the study's constraints (completed trials only)"),
        "duration_s": st.column_config.NumberColumn("duration", format="%.1f s"),
        "max_kl": st.column_config.NumberColumn("max training KL", format="%.3g", pinned=True, help=kl_help),
        "last_kl": st.column_config.NumberColumn("last training KL", format="%.3g", pinned=True, help=kl_help),
        "kl_control": st.column_config.TextColumn("KL control"),
        "reason": st.column_config.TextColumn("prune / fail reason", width="large"),
        "updates": st.column_config.NumberColumn("updates", format="%d"),
        "budget_updates": st.column_config.NumberColumn("planned updates", format="%d"),
    }
    for name, label in objective_labels(view).items():
        # Narrow, the label's whole text in its tooltip: pinned columns this wide left no room for the KL ones.
        config[name] = st.column_config.NumberColumn(label, format="%.4g", pinned=True, width="medium",
                                                     help=f"{label}: the study's objective, as its study file "
                                                          "reduces it (complete trials only)")
        config[partial_column(name)] = st.column_config.NumberColumn(
            "partial", format="%.4g", pinned=True, width="small",
            help=f"A pruned trial's last reported {label.removeprefix('objective: ')}: a partial value, not the "
                 "objective, which it never reached; kept out of the objective's column and its sorting")
    for column in table.columns:
        if column.startswith(PARAM_PREFIX):
            name = column.removeprefix(PARAM_PREFIX)
            help_ = f"{MISSING}: this trial does not use {name}"
            if pd.api.types.is_float_dtype(table[column]):
                config[column] = st.column_config.NumberColumn(name, format="%.4g", help=help_)
            else:
                config[column] = st.column_config.Column(name, help=help_)
    return config


def show_table(data: Any, **options: Any) -> Any:
    """``st.dataframe`` with the dashboard's one text for a missing value (:data:`~dashboard.frames.MISSING`):
    Streamlit's own is "None", which the Study table showed where Compare showed a dash."""
    return st.dataframe(data, placeholder=MISSING, **options)


def _numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip().isdigit()]


def _pick_study(refs: tuple[StudyRef, ...]) -> StudyRef:
    several = len({ref.url for ref in refs}) > 1
    labels = {ref.label(several): ref for ref in refs}
    st.session_state[session.REFS_KEY] = labels
    options = list(labels)
    if st.session_state.get(session.STUDY_KEY) not in labels:
        # A bookmark (?study=name) or the first study; a study that disappeared falls back the same way.
        wanted = st.query_params.get("study")
        by_name = {ref.name: label for label, ref in labels.items()}
        st.session_state[session.STUDY_KEY] = by_name.get(wanted or "", options[0])
    label = picked(st.sidebar.selectbox("Study", options, key=session.STUDY_KEY, on_change=session.clear_selection),
                   options[0])
    st.query_params["study"] = labels[label].name
    return labels[label]


def render_sidebar(urls: list[str]) -> StudyRef | None:
    """Draw the sidebar (study picker, auto-refresh, selected trials) and return the chosen study, if any."""
    # A full run redraws the sidebar itself, so a rerun asked for by a fragment is already done.
    session.take_app_rerun_request()
    sidebar = st.sidebar
    if not urls:
        sidebar.warning(f"No study databases in {DEFAULT_STUDIES_DIR}/ (looked for {DEFAULT_STUDIES_DIR}/*.db). "
                        "Pass --storage URL to open another.")
        return None
    listing = session.list_studies(tuple(urls))
    for error in listing.errors:
        sidebar.error(error)
    if not listing.refs:
        sidebar.warning("No studies in " + ", ".join(safe_url(u) for u in urls))
        return None
    ref = _pick_study(listing.refs)
    try:
        view = session.study_view(ref.url, ref.name, session.refresh(ref))
    except Exception as error:  # deleted since it was listed, or the database went away: say so, don't crash
        st.session_state[session.REFS_KEY] = {}
        sidebar.error(f"Cannot read study {ref.name!r}: {type(error).__name__}: {error}")
        return None
    running = view.counts.get("RUNNING", 0)
    sidebar.toggle(f"Auto-refresh every {session.REFRESH_EVERY_S:g} s", value=running > 0, key=session.REFRESH_KEY,
                   help="Rerun the page body on a timer while trials are running.")
    if running:
        sidebar.caption(f"{running} trial{'s' if running != 1 else ''} running")
    states = view.states()
    if session.SELECTED_KEY not in st.session_state:  # a bookmark: ?trials=3,7
        st.session_state[session.SELECTED_KEY] = _numbers(st.query_params.get("trials", ""))
    valid = [n for n in session.selected_trials() if n in states]
    if valid != session.selected_trials():  # trials of another study, or gone: the picker would reject them
        st.session_state[session.SELECTED_KEY] = valid
    chosen = sidebar.multiselect(
        "Selected trials", view.numbers, key=session.SELECTED_KEY,
        format_func=lambda n: trial_label(n, states.get(n, "")),
        help="Highlighted on every page. Select rows in the Study table, or pick them here.",
    )
    if chosen:
        st.query_params["trials"] = ",".join(str(n) for n in chosen)
    else:
        st.query_params.pop("trials", None)
    sidebar.caption(f"Storage: `{safe_url(ref.url)}`")
    return ref


@dataclass(frozen=True)
class PageContext:
    """The study a page shows, at one change token, and the trials selected in the sidebar."""

    ref: StudyRef
    token: str
    view: StudyView
    selected: frozenset[int]

    def metrics(self) -> pd.DataFrame:
        return session.metrics(self.ref.url, self.ref.name, self.token)

    def samples(self) -> pd.DataFrame:
        return session.samples(self.ref.url, self.ref.name, self.token)

    def health(self) -> dict[int, list[Finding]]:
        return session.health(self.ref.url, self.ref.name, self.token)

    def figure(self, draw: Callable[..., go.Figure], *args: Any) -> go.Figure:
        """``draw(self.metrics(), *args)``, kept until the study changes: a rerun redraws no chart."""
        return session.figure(self.ref, self.token, draw, *args)

    def style(self, x: str = "update", smoothing: float = 0.0, groups: Mapping[int, str] | None = None) -> CurveStyle:
        return CurveStyle(x=x, smoothing=smoothing, selected=self.selected, groups=groups or {},
                          best=frozenset(self.view.best))

    def default_trials(self, count: int) -> list[int]:
        """``count`` trials for a picker to start with: the selected ones, then the best, then the first."""
        ordered = [*sorted(self.selected), *self.view.best, *self.view.numbers]
        return list(dict.fromkeys(ordered))[:count]


TRIAL_COLORS = "trial"


def color_by_picker(context: PageContext, where: Any, key: str) -> dict[int, str]:
    """A "Colour by" radio when the trials differ in a groupable setting (the estimator); the trial -> group map
    it chose, or {} for a colour per trial. Draws nothing on a study whose trials all share those settings."""
    options = grouping_options(context.view)
    if not options:
        return {}
    choices = [TRIAL_COLORS, *options]
    keep_valid(key, choices, options[0])
    chosen = where.radio("Colour by", choices, key=key, horizontal=True,
                         help="Colour each trial by its setting, with one legend entry per value, or each trial "
                              "in its own colour.")
    return {} if chosen == TRIAL_COLORS else config_groups(context.view, chosen)


def current_context() -> PageContext | None:
    ref = session.current_study()
    if ref is None:
        return None
    token = session.refresh(ref)
    view = session.study_view(ref.url, ref.name, token)
    selected = frozenset(n for n in session.selected_trials() if n in set(view.numbers))
    return PageContext(ref, token, view, selected)


def _body(render: Callable[[PageContext], None], in_fragment: bool) -> None:
    if in_fragment and session.take_app_rerun_request():
        st.rerun(scope="app")
    context = current_context()
    if context is None:
        st.info("No study to show. Run one with `ppo-tune run studies/<name>.yaml`, or start the dashboard "
                "with `--storage URL`.")
        return
    if context.view.trials.empty:
        st.info(f"Study {context.ref.name!r} has no trials yet.")
        return
    render(context)


def run_page(title: str, render: Callable[[PageContext], None], caption: str = "") -> None:
    """Draw a page: its title, then ``render``; while auto-refresh is on the body reruns by itself."""
    st.title(title)
    if caption:
        st.caption(caption)
    interval = session.refresh_interval()
    if interval is None:
        _body(render, in_fragment=False)
    else:
        st.fragment(lambda: _body(render, in_fragment=True), run_every=interval)()
