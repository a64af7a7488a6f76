"""The dashboard in a real browser: ``streamlit run`` on a free port, every page loaded in headless Chromium, on
each of tools.real_studies' studies on the built-in task (validated, several estimators, and one with no gold score
whose trials ran in TRL's GRPOTrainer)."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import optuna
import pytest
from helpers.dashboard_fixtures import real_studies_url
from optuna.trial import TrialState
from population_study import NAME as POPULATION
from population_study import WINNER, build_population_study

from dashboard.app import PAGES
from tools.real_studies import (
    COMPLETE,
    CUSTOM_REWARD,
    ESTIMATORS,
    HELDOUT,
    KL_THRESHOLD,
    SPECS,
    VALIDATION_SEEDS,
    cache_key,
    cached_set,
)
from tools.screenshots import CHROMIUM, PageCapture, capture_pages, screenshot_tables, serve
from tuner.production.validation import load_validation, validation_results
from tuner.store.database import create_engine
from tuner.store.records import read_samples

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

# Whatever else a page says, these must be on it (its headings, and the words a study of each kind must produce).
EXPECTED_TEXT = {
    "study": ["Trials", "Complete", "Show states"],
    "curves": ["KL", "Reward", "More metrics", f"blow-up threshold ({KL_THRESHOLD:g} nats)"],
    "frontier": ["KL and scores from the held-out evaluation", "Across the study", "Along each run"],
    "samples": ["Evaluation prompt"],
    "compare": ["Parameters", "Curves", "Final metrics", "Generations", "Prompt 0: "],
    "analysis": ["Optimization history", "Parameter importances", "Timeline"],
    "health": ["Critical", "Warnings", "No signs"],
    "population": ["has no population"],  # none of the real studies is one: the page says so and draws nothing
}
MIN_CHARTS = {"curves": 2, "frontier": 2, "compare": 2, "analysis": 1}
NO_GOLD = "No gold score"  # the Curves page's note, for a study whose runs have no gold scorer
SELECTED = (0, 1)  # highlighted on every page; the Compare page compares them


@dataclass(frozen=True)
class Served:
    base_url: str
    storage: str
    log: Path


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the three studies: they share one database."""
    # A missing browser is a broken setup, not a reason to skip: CI must install Debian's chromium.
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing: apt-get install chromium"
    storage = real_studies_url()
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    with serve(storage, log=log) as base_url:
        yield Served(base_url, storage, log)
    assert "Traceback" not in log.read_text()


def page_text(captures: list[PageCapture]) -> dict[str, str]:
    """Each page's text with its runs of whitespace as single spaces: a metric reads "Trials 5"."""
    return {capture.slug: " ".join(capture.text.split()) for capture in captures}


def server_log(served: Served) -> str:
    """Streamlit's output without its colours: where a page's traceback is printed in full."""
    return re.sub(r"\x1b\[[0-9;]*m", "", served.log.read_text())


