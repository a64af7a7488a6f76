"""docs/estimators.md's table of advantage estimators agrees with the estimator table the code reads
(``ppo_core.config.estimator_traits.ESTIMATORS``): one row per estimator in its order, the default marked, and each
row's value network, KL placement and responses per prompt as the traits say. Adding an estimator to the table
without a row here, or changing a trait without the row, fails."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from ppo_core.config import PPOConfig
from ppo_core.config.estimator_traits import CRITIC_READS, ESTIMATORS, EstimatorTraits, default_generations

DOC = Path(__file__).resolve().parent.parent / "docs" / "estimators.md"
COLUMNS = ["`advantage_estimator`", "baseline", "value network", "KL by default", "responses per prompt by default"]


def doc_rows(text: str) -> dict[str, dict[str, str]]:
    """The rows of the markdown table whose header is :data:`COLUMNS`, keyed by estimator name (the backticked name
    in the first cell; a trailing "(default)" kept apart under "default")."""
    lines = text.splitlines()
    start = lines.index("| " + " | ".join(COLUMNS) + " |")
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        name = re.fullmatch(r"`(\w+)`( \(default\))?", cells[0])
        assert name is not None, f"the first cell names no estimator: {cells[0]!r}"
        rows[name.group(1)] = {"default": "yes" if name.group(2) else "", **dict(zip(COLUMNS[1:], cells[1:],
                                                                                  strict=True))}
    return rows


def expected_row(name: str, traits: EstimatorTraits) -> dict[str, object]:
    """What the table's row must say of ``name``, from its traits."""
    return {"value network": "trained" if traits.critic else "none",
            "KL by default": "a loss term" if traits.kl_in_loss else "in the reward",
            "responses per prompt by default": str(default_generations(name))}


def row_says(row: dict[str, str]) -> dict[str, object]:
    return {"value network": row["value network"].split(" ")[0],
            "KL by default": "a loss term" if row["KL by default"].startswith("a loss term") else
            "in the reward" if row["KL by default"].startswith("in the reward") else row["KL by default"],
            "responses per prompt by default": row["responses per prompt by default"]}


def test_the_doc_lists_every_estimator_in_the_table_s_order_with_the_default_marked() -> None:
    rows = doc_rows(DOC.read_text(encoding="utf-8"))
    assert list(rows) == list(ESTIMATORS)
    default = next(f.default for f in fields(PPOConfig) if f.name == "advantage_estimator")
    assert [name for name, row in rows.items() if row["default"]] == [default]


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_each_row_says_what_the_estimator_s_traits_say(name: str) -> None:
    row = doc_rows(DOC.read_text(encoding="utf-8"))[name]
    assert row_says(row) == expected_row(name, ESTIMATORS[name])
    # A critic's row names its knobs: each one a field only a value network reads.
    knobs = set(re.findall(r"`(\w+)`", row["value network"]))
    assert knobs <= CRITIC_READS and bool(knobs) == ESTIMATORS[name].critic


def test_a_new_estimator_without_a_row_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check reads the table as it stands: a member added to it alone must show up as a missing row.
    monkeypatch.setitem(ESTIMATORS, "dummy", EstimatorTraits(critic=False, groups=True, kl_in_loss=False,
                                                             reads=frozenset({"num_generations"})))
    rows = doc_rows(DOC.read_text(encoding="utf-8"))
    assert list(rows) != list(ESTIMATORS) and "dummy" not in rows
    assert expected_row("dummy", ESTIMATORS["dummy"])["responses per prompt by default"] == "4"
