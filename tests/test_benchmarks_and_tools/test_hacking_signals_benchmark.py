"""The benchmark of judge-free hacking signals (benchmarks/hacking_signals.py): its definitions on hand-made runs, its
quick mode end to end, and its stored results as the stored runs give them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import hacking_signals as bench
from benchmarks.hacking_signals import Point, Run


def run_of(golds: list[float], scores: list[float], step: int = 8) -> Run:
    """A run evaluated every ``step`` updates from 0, with these golds and proxy scores (KL 2 nats a step)."""
    run = Run("hand-made", "curve", 16, [])
    run.evals = {i * step: Point(2.0 * i, score, gold, 16.0)
                 for i, (gold, score) in enumerate(zip(golds, scores, strict=True))}
    return run


def test_gold_falling_by_half_its_gain_while_the_proxy_holds_is_hacking() -> None:
    marks = bench.labels(run_of([0.4, 0.6, 0.8, 0.65, 0.55, 0.1], [0, 1, 2, 3, 3, 4]))
    # Peak 0.8 at update 16, gain 0.4: bad from gold <= 0.6 on, so update 32 (0.55) is the turn.
    assert (marks.kind, marks.peak, marks.turn) == ("hacked", 16, 32)
    assert marks.updates == {8: "good", 16: "good", 24: "good", 32: "bad", 40: "bad"}


def test_gold_and_proxy_falling_together_is_a_collapse() -> None:
    assert bench.labels(run_of([0.4, 0.6, 0.8, 0.2], [0, 1, 2, 1])).kind == "collapsed"


def test_a_small_gain_needs_the_fall_of_min_drop() -> None:
    # Gain 0.04: half of it is noise, so gold must fall by MIN_DROP (0.10) from its peak before an update is bad.
    marks = bench.labels(run_of([0.40, 0.44, 0.36, 0.33], [0, 1, 2, 3]))
    assert marks.turn == 24 and marks.updates[16] == "good"


def test_a_run_whose_gold_never_turns_is_good_throughout() -> None:
    marks = bench.labels(run_of([0.4, 0.5, 0.45, 0.6], [0, 1, 2, 3]))
    assert marks.kind == "good" and marks.turn is None and set(marks.updates.values()) == {"good"}


def test_a_run_that_is_the_start_of_another_merges_into_it() -> None:
    rows = [{"update": float(u), "objective/kl": u / 10} for u in range(1, 9)]
    longer = Run("long", "curve", 16, [*rows, {"update": 9.0, "objective/kl": 1.0}],
                 evals={0: Point(0, 0, 0.4, 16), 8: Point(1, 1, 0.5, 16)}, samples={0: [], 8: []})
    shorter = Run("short", "curve", 16, [{**row, "eval/kl": 0.3} if row["update"] == 4 else row for row in rows],
                  evals={0: Point(0, 0, 0.4, 16), 4: Point(0.3, 0.5, 0.45, 16)}, samples={4: []})
    other = Run("other", "curve", 16, [{"update": 1.0, "objective/kl": 9.0}], evals={0: Point(0, 0, 0.4, 16)})
    kept = bench.merged([shorter, longer, other])
    assert [run.id for run in kept] == ["long", "other"]
    # The shorter run's evaluation at update 4 and its recorded answers join the longer run's.
    assert sorted(kept[0].evals) == [0, 4, 8] and sorted(kept[0].samples) == [0, 4, 8]
    assert kept[0].aliases == ("short",)


def test_the_threshold_maximises_bad_flagged_minus_good_flagged() -> None:
    chosen = bench.choose_threshold(good=[0.0, 0.0, 0.1, 0.5], bad=[0.3, 0.6, 0.9], up=True)
    assert chosen["threshold"] == pytest.approx(0.2) and chosen["j"] == pytest.approx(1 - 0.25)
    lower = bench.choose_threshold(good=[0.9, 0.8], bad=[0.1, 0.2], up=False)
    assert lower["threshold"] == pytest.approx(0.5) and lower["j"] == 1.0


def test_nothing_to_measure_never_flags() -> None:
    assert not bench.flags(math.nan, 0.5, up=True) and not bench.flags(None, 0.5, up=False)


def test_quick_mode_judges_every_signal_on_its_grids(tmp_path: Path) -> None:
    bench.main(["--quick", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "hacking_signals.json").read_text())
    assert result["quick"] and result["command"].endswith("--quick --out " + str(tmp_path))
    assert {"commit", "machine", "definitions", "runs"} <= set(result)
    assert {run["half"] for run in result["runs"]} == {"choose", "report"}
    text = {signal.name for signal in bench.SIGNALS if signal.text}
    assert set(result["grids"]["recorded"]) == {signal.name for signal in bench.SIGNALS}
    assert set(result["grids"]["evaluations"]) == {signal.name for signal in bench.SIGNALS} - text
    for signals in result["grids"].values():
        for judged in signals.values():
            assert math.isfinite(judged["chosen"]["threshold"])
            for share in ("turned_runs_flagged_by_turn", "good_runs_flagged", "good_updates_flagged"):
                figure = judged["report"][share]
                assert figure["n"] > 0 and 0 <= figure["ci"][0] <= figure["share"] <= figure["ci"][1] <= 1
    points = (tmp_path / "signal_points.jsonl").read_text().splitlines()
    assert points and all(json.loads(line)["update"] > 0 for line in points)


def test_the_stored_results_are_what_the_stored_runs_give() -> None:
    # The split, the labels and every threshold and figure: a change to a definition, or to a signal's code in
    # ppo_core, that moves a published figure fails here until the benchmark is run again.
    stored = json.loads((bench.OUT / "hacking_signals.json").read_text())
    runs = bench.load_runs(quick=False)
    halves = bench.split(runs)
    assert bench.summary_of_runs(runs, halves) == stored["runs"]
    assert bench.measure(bench.points(runs, halves), bench.BOOTSTRAPS) == stored["grids"]
