"""The ppo-tune dashboard's entry file: ``streamlit run dashboard/app.py [-- --storage URL]`` or ``ppo-tune dashboard``.

It sets the page config, declares the pages (the scripts in ``app_pages/``), draws the shared sidebar and
runs the navigation. The storage comes from ``--storage`` (after ``--``), else ``$PPO_TUNE_STORAGE``, else
every ``studies/*.db`` under the current directory, as the ``ppo-tune`` CLI finds them.

Importing this module (tools and tests read :data:`PAGES`) draws nothing: Streamlit runs it as ``__main__``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import streamlit as st

# Not "pages/": Streamlit would take a pages/ folder beside the entrypoint for its older multipage scheme.
PAGES_DIR = Path(__file__).resolve().parent / "app_pages"
# (file stem and url path, title, icon); the first is the landing page, served at "/".
PAGES = (
    ("study", "Study", ":material/table_chart:"),
    ("curves", "Curves", ":material/show_chart:"),
    ("frontier", "Frontier", ":material/stacked_line_chart:"),
    ("samples", "Samples", ":material/chat:"),
    ("compare", "Compare", ":material/compare_arrows:"),
    ("analysis", "Analysis", ":material/insights:"),
    ("health", "Health", ":material/health_and_safety:"),
    ("population", "Population", ":material/account_tree:"),
)


def parse_app_args(argv: Sequence[str]) -> str | None:
    """The ``--storage`` given after ``--`` on ``streamlit run dashboard/app.py -- --storage URL``."""
    parser = argparse.ArgumentParser(prog="dashboard/app.py", add_help=False, allow_abbrev=False)
    parser.add_argument("--storage", default=None)
    known, _ = parser.parse_known_args(list(argv))
    return known.storage


def main(argv: Sequence[str]) -> None:
    # Imported when the app runs, not with PAGES: tools that read the page list need no Streamlit caches.
    from dashboard.study_reader import storage_urls
    from dashboard.ui import render_sidebar

    st.set_page_config(page_title="ppo-tune dashboard", page_icon=":material/monitoring:", layout="wide")
    navigation = st.navigation([
        st.Page(str(PAGES_DIR / f"{slug}.py"), title=title, icon=icon, url_path=slug, default=index == 0)
        for index, (slug, title, icon) in enumerate(PAGES)
    ])
    render_sidebar(storage_urls(parse_app_args(argv)))
    navigation.run()


if __name__ == "__main__":
    # `streamlit run dashboard/app.py` puts dashboard/ on sys.path, not the repository root; an installed
    # package would not need this, a checkout does.
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    main(sys.argv[1:])
