"""The ranking replay's quick mode (benchmarks/ranking_replay.py): both trees replayed on one table, each strategy's
paired comparison written, finite."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

from benchmarks import ranking_replay


def test_quick_mode_pairs_both_trees_on_a_table(tmp_path: Path) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ranking_replay.ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    out = tmp_path / "ranking.json"
    ranking_replay.main(["--base", head, "--quick", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["base"] == head and list(result["tables"]) == ["curve_table.jsonl"]
    for strategy in ranking_replay.STRATEGIES:
        compared = result["tables"]["curve_table.jsonl"][strategy]
        assert compared["repeats"] == 2 and 0 <= compared["winner_changed"] <= 2
        assert all(math.isfinite(compared[key]["mean"]) for key in ("regret", "updates_to_target"))
