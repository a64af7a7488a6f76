"""The app's frame: page config, the sidebar and the pages (st.navigation)."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from dashboard.routes import PAGES, PAGES_DIR
from dashboard.sidebar import render_sidebar
from dashboard.sources import parse_app_args, storage_urls


def pages() -> list[st.Page]:
    return [
        st.Page(str(PAGES_DIR / f"{slug}.py"), title=title, icon=icon, url_path=slug, default=index == 0)
        for index, (slug, title, icon) in enumerate(PAGES)
    ]


def main(argv: Sequence[str]) -> None:
    st.set_page_config(page_title="ppo-tune dashboard", page_icon=":material/monitoring:", layout="wide")
    navigation = st.navigation(pages())
    render_sidebar(storage_urls(parse_app_args(argv)))
    navigation.run()
