"""The peak-reading benchmark: what the Frontier page and the advice read from run directories, end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks import peak_reading
from ppo_core.metric_names import EVAL_GOLD_SCORE, EVAL_KL, EVAL_SCORE


def test_the_quick_run_reads_the_peak_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "peak.json"
    result = peak_reading.main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    reading = result["runs"]["reading"]
    assert reading["status"] == "peak" and 3.0 < reading["kl"] < 5.5
    assert reading["rise"] > 2 * reading["noise"] and reading["fall"] > 2 * reading["noise"]
    assert [p["trial"] for p in reading["own_peaks"]] == [0, 1, 2]
    assert [turn["trial"] for turn in reading["own_turns"]] == [0, 1, 2]  # each quick run rises and falls
    assert all(3.0 < p["kl"] < 5.5 for p in reading["own_peaks"])
    assert reading["advice"] and reading["advice"][0].startswith("Gold peaks at")
    assert result["quick"] and "--quick" in result["command"]


def test_flat_gold_names_no_peak_and_gives_no_kl_advice(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    runs = []
    for seed in range(3):
        run = tmp_path / f"seed_{seed}"
        run.mkdir()
        rows = [{"update": float(u), EVAL_KL: 0.5 * 1.25 ** (u + seed / 3), EVAL_SCORE: float(u),
                 EVAL_GOLD_SCORE: 0.5 + float(rng.normal(0, 0.03))} for u in range(1, 21)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append(str(run))
    reading = peak_reading.main(["--runs", *runs, "--out", str(tmp_path / "flat.json")])["runs"]["reading"]
    assert reading["status"] != "peak"
    assert not any(title.startswith("Gold peaks at") for title in reading["advice"])
    assert math.isfinite(reading["noise"]) and reading["noise"] > 0.01


@pytest.mark.parametrize("argv, words", [
    ([], "give --study-db, --runs or --quick"),
    (["--runs", "nowhere"], "nowhere has no metrics.jsonl"),
    (["--study-db", "missing.db"], "missing.db is not a file"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        peak_reading.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
