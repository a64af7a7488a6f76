"""``python -m tools.mutation_score --quick`` runs mutmut over one of ppo_core's math modules end to end and
reports a complete score: killed / total for the module, and every mutant not killed with its line and its change.

The run is a fresh process, as a user starts it, and its JSON is read back. Nothing here is about speed or about the
score's value (tools/README.md publishes the full run's): this keeps the runner working while ppo_core, its
tests and mutmut move.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.mutation_score import MODULES, QUICK_MODULE

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("mutation") / "mutation.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run([sys.executable, "-m", "tools.mutation_score", "--quick", "--out", str(out)],
                               cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, \
        f"mutation_score --quick failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-5000:]}"
    return json.loads(out.read_text()), completed.stdout


def test_quick_mode_scores_its_one_module(quick_run: tuple[dict[str, Any], str]) -> None:
    result, _ = quick_run
    assert result["settings"]["quick"] and result["settings"]["modules"] == [QUICK_MODULE]
    assert result["mutmut"] and result["code"]
    [row] = result["modules"]
    assert row["module"] == QUICK_MODULE and row["tests"] == list(MODULES[QUICK_MODULE]) and row["code"]
    assert row["total"] > 0 and 0 <= row["killed"] <= row["total"]
    assert row["score"] == pytest.approx(row["killed"] / row["total"])
    assert sum(row["counts"].values()) == row["total"] and row["counts"].get("killed", 0) == row["killed"]
    assert (result["total"], result["killed"]) == (row["total"], row["killed"])


def test_quick_mode_lists_every_mutant_it_did_not_kill(quick_run: tuple[dict[str, Any], str]) -> None:
    result, printed = quick_run
    [row] = result["modules"]
    survivors = row["survivors"]
    assert isinstance(survivors, list) and len(survivors) == row["total"] - row["killed"]  # may be empty
    source = (REPO / QUICK_MODULE).read_text().splitlines()
    for survivor in survivors:
        assert survivor["module"] == QUICK_MODULE and survivor["status"] != "killed"
        assert 1 <= survivor["line"] <= len(source)
        assert " -> " in survivor["mutation"] and survivor["function"] and survivor["mutant"]
        # The line named is the one the mutation changes.
        before = survivor["mutation"].split(" -> ")[0].split(" / ")[0]
        assert source[survivor["line"] - 1].strip() == before, survivor
    # The printed report: the score row, then the survivors' count and table (or "(none)").
    assert f"| `{QUICK_MODULE}`" in printed and f"{row['killed']} / {row['total']}" in printed
    assert f"Survivors: {len(survivors)}" in printed
    assert ("(none)" in printed) == (not survivors)
