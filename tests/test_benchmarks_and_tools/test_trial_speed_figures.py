"""The trial-speed figures that the benchmarks index (benchmarks/README.md) and the benchmark's page
(benchmarks/results/trial_speed/README.md) publish are the ones in benchmarks/results/trial_speed/trial_speed.json, at
their printed precision."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT = json.loads((ROOT / "benchmarks/results/trial_speed/trial_speed.json").read_text())
INDEX = " ".join((ROOT / "benchmarks/results/trial_speed/README.md").read_text().split())  # lines joined: figures wrap
BENCHMARKS_INDEX = " ".join((ROOT / "benchmarks/README.md").read_text().split())


def signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def test_the_speed_row_is_the_files_median_and_range() -> None:
    summary = RESULT["summary"]
    for name in ("A", "B", "B_fp32"):
        rate = summary[name]["episodes_per_s"]
        row = f"{rate['median']:.2f} ({rate['min']:.2f}-{rate['max']:.2f})"
        assert row in INDEX, (name, row)
    ratio = summary["B"]["over_a"]
    published = f"{ratio['median']:.2f}x"
    assert f"{published} ({ratio['min']:.2f}-{ratio['max']:.2f})" in INDEX
    assert f"{summary['B']['eval_share']['median']:.0%}" in INDEX
    assert len(RESULT["rounds"]) == 6 and RESULT["base"].startswith("eb62c2d")


def test_the_index_quotes_the_latest_run() -> None:
    # The latest A/B against eb62c2d, with its rounds' range: the Zen 4's, after the evaluation read its
    # log-probabilities from the decode steps. (README.md no longer quotes it: it describes older code on a Zen 4.)
    path = ROOT / "benchmarks/results/trial_speed/trial_speed_eval_vs_eb62c2d_epyc_zen4.json"
    latest = json.loads(path.read_text())
    ratio = latest["summary"]["B"]["over_a"]
    rounds = len(latest["rounds"])
    assert f"{ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f} over {rounds} rounds" in BENCHMARKS_INDEX
    assert latest["base"].startswith("eb62c2d") and len(latest["rounds"]) == 3


def test_the_numerics_intervals_are_the_files() -> None:
    paired = RESULT["paired"]
    assert paired["reference"] == "A"
    # The default's gold is in the table of every figure and in the section; B_fp32's in the section only. An
    # edited copy lowers the count.
    for name, copies in (("B", 2), ("B_fp32", 1)):
        gold = paired[name]["eval_gold"]
        kl = paired[name]["eval_kl"]
        assert INDEX.count(f"{signed(gold[0])} [{signed(gold[1])}, {signed(gold[2])}]") == copies, (name, gold)
        assert INDEX.count(f"{kl[0]:+.2f} [{kl[1]:+.2f}, {kl[2]:+.2f}]".replace("-", "−")) == 1, (name, kl)
