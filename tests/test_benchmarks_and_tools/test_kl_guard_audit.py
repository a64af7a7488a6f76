"""benchmarks.kl_guard_audit: the KL guard's verdicts on the committed curve tables, and its quick mode end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from benchmarks.curve_table import TABLE_SPACE
from benchmarks.kl_guard_audit import RULES, audit_table, default_tables
from tuner.study.study_file import load_study_spec

REPO = Path(__file__).resolve().parents[2]


def test_the_guard_stops_none_of_the_good_runs_of_a_table_the_old_rule_stopped_four_of() -> None:
    # Task seed 2's curve table: the runs of the configurations within 5% of the best (16 runs of 8). The guard as it
    # read one batch's KL and its fitted trend stopped 4 of them; the level and the bound stop none, and still catch
    # every run that diverges or ends over the threshold.
    table = REPO / "benchmarks" / "results" / "curve_tables" / "curve_table_task2.jsonl"
    found = audit_table(table, load_study_spec(TABLE_SPACE))["rules"]
    assert found["last_value"]["good"]["stopped"] == 4 and found["last_value"]["good"]["runs"] == 16
    assert found["shipped"]["good"]["stopped"] == 0
    over = found["shipped"]["over_threshold"]
    assert over["runs"] > 0 and over["stopped"] == over["runs"]
    assert set(RULES) == {"shipped", "last_value"}


def test_the_quick_audit_reports_every_figure_and_refuses_a_missing_table(tmp_path: Path) -> None:
    out = tmp_path / "audit.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.kl_guard_audit", "--quick", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["quick"] and len(result["tables"]) == 1 and result["code"]
    for figures in result["tables"][0]["rules"].values():
        for kind in ("good", "feasible", "blown_up", "over_threshold", "over_budget_only"):
            assert 0 <= figures[kind]["stopped"] <= figures[kind]["runs"], kind
        assert figures["good"]["runs"] > 0 and math.isfinite(figures["saved_share"])
        assert figures["updates"]["total"] > 0 and figures["seconds"]["total"] > 0
    assert "| shipped |" in done.stdout and "| last_value |" in done.stdout
    missing = subprocess.run([sys.executable, "-m", "benchmarks.kl_guard_audit", "--quick", "--tables",
                              str(tmp_path / "none.jsonl")], cwd=REPO, capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        f"--tables: no such file: {tmp_path / 'none.jsonl'}"]


def test_the_default_audit_reads_only_the_tables_of_its_own_space() -> None:
    # The text table (drawn from benchmarks/text_table_space.yaml, as recorded beside it) was read with the graph
    # tables' guard, whose budget and threshold are not its own.
    names = [path.name for path in default_tables()]
    assert "curve_table.jsonl" in names and "curve_table_task3.jsonl" in names
    assert "curve_table_text.jsonl" not in names
