"""The dashboard in a real browser: ``streamlit run`` on a free port, each page loaded in headless Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest
from dashboard_fixtures import KL_THRESHOLD, REAL, DashboardStudies, shared_studies

from dashboard.app import PAGES
from tools.screenshots import CHROMIUM, capture_pages, serve

# What each page must say once rendered (headings, labels, the numbers behind them).
EXPECTED_TEXT = {
    "study": ["Trials", "Complete", "Pruned", "Failed", "Best trial #", "Show states"],
    "curves": ["KL", "Reward", "More metrics", f"blow-up threshold ({KL_THRESHOLD:g} nats)", "No gold score"],
    "samples": ["Evaluation prompt", "Side by side over the run", "Every trial's answer at update 8", "update 8"],
    "compare": ["Trials to compare", "Parameters", "Curves", "Final metrics", "Generations", "Prompt 0:"],
    "analysis": ["Optimization history", "Parameter importances", "Timeline"],
    "health": ["Critical", "KL above the blow-up threshold", "Lower the learning rate or raise β"],
}
MIN_CHARTS = {"curves": 3, "compare": 2, "analysis": 1}


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory, tiny_lm_dir: Path, prompts_file: Path) -> DashboardStudies:
    return shared_studies(tmp_path_factory, tiny_lm_dir, prompts_file)


def test_every_page_renders_in_headless_chromium(studies: DashboardStudies, tmp_path: Path) -> None:
    # A missing browser is a broken setup, not a reason to skip: CI must install Debian's chromium.
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing: apt-get install chromium"
    log = tmp_path / "streamlit.log"
    with serve(studies.url, log=log) as base_url:
        captures = capture_pages(base_url, tmp_path / "screenshots", study=REAL, tall=False)
    assert [c.slug for c in captures] == [slug for slug, _, _ in PAGES]
    for capture in captures:
        assert capture.exceptions == 0, f"{capture.slug}: an exception is shown\n{capture.text}"
        assert capture.title in capture.text
        missing = [text for text in EXPECTED_TEXT[capture.slug] if text not in capture.text]
        assert not missing, f"{capture.slug} lacks {missing}:\n{capture.text}"
        assert capture.charts >= MIN_CHARTS.get(capture.slug, 0), capture.slug
        assert capture.screenshot.stat().st_size > 20_000, capture.slug  # a rendered page, not a blank one
    assert "Traceback" not in log.read_text()
