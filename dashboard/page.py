"""What every page shares: the chosen study's cached data, and a body that refreshes itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from dashboard import cache, state
from dashboard.charts import CurveStyle
from dashboard.data import StudyView
from dashboard.health import Finding
from dashboard.sources import StudyRef


@dataclass(frozen=True)
class PageContext:
    """The study a page shows, at one change token, and the trials selected in the sidebar."""

    ref: StudyRef
    token: str
    view: StudyView
    selected: frozenset[int]

    def metrics(self) -> pd.DataFrame:
        return cache.metrics(self.ref.url, self.ref.name, self.token)

    def samples(self) -> pd.DataFrame:
        return cache.samples(self.ref.url, self.ref.name, self.token)

    def health(self) -> dict[int, list[Finding]]:
        return cache.health(self.ref.url, self.ref.name, self.token)

    def style(self, x: str = "update", smoothing: float = 0.0) -> CurveStyle:
        return CurveStyle(x=x, smoothing=smoothing, selected=self.selected)

    def default_trials(self, count: int) -> list[int]:
        """``count`` trials for a picker to start with: the selected ones, then the best, then the first."""
        ordered = [*sorted(self.selected), *self.view.best, *self.view.numbers]
        return list(dict.fromkeys(ordered))[:count]


def current_context() -> PageContext | None:
    ref = state.current_study()
    if ref is None:
        return None
    token = cache.refresh(ref)
    view = cache.study_view(ref.url, ref.name, token)
    selected = frozenset(n for n in state.selected_trials() if n in set(view.numbers))
    return PageContext(ref, token, view, selected)


def _body(render: Callable[[PageContext], None], in_fragment: bool) -> None:
    if in_fragment and state.take_app_rerun_request():
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
    interval = state.refresh_interval()
    if interval is None:
        _body(render, in_fragment=False)
    else:
        st.fragment(lambda: _body(render, in_fragment=True), run_every=interval)()
