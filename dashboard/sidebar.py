"""The sidebar: the study picker, auto-refresh, and the trials selected across pages."""

from __future__ import annotations

import streamlit as st

from dashboard import cache, state
from dashboard.charts import trial_label
from dashboard.sources import DEFAULT_STUDIES_DIR, StudyRef


def _numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip().isdigit()]


def _pick_study(refs: tuple[StudyRef, ...]) -> StudyRef:
    several = len({ref.url for ref in refs}) > 1
    labels = {ref.label(several): ref for ref in refs}
    st.session_state[state.REFS_KEY] = labels
    options = list(labels)
    if st.session_state.get(state.STUDY_KEY) not in labels:
        # A bookmark (?study=name) or the first study; a study that disappeared falls back the same way.
        wanted = st.query_params.get("study")
        by_name = {ref.name: label for label, ref in labels.items()}
        st.session_state[state.STUDY_KEY] = by_name.get(wanted or "", options[0])
    label = st.sidebar.selectbox("Study", options, key=state.STUDY_KEY, on_change=state.clear_selection)
    st.query_params["study"] = labels[label].name
    return labels[label]


def render_sidebar(urls: list[str]) -> StudyRef | None:
    """Draw the sidebar and return the chosen study (None when there is none)."""
    # A full run redraws the sidebar itself, so a rerun asked for by a fragment is already done.
    state.take_app_rerun_request()
    sidebar = st.sidebar
    if not urls:
        sidebar.warning(f"No study databases in {DEFAULT_STUDIES_DIR}/ (looked for {DEFAULT_STUDIES_DIR}/*.db). "
                        "Pass --storage URL to open another.")
        return None
    listing = cache.list_studies(tuple(urls))
    for error in listing.errors:
        sidebar.error(error)
    if not listing.refs:
        sidebar.warning("No studies in " + ", ".join(cache.safe_url(u) for u in urls))
        return None
    ref = _pick_study(listing.refs)
    try:
        view = cache.study_view(ref.url, ref.name, cache.refresh(ref))
    except Exception as error:  # deleted since it was listed, or the database went away: say so, don't crash
        st.session_state[state.REFS_KEY] = {}
        sidebar.error(f"Cannot read study {ref.name!r}: {type(error).__name__}: {error}")
        return None
    running = view.counts.get("RUNNING", 0)
    sidebar.toggle(f"Auto-refresh every {state.REFRESH_EVERY_S:g} s", value=running > 0, key=state.REFRESH_KEY,
                   help="Rerun the page body on a timer while trials are running.")
    if running:
        sidebar.caption(f"{running} trial{'s' if running != 1 else ''} running")
    states = view.states()
    if state.SELECTED_KEY not in st.session_state:  # a bookmark: ?trials=3,7
        st.session_state[state.SELECTED_KEY] = _numbers(st.query_params.get("trials", ""))
    valid = [n for n in state.selected_trials() if n in states]
    if valid != state.selected_trials():  # trials of another study, or gone: the picker would reject them
        st.session_state[state.SELECTED_KEY] = valid
    chosen = sidebar.multiselect(
        "Selected trials", view.numbers, key=state.SELECTED_KEY,
        format_func=lambda n: trial_label(n, states.get(n, "")),
        help="Highlighted on every page. Select rows in the Study table, or pick them here.",
    )
    if chosen:
        st.query_params["trials"] = ",".join(str(n) for n in chosen)
    else:
        st.query_params.pop("trials", None)
    sidebar.caption(f"Storage: `{cache.safe_url(ref.url)}`")
    return ref
