"""The rated set of SmolLM2's own text (benchmarks/rated_text.py): drawn and split as its seeds say, read whole, and
the text task's gold held to what it scored on the held-out part."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from benchmarks import rated_text

FOLDER = rated_text.OUT


def test_the_stored_set_is_the_draw_its_seeds_make() -> None:
    # The split was fixed before any reading: drawing again from the stored curves gives the same responses, ids and
    # split, so no response moved between the development part and the held-out one.
    stored = [json.loads(line) for line in (FOLDER / "responses.jsonl").read_text().splitlines()]
    drawn = rated_text.draw(rated_text.CURVES, rated_text.PER_BAND, rated_text.DRAW_SEED)
    assert [asdict(d) for d in drawn] == stored
    assert {d.split for d in drawn} == {"dev", "held_out"}
    for name, _, _ in rated_text.BANDS:
        in_band = [d for d in drawn if d.band == name]
        assert len(in_band) == rated_text.PER_BAND
        assert sum(d.split == "dev" for d in in_band) == rated_text.PER_BAND // 2


def test_every_response_is_read_once_and_the_second_reading_is_blind_to_the_first() -> None:
    ids = {json.loads(line)["id"] for line in (FOLDER / "responses.jsonl").read_text().splitlines()}
    first, second = rated_text.readings(FOLDER, "first"), rated_text.readings(FOLDER, "second")
    assert set(first) == ids and set(second) < ids and len(second) == rated_text.SECOND_READ
    for reading in (*first.values(), *second.values()):
        assert set(reading) == {"coherent", "positive", "verdict"} and all(1 <= v <= 5 for v in reading.values())
    # What a reader saw: id, prompt and response, nothing a score could be read from.
    for sheet in (FOLDER / "sheets").glob("*.jsonl"):
        assert all(set(json.loads(line)) == {"id", "prompt", "response"} for line in sheet.read_text().splitlines())


@pytest.mark.parametrize("version", [5])
def test_gold_on_the_held_out_part_scores_what_it_scored_when_measured(version: int) -> None:
    # The held-out part is scored once per gold version, and saved: a change to that gold that loses agreement with
    # the reading fails here.
    saved = json.loads((FOLDER / f"score_v{version}_held_out.json").read_text())
    now = rated_text.score(FOLDER, version, "held_out")
    assert now["n"] == saved["n"] == 180
    assert now["spearman"] >= saved["spearman"] - 1e-9
    assert now["rejected_gold_high"] <= saved["rejected_gold_high"] + 1e-9


def test_the_quick_draw_writes_sheets_without_scores(tmp_path: Path) -> None:
    rated_text.main(["draw", "--quick", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "draw.json").read_text())
    assert summary["responses"] == 4 * len(rated_text.BANDS)
    assert sorted(p.name for p in (tmp_path / "sheets").iterdir()) == ["first_1.jsonl", "second.jsonl"]
