"""benchmarks.curve_table --space: the text task's pre-registered table draws from its own space, and a table never
mixes rows of two spaces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import curve_table

pytestmark = pytest.mark.heavy  # trains: scheduled first

REPO = Path(__file__).resolve().parents[2]
TEXT_SPACE = REPO / "benchmarks" / "text_table_space.yaml"


def test_a_text_table_draws_from_the_text_space_and_refuses_another_space_after_its_first_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "text.jsonl"
    curve_table.main(["--quick", "--space", str(TEXT_SPACE), "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    text_points = curve_table.sample_points(2, TEXT_SPACE)
    assert [row["params"] for row in rows] == [point["params"] for point in text_points]
    assert all(row["evals"] and row["failure"] is None for row in rows)
    assert json.loads(curve_table.space_record(out).read_text()) == curve_table.space_identity(TEXT_SPACE)
    # Going on with the graph tables' space would mix two tables in one file.
    with pytest.raises(SystemExit) as exited:
        curve_table.main(["--quick", "--out", str(out)])
    assert exited.value.code == 2
    assert "was drawn from another space" in capsys.readouterr().err
    # The same space goes on (nothing left to run here).
    curve_table.main(["--quick", "--space", str(TEXT_SPACE), "--out", str(out)])
    assert len(out.read_text().splitlines()) == len(rows)


def test_a_missing_space_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        curve_table.main(["--quick", "--space", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "t.jsonl")])
    assert exited.value.code == 2 and "--space: no file" in capsys.readouterr().err
