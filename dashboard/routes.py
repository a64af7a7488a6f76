"""The dashboard's pages: file and URL path, title and icon (no Streamlit import, for tools and tests)."""

from __future__ import annotations

from pathlib import Path

# Not "pages/": Streamlit would take a pages/ folder beside the entrypoint for its older multipage scheme.
PAGES_DIR = Path(__file__).resolve().parent / "app_pages"
# (file stem and url path, title, icon); the first is the landing page, served at "/".
PAGES = (
    ("study", "Study", ":material/table_chart:"),
    ("curves", "Curves", ":material/show_chart:"),
    ("samples", "Samples", ":material/chat:"),
    ("compare", "Compare", ":material/compare_arrows:"),
    ("analysis", "Analysis", ":material/insights:"),
    ("health", "Health", ":material/health_and_safety:"),
)