@pytest.mark.parametrize("name", [HELDOUT, ESTIMATORS, CUSTOM_REWARD])
def test_every_page_renders_in_headless_chromium(dashboard: Served, name: str, tmp_path: Path) -> None:
    captures = capture_pages(dashboard.base_url, tmp_path, study=name, tall=False, selected=SELECTED)
    assert [c.slug for c in captures] == [slug for slug, _, _ in PAGES]
    for capture in captures:
        assert capture.exceptions == 0, f"{name} {capture.slug}: an exception is shown\n{server_log(dashboard)}"
        assert capture.title in capture.text
        missing = [text for text in EXPECTED_TEXT[capture.slug] if text not in capture.text]
        assert not missing, f"{name} {capture.slug} lacks {missing}:\n{capture.text}"
        assert capture.charts >= MIN_CHARTS.get(capture.slug, 0), f"{name} {capture.slug}"
        assert capture.screenshot.stat().st_size > 20_000, capture.slug  # a rendered page, not a blank one
    assert "Traceback" not in server_log(dashboard)

    # What each page shows comes from the study itself: its trials, its samples, its gold score or none.
    study = optuna.load_study(study_name=name, storage=dashboard.storage)
    text, charts = page_text(captures), {capture.slug: capture.charts for capture in captures}
    trials = study.get_trials(deepcopy=False)
    assert f"Trials {len(trials)}" in text["study"]
    pruned = [t.number for t in trials if t.state == TrialState.PRUNED]
    assert (f"Pruned {len(pruned)}" in text["study"]) == bool(pruned)
    samples = read_samples(create_engine(dashboard.storage), name)
    first_prompt = samples.loc[samples["prompt_index"] == 0, "prompt"].iloc[0]
    assert first_prompt.startswith("from ") and f"Prompt 0: {first_prompt}" in text["compare"]
    # The grid's columns are the selected trials (a selectbox holds the prompt); each shows its last answer to it.
    for number in SELECTED:
        last = samples[(samples["trial_number"] == number) & (samples["prompt_index"] == 0)].iloc[-1]
        assert last["response"] in text["samples"], f"trial {number}'s answer at update {last['update']}"
    has_gold = name != CUSTOM_REWARD
    assert (NO_GOLD in text["curves"]) != has_gold
    assert charts["curves"] >= 2 + has_gold  # KL and the proxy score, and the gold score where there is one
    assert ("no gold score (eval/gold_score) is recorded" in text["frontier"]) != has_gold
    # Only the held-out study has trials the KL guard stopped: the health page's critical signs.
    assert bool(pruned) == (name == HELDOUT) == ("KL above the blow-up threshold" in text["health"])
    # The validated study's Study page shows each rerun configuration (the tuning trial it came from).
    validated = validation_results(study, load_validation(name, dashboard.storage))
    assert bool(validated) == (name == HELDOUT) == ("fresh seeds" in text["study"])
    assert all(f"#{result.trial}" in text["study"] and result.n == VALIDATION_SEEDS for result in validated)


def test_the_population_page_draws_a_population_studys_three_figures(tmp_path: Path) -> None:
    # Only that page, on a small population study written as the tuner writes one: its own server, one page load.
    storage = build_population_study(tmp_path / "pbt.db")
    log = tmp_path / "streamlit.log"
    page = next(p for p in PAGES if p[0] == "population")
    with serve(storage, log=log) as base_url:
        (capture,) = capture_pages(base_url, tmp_path / "shots", study=POPULATION, pages=[page], tall=False)
    text = " ".join(capture.text.split())
    assert capture.exceptions == 0 and "Traceback" not in log.read_text(), log.read_text()
    assert capture.charts == 3, text  # the lineage tree, the schedule, the stitched curves
    for words in ("Lineage tree", "Learning rate and β along the lineage", "Stitched curves",
                  f"From trial #{WINNER}'s config"):  # the winner's lineage first
        assert words in text, words


def test_the_dashboard_page_shows_a_screenshot_of_every_page() -> None:
    # A page added to the navigation needs its screenshot taken and its cell in docs/dashboard.md's tables.
    root = Path(__file__).resolve().parents[2]
    assert screenshot_tables() in (root / "docs" / "dashboard.md").read_text()
    for slug, _, _ in PAGES:
        screenshot = root / "docs" / "screenshots" / f"{slug}.png"
        assert screenshot.is_file() and screenshot.stat().st_size > 20_000, screenshot


def test_the_real_studies_are_built_once_and_again_when_their_spec_changes() -> None:
    url = real_studies_url()
    marker = Path(url.removeprefix("sqlite:///")).parent / COMPLETE
    built = marker.stat().st_mtime_ns
    assert cached_set() == url and marker.stat().st_mtime_ns == built  # a later session reuses the cached set
    longer = replace(SPECS[0], definition={**SPECS[0].definition, "n_trials": 6})
    assert cache_key([longer, *SPECS[1:]]) != cache_key() == cache_key(SPECS)


def test_a_port_in_use_is_refused_at_once_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=rf"^port {port} is in use on 127.0.0.1") as error, \
                serve(f"sqlite:///{tmp_path / 'none.db'}", port=port, timeout=90):
            pass
        assert "\n" not in str(error.value)  # refused before starting, not a TimeoutError after 90 s
