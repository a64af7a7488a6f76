"""The Samples page's grid: trials as columns, sampling points as rows, differences from the first column marked."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboard.sample_grid import grid_html, prompt_rows, row_key, sample_grid, word_diff
from dashboard.serve import STORAGE_ENV
from tools.demo_study import DemoSpec, build_demo_study

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
STUDY = "grid-demo"


def samples(rows: list[tuple[int, int, int, str]]) -> pd.DataFrame:
    """(trial, update, episode, response) rows for prompt 0, scores derived from the update."""
    return pd.DataFrame([
        {"trial_number": t, "update": u, "episode": e, "prompt_index": 0, "prompt": "p", "response": r,
         "score": u / 10, "gold_score": None if t == 2 else u / 20}
        for t, u, e, r in rows
    ])


@pytest.mark.parametrize(("reference", "text", "changed"), [
    ("a b c", "a b c", []),
    ("a b c", "a x c", ["x"]),
    ("a b c", "a b c d e", ["d", "e"]),
    ("the cat sat", "cat the sat", ["cat"]),  # difflib keeps the longest matching run (the, sat), flags the move
    ("", "new words", ["new", "words"]),
    ("3 12 5", "3  7 1 5", ["7", "1"]),  # whitespace runs are kept as written and never marked
])
def test_word_diff_marks_the_words_not_in_the_reference(reference: str, text: str, changed: list[str]) -> None:
    segments = word_diff(reference, text)
    assert "".join(token for token, _ in segments) == text
    assert [token for token, flagged in segments if flagged] == changed


def test_row_key_lines_up_trials_of_different_batch_sizes_by_episode() -> None:
    # Trial 0 takes 16 episodes an update, trial 1 takes 32: the same episodes fall at different updates.
    mixed = samples([(0, 4, 64, "a"), (0, 8, 128, "b"), (1, 2, 64, "a"), (1, 4, 128, "b")])
    assert row_key(mixed) == "episode"
    same = samples([(0, 4, 64, "a"), (0, 8, 128, "b"), (1, 4, 64, "a"), (1, 8, 128, "c")])
    assert row_key(same) == "update"


def test_the_grid_keeps_every_sample_and_marks_the_gaps() -> None:
    rows = samples([(0, 0, 0, "x"), (0, 5, 80, "y"), (0, 10, 160, "z"), (1, 0, 0, "x"), (1, 5, 80, "q"),
                    (2, 10, 160, "w")])
    grid = sample_grid(prompt_rows(rows, 0, [1, 0, 2]), [1, 0, 2], "update")
    assert list(grid.columns) == [1, 0, 2] and list(grid.index) == [0, 5, 10]
    # A cell holds a sample's record, or None at a gap: pandas' stubs type it as a scalar, which a record is not.
    cells: dict[tuple[object, object], object] = {(at, t): grid.at[at, t] for at in grid.index for t in grid.columns}
    recorded = {(r.update, r.trial_number): r.response for r in rows.itertuples()}
    assert {k: c["response"] for k, c in cells.items() if isinstance(c, dict)} == recorded
    assert [k for k, c in cells.items() if not isinstance(c, dict)] == [(0, 2), (5, 2), (10, 1)]
    with pytest.raises(ValueError, match="unknown row key 'step'"):
        sample_grid(rows, [0], "step")


def test_grid_html_escapes_text_and_marks_only_later_columns() -> None:
    rows = samples([(0, 1, 16, "<b>bold</b> same"), (1, 1, 16, "<b>bold</b> other"), (2, 1, 16, "same")])
    page = grid_html(sample_grid(rows, [0, 1, 2], "update"), {0: "#0 complete", 1: "#1 pruned"})
    assert "<b>bold</b>" not in page and html.escape("<b>bold</b>") in page
    marked = re.findall(r"<mark[^>]*>(.*?)</mark>", page)
    # Column 1 changed "same" to "other"; column 2 only dropped words, and a text can mark only what it has.
    assert marked == ["other"]
    assert "#0 complete" in page and "#1 pruned" in page and "#2" in page  # a missing label falls back
    assert "gold —" in page  # trial 2 has no gold score
    assert page.count("<tr>") == 2  # the header and one sampling point


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('grid') / 'grid.db'}"
    build_demo_study(url, DemoSpec(name=STUDY, n_trials=5, n_updates=60, sample_every=4, stop_trials=False))
    return url


def test_samples_page_lays_the_selection_out_as_columns(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORAGE_ENV, url)
    app = AppTest.from_file(str(APP), default_timeout=60)
    app.query_params["study"] = STUDY
    app.session_state["selected_trials"] = [3, 1]
    app.run()
    app.switch_page("app_pages/samples.py").run()
    assert not app.exception, [e.value for e in app.exception]
    (columns,) = [m for m in app.multiselect if m.label.startswith("Trials as columns")]
    assert columns.value == [1, 3]
    (table,) = app.get("html")
    headers = re.findall(r"<th[^>]*>(#\d+[^<]*)</th>", table.proto.body)
    assert headers == ["#1 complete", "#3 complete"]
    # 16 sampling points (updates 0, 4, ..., 60): 12 drawn at once, the range picker reaches the rest.
    (shown,) = [s for s in app.select_slider if s.label == "Updates shown"]
    assert shown.value == (16, 60) and len(shown.options) == 16
    assert table.proto.body.count("<tr>") == 1 + 12
    shown.set_value((0, 8)).run()
    assert app.get("html")[0].proto.body.count("<tr>") == 1 + 3
    # A new selection in the sidebar becomes the columns.
    app.session_state["selected_trials"] = [0, 2, 4]
    app.run()
    (columns,) = [m for m in app.multiselect if m.label.startswith("Trials as columns")]
    assert columns.value == [0, 2, 4]
