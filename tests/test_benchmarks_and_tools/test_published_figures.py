"""Every number printed in README.md's "Measured results" and in the figure column of benchmarks/README.md's index is
the figure its results file gives at the printed precision (benchmarks/figures.yaml), and a printed number with no
registry entry fails as surely as a wrong one."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest
from scipy import stats  # type: ignore[import-untyped]

from tools.published_figures import INDEX, README, check, figure_rows, interval, load_registry, numbers, paired

REPO = Path(__file__).resolve().parents[2]


def problems(root: Path = REPO) -> list[str]:
    return [f"{item.document}: {item.row}: {item.printed}: {item.problem}" for item in check(load_registry(), root)
            if item.problem]


def test_every_published_figure_is_its_results_file_and_every_number_has_an_entry() -> None:
    assert problems() == []


def test_the_registry_covers_every_row_of_the_index_and_of_the_readmes_results() -> None:
    registered = {(entry["document"], entry["row"]) for entry in load_registry()["figures"]}
    for document in (INDEX, README):
        rows = figure_rows(document, (REPO / document).read_text())
        assert rows, document
        assert {(document, row) for row in rows} <= registered, document


def copy_of_the_pages(tmp_path: Path) -> Path:
    """A root holding copies of the two pages and the real results files."""
    for document in (INDEX, README):
        (tmp_path / document).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / document, tmp_path / document)
    (tmp_path / "benchmarks" / "results").symlink_to(REPO / "benchmarks" / "results")
    return tmp_path


@pytest.mark.parametrize(("document", "published", "altered"), [
    (INDEX, "+0.0081, 99%", "+0.0181, 99%"),
    (INDEX, "[−0.055, +0.332]", "[−0.055, +0.342]"),
    (INDEX, "without it 1.30x", "without it 1.40x"),
    (README, "+0.149]", "+0.159]"),
    (README, "0.89x", "0.98x"),
])
def test_an_altered_figure_fails(tmp_path: Path, document: str, published: str, altered: str) -> None:
    root = copy_of_the_pages(tmp_path)
    page = (root / document).read_text()
    assert published in page
    (root / document).write_text(page.replace(published, altered, 1))
    assert problems(root)


def test_a_number_added_to_a_row_without_an_entry_fails(tmp_path: Path) -> None:
    root = copy_of_the_pages(tmp_path)
    page = (root / INDEX).read_text()
    (root / INDEX).write_text(page.replace("(nothing blew up)", "(nothing blew up; 0.123 s saved)", 1))
    found = problems(root)
    assert len(found) == 1 and "0.123: no registry entry" in found[0]


def test_numbers_leaves_out_code_hashes_dates_levels_and_lone_digits() -> None:
    text = ("`--seeds 20` at a24efbe, 2026-11-27, on 5 seeds: +0.0081, 99% [+0.0008, +0.0153], 4x its length, "
            "0.1M parameters, 1,896 s, p 1.4e-05, −0.011 [−0.031, +0.009], [page](a.md#b-12)")
    assert numbers(text) == ["+0.0081", "+0.0008", "+0.0153", "1,896", "1.4e-05", "-0.011", "-0.031", "+0.009"]


def test_the_intervals_are_scipys() -> None:
    values = [0.12, -0.03, 0.08, 0.2, 0.01]
    mean, low, high = interval(values)
    assert (low, high) == pytest.approx(stats.t.interval(0.95, len(values) - 1, loc=statistics.fmean(values),
                                                         scale=stats.sem(values)))
    assert mean == pytest.approx(statistics.fmean(values))
    assert paired([1.0, 2.0, 4.0], [0.5, 1.0, 2.0]) == pytest.approx(interval([0.5, 1.0, 2.0]))
