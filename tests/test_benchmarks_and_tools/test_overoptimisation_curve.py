"""benchmarks.overoptimisation_curve: its quick mode end to end (every figure finite, the figure drawn), a second call
that reads the finished runs back instead of training again, and the summary's arithmetic by hand."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import overoptimisation_curve
from benchmarks.overoptimisation_curve import interval, summarise

pytestmark = pytest.mark.heavy

REPO = Path(__file__).resolve().parents[2]
CURVES = REPO / "benchmarks" / "results" / "overoptimisation_curve"


def run(out: Path, work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks.overoptimisation_curve", "--quick", "--out", str(out),
                           "--work-dir", str(work)], cwd=REPO, capture_output=True, text=True, check=False,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}, timeout=900)


def test_quick_mode_reports_every_figure_and_resumes_without_training_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    out, work = tmp_path / "curve.json", tmp_path / "runs"
    first = run(out, work)
    assert first.returncode == 0, first.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["seeds"] == [0, 1] and result["untuned_update"] == 0
    for key in ("peak_gain", "fall_after_peak", "proxy_change_after_peak", "kl_at_peak", "kl_at_end",
                "own_peak_gain", "own_fall_to_end"):
        assert all(math.isfinite(value) for value in result[key]), key
    assert [point["update"] for point in result["curve"]][:2] == [0, 2]
    assert result["curve"][0]["eval/kl"][0] == 0.0  # the untuned policy, evaluated before training
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = {seed: (work / f"seed_{seed}" / "metrics.jsonl").read_text() for seed in (0, 1)}
    # Read back in this process: the command line ran above, and a second start would spend seconds importing.
    capsys.readouterr()
    assert overoptimisation_curve.main(["--quick", "--out", str(out), "--work-dir", str(work)]) == 0
    assert capsys.readouterr().out.count("finished, read back") == 2
    assert {seed: (work / f"seed_{seed}" / "metrics.jsonl").read_text() for seed in (0, 1)} == metrics
    assert json.loads(out.read_text())["curve"] == result["curve"]


def test_interval_is_the_t_interval_of_the_mean() -> None:
    mean, low, high = interval([1.0, 2.0, 3.0, 6.0])
    # mean 3, sd sqrt(14/3), t(0.975, 3) = 3.182446
    half = 3.182446305284263 * math.sqrt(14 / 3) / 2
    assert (mean, low, high) == pytest.approx((3.0, 3.0 - half, 3.0 + half))
    assert math.isnan(interval([1.0])[1])


def test_the_summary_pairs_each_seed_with_itself() -> None:
    def row(update: int, gold: float, proxy: float, kl: float) -> dict[str, float]:
        return {"update": update, "eval/gold_score": gold, "eval/score": proxy, "eval/kl": kl}

    runs = {0: [row(0, 0.4, -0.5, 0.0), row(4, 0.6, 0.0, 5.0), row(8, 0.3, 1.0, 30.0)],
            1: [row(0, 0.3, -0.4, 0.0), row(4, 0.6, 0.2, 6.0), row(8, 0.2, 0.8, 25.0)]}
    summary = summarise(runs)
    assert summary["peak_update"] == 4
    assert summary["peak_gain"][0] == pytest.approx(0.25)  # (0.2 + 0.3) / 2
    assert summary["fall_after_peak"][0] == pytest.approx(0.35)  # (0.3 + 0.4) / 2
    assert summary["proxy_change_after_peak"][0] == pytest.approx(0.8)  # (1.0 + 0.6) / 2
    assert summary["kl_at_peak"][0] == pytest.approx(5.5)
    assert summary["own_peak_gain"][0] == pytest.approx(0.25)
    assert summary["per_seed"]["1"] == {"untuned_gold": 0.3, "peak_update": 4, "peak_gold": 0.6, "peak_kl": 6.0,
                                        "end_gold": 0.2, "end_kl": 25.0,
                                        "end_proxy_minus_peak_proxy": pytest.approx(0.6)}


def test_the_published_figures_are_the_results_files() -> None:
    result = json.loads((CURVES / "overoptimisation_curve.json").read_text())
    gain, fall = result["peak_gain"], result["fall_after_peak"]
    page = (CURVES / "README.md").read_text()
    assert f"{gain[0]:+.3f} over the\n  untuned policy, paired 95% [{gain[1]:+.3f}, {gain[2]:+.3f}]" in page
    assert f"mean gold falls {fall[0]:.3f}, 95%\n  [{fall[1]:+.3f}, {fall[2]:+.3f}]" in page
    for point in result["curve"]:
        gold = point["eval/gold_score"]
        assert f"| {point['update']} | " in page and f"{gold[0]:.3f} [{gold[1]:.3f}, {gold[2]:.3f}]" in page


def test_the_fifth_tasks_published_figures_are_its_results_file() -> None:
    result = json.loads((CURVES / "v5" / "overoptimisation_curve_v5.json").read_text())
    page = " ".join((CURVES / "README.md").read_text().split())  # lines joined: figures wrap
    own, falls, mean = result["own_peak_gain"], result["own_fall_to_end"], result["peak_gain"]
    assert f"lies {own[0]:+.3f} above its untuned gold, 95% [{own[1]:+.3f}, {own[2]:+.3f}]" in page
    assert f"seed's gold falls {falls[0]:.3f}, 95% [{falls[1]:+.3f}, {falls[2]:+.3f}]" in page
    assert f"is {mean[0]:+.3f} above the untuned mean, 95% [{mean[1]:+.3f}, {mean[2]:+.3f}]" in page
    assert all(seed["end_gold"] == 0.0 for seed in result["per_seed"].values())
    for point in result["curve"]:
        gold = point["eval/gold_score"]
        if point["update"] in (8, 16, 24, 32, 40, 48):
            assert f"| {point['update']} | " in page and f"{gold[0]:.3f} [{gold[1]:.3f}, {gold[2]:.3f}]" in page


def test_the_long_runs_published_figures_are_its_metrics() -> None:
    from benchmarks.overoptimisation_curve import evaluations

    rows = {row["update"]: row for row in evaluations(CURVES / "long" / "seed_1")}
    page = (CURVES / "README.md").read_text()
    untuned, peak = rows[0]["eval/gold_score"], rows[48]
    assert f"held-out gold {untuned:.3f}\n  untuned, {peak['eval/gold_score']:.3f} at update 48 " \
           f"({peak['eval/kl']:.1f} nats" in page
    assert f"{rows[56]['eval/gold_score']:.3f} at update 56 ({rows[56]['eval/kl']:.1f} nats)" in page
    assert all(rows[u]["eval/gold_score"] == 0.0 for u in (64, 72, 80, 88, 96))


def test_the_third_tasks_published_figures_are_its_results_file() -> None:
    result = json.loads((CURVES / "v3" / "overoptimisation_curve_v3.json").read_text())
    page = " ".join((CURVES / "README.md").read_text().split())  # lines joined: figures wrap
    own, fall, mean = result["own_peak_gain"], result["fall_after_peak"], result["peak_gain"]
    falls = result["own_fall_to_end"]
    assert f"gold falls {falls[0]:.3f}, 95% [{falls[1]:+.3f}, {falls[2]:+.3f}]" in page
    assert f"peak lies {own[0]:+.3f} above its untuned gold, 95% [{own[1]:+.3f}, {own[2]:+.3f}]" in page
    assert f"update {result['peak_update']}, is only {mean[0]:+.3f} above the untuned mean, 95% " \
           f"[{mean[1]:+.3f}, {mean[2]:+.3f}]" in page
    assert fall[0] > 0  # the mean curve falls after its best evaluation too
    for point in result["curve"]:
        gold, kl = point["eval/gold_score"], point["eval/kl"]
        assert f"| {point['update']} | {kl[0]:.1f} [{kl[1]:.1f}, {kl[2]:.1f}] | " \
               f"{gold[0]:.3f} [{gold[1]:.3f}, {gold[2]:.3f}] |" in page, point["update"]
    for seed, row in result["per_seed"].items():
        assert f"| {seed} | {row['untuned_gold']:.3f} | {row['peak_gold']:.3f} at {int(row['peak_update'])} " \
               f"({row['peak_kl']:.1f}) | {row['end_gold']:.3f} at {row['end_kl']:.1f} |" in page, seed
