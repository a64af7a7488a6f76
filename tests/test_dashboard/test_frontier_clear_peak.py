"""A peak of gold in KL the data support, or none: the Frontier page and Health's advice on real study databases
whose gold is flat within the runs' noise or clearly peaked, and the rise, fall and noise against slow references."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from helpers.frontier_paths import peaked_paths
from optuna.distributions import FloatDistribution
from streamlit.testing.v1 import AppTest

from dashboard.advice import peak_advice
from dashboard.frontier_reading import headline
from dashboard.serve import STORAGE_ENV
from tuner.search.frontier_peak import FrontierPeak
from tuner.search.peak_reading import (
    CLEAR_MULTIPLE,
    PeakClearance,
    PeakReading,
    own_turns,
    peak_clearance,
    read_peak,
    run_noise,
)
from tuner.store.database import create_engine, open_storage
from tuner.store.records import TrialStore, create_tables

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
FLAT, PEAKED = "flat-gold", "peaked-gold"
KL_ADVICE = ("keep KL near", "Gold peaks at", "Aim kl_target")


def flat_gold() -> tuple[list[int], list[float], list[float]]:
    """Twelve trials whose gold is 0.505 plus run-to-run noise (SD 0.02) at every KL up to 10 nats, and one trial that
    went on to 23.6 nats and ended at 0.46: every point within 0.456-0.552, the only turn that one trial's last
    point. The smoothed curve still has its highest point inside the range, at 3.41 nats."""
    numbers, kls, golds = peaked_paths(np.geomspace(2.0, 10.0, 12), 1.0, evaluations=6, top=0.505, curvature=0.0,
                                       noise=0.02, rng=np.random.default_rng(2))
    return [*numbers, 12, 12, 12], [*kls, 6.0, 14.0, 23.6], [*golds, 0.50, 0.49, 0.46]


def peaked_gold() -> tuple[list[int], list[float], list[float]]:
    """Eight trials whose gold is 0.7 - 0.05 (ln KL - ln 2)^2 plus the same run-to-run noise: it peaks at 2 nats and
    lies 0.2 lower at 16 nats, the highest KL reached, and lower still at the lowest."""
    return peaked_paths(np.geomspace(0.5, 16.0, 8), 2.0, top=0.7, curvature=0.05, noise=0.02,
                        rng=np.random.default_rng(3))


def write_study(url: str, name: str, numbers: list[int], kls: list[float], golds: list[float]) -> None:
    """A study of complete trials, each with its held-out evaluations (eval/kl, eval/score, eval/gold_score) written
    through the tuner's own store, as a run writes them; each trial's objective is its last gold."""
    storage = open_storage(url)
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    engine = create_engine(url)
    create_tables(engine)
    frame = pd.DataFrame({"trial": numbers, "kl": kls, "gold": golds})
    for number, rows in frame.groupby("trial", sort=True):
        study.add_trial(optuna.trial.create_trial(
            params={"learning_rate": 1e-5 * (1 + int(number))},
            distributions={"learning_rate": FloatDistribution(1e-6, 1e-3, log=True)},
            value=float(rows["gold"].iloc[-1])))
        trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(name), int(number))
        store = TrialStore(engine, name, trial_id, int(number))
        for update, (kl, gold) in enumerate(zip(rows["kl"], rows["gold"], strict=True), start=1):
            store.write_metrics(update, {"update": float(update), "episode": float(update * 8), "eval/kl": float(kl),
                                         "eval/score": math.sqrt(float(kl)), "eval/gold_score": float(gold)})
    engine.dispose()


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('clear_peak') / 'studies.db'}"
    write_study(url, FLAT, *flat_gold())
    write_study(url, PEAKED, *peaked_gold())
    return url


def open_page(url: str, monkeypatch: pytest.MonkeyPatch, page: str, study: str) -> AppTest:
    monkeypatch.setenv(STORAGE_ENV, url)
    app = AppTest.from_file(str(APP), default_timeout=60)
    app.query_params["study"] = study
    app.run()
    app.switch_page(f"app_pages/{page}.py").run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def page_text(app: AppTest) -> str:
    return "\n".join(str(getattr(e, "value", "")) for kind in ("markdown", "caption", "warning", "info", "success")
                     for e in app.get(kind))


def chart_roles(app: AppTest) -> set[str]:
    (frontier,) = [json.loads(c.proto.spec) for c in app.get("plotly_chart") if c.key == "chart_frontier"]
    return {t.get("meta", {}).get("role") for t in frontier["data"]}


def test_flat_gold_with_one_low_point_at_high_kl_is_no_clear_peak_and_no_kl_advice(
    url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    frontier = open_page(url, monkeypatch, "frontier", FLAT)
    metrics = {m.label: m.value for m in frontier.metric}
    assert "Gold peaks at" not in metrics and "No clear peak" in metrics, metrics
    text = page_text(frontier)
    assert "No clear peak" in text and "0.136 to 23.6 nats" in text, text
    # The sizes the verdict rests on, in numbers: the rise, the fall and the runs' noise.
    assert all(word in text for word in ("rise +", "fall +", "noise ±", "run-to-run SD")), text
    assert not any(advice in text for advice in KL_ADVICE), text
    # The smoothed curve is still drawn; no KL is marked as a kl_target.
    assert "fit" in chart_roles(frontier) and not {"kl_star", "kl_interval"} & chart_roles(frontier)
    health = page_text(open_page(url, monkeypatch, "health", FLAT))
    assert "No clear peak" in health and not any(advice in health for advice in KL_ADVICE), health


def test_a_clear_peak_keeps_its_headline_interval_and_advice(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    frontier = open_page(url, monkeypatch, "frontier", PEAKED)
    metrics = {m.label: m.value for m in frontier.metric}
    kl = float(metrics["Gold peaks at"].removesuffix(" nats"))
    assert 1.0 < kl < 3.0, metrics  # the curve is flat near its top: where on it the peak lands is the tuner's matter
    assert metrics["80% interval"] != "—"
    text = page_text(frontier)
    assert "rise +" in text and "fall +" in text and "noise ±" in text, text
    assert {"kl_star", "kl_interval"} <= chart_roles(frontier)
    health = page_text(open_page(url, monkeypatch, "health", PEAKED))
    assert f"Gold peaks at {metrics['Gold peaks at']} of KL" in health
    assert f"Aim kl_target (with the adaptive controller) near {metrics['Gold peaks at']}" in health, health


def slow_clearance(curve: list[float], trials: list[int], x: list[float], y: list[float]) -> tuple[float, float, float]:
    """Rise, fall and run-to-run SD by their definitions, one point at a time: each point against the nearest point
    of another trial (the lower x on a tie, then the earlier point)."""
    squared = []
    for i in range(len(x)):
        others = [j for j in range(len(x)) if trials[j] != trials[i]]
        nearest = min(others, key=lambda j: (abs(x[j] - x[i]), x[j]))
        squared.append((y[i] - y[nearest]) ** 2)
    return max(curve) - curve[0], max(curve) - curve[-1], math.sqrt(sum(squared) / (2 * len(squared)))


@pytest.mark.parametrize("seed", range(8))
def test_rise_fall_and_noise_match_the_slow_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 60))
    trials = rng.integers(0, int(rng.integers(2, 9)), n)
    trials[:2] = [0, 1]  # at least two trials
    x = rng.uniform(-3.0, 3.5, n)
    if seed % 2:  # KLs on a coarse grid: ties in x, within a trial and across trials
        x = np.round(x)
    y = rng.normal(0.5, 0.05, n)
    curve = rng.normal(0.5, 0.05, int(rng.integers(1, 30)))
    found = peak_clearance(curve, trials, x, y)
    assert (found.rise, found.fall, found.noise) == pytest.approx(
        slow_clearance(curve.tolist(), trials.tolist(), x.tolist(), y.tolist()), rel=1e-12)


def test_run_noise_pairs_only_points_of_different_trials() -> None:
    # Trial 0's two points sit together; each is paired with trial 1's nearest (0.3 -> 0.5, 0.4 -> 0.5), and trial
    # 1's with trial 0's nearest (0.5 -> 0.4, 2.0 -> 0.4): squared differences 0.01, 0.04, 0.04, 0.25.
    noise = run_noise(np.array([0, 0, 1, 1]), np.array([0.3, 0.4, 0.5, 2.0]), np.array([1.1, 1.0, 1.2, 1.5]))
    assert noise == pytest.approx(math.sqrt((0.01 + 0.04 + 0.04 + 0.25) / 8))
    assert math.isnan(run_noise(np.zeros(3, dtype=int), np.arange(3.0), np.ones(3)))  # one trial: no pairs


def reading(status: str, rise: float, fall: float, noise: float = 0.01) -> PeakReading:
    peak = FrontierPeak(status, 3.0, 0.6, 2.0, 4.0, 0.9, 0.2, 20.0, 10, 60, 0.45,
                        curve_kl=(0.2, 3.0, 20.0), curve_value=(0.6 - rise, 0.6, 0.6 - fall))
    return PeakReading(peak, PeakClearance(rise, fall, noise))


CLEAR, WITHIN = 1.01 * CLEAR_MULTIPLE * 0.01, 0.99 * CLEAR_MULTIPLE * 0.01


@pytest.mark.parametrize(("status", "rise", "fall", "expected"), [
    ("peak", CLEAR, CLEAR, "peak"),
    ("peak", CLEAR, WITHIN, "unclear"),  # rises, then levels off
    ("peak", WITHIN, CLEAR, "unclear"),  # level, then falls
    ("peak", WITHIN, WITHIN, "unclear"),  # a plateau
    ("rising", CLEAR, 0.0, "rising"),
    ("rising", WITHIN, 0.0, "unclear"),
    ("falling", 0.0, CLEAR, "falling"),
    ("falling", 0.0, WITHIN, "unclear"),
])
def test_a_peak_or_a_slope_is_named_only_where_it_clears_twice_the_runs_noise(
    status: str, rise: float, fall: float, expected: str,
) -> None:
    read = reading(status, rise, fall)
    assert read.status == expected and read.found == (expected == "peak")
    lead = headline(read)
    if expected == "unclear":
        assert lead.label == "No clear peak" and lead.value is None
        assert "no kl_target to suggest" in lead.words and "3 nats of KL" not in lead.words
        assert f"noise ±{0.01:.2g} (run-to-run SD)" in lead.words
    else:
        assert lead.value == "3 nats"


def own_turns_reference(paths: pd.DataFrame, noise: float) -> list[tuple[int, float]]:
    """The slow reference: each trial's evaluations in update order, scanned by hand."""
    found = []
    for trial in sorted(set(paths["trial"])):
        rows = sorted((u, k, g) for t, u, k, g in zip(paths["trial"], paths["update"], paths["kl"], paths["gold"],
                                                       strict=True) if t == trial and not math.isnan(g))
        best = 0
        for i, (_, _, g) in enumerate(rows):
            if g > rows[best][2]:
                best = i
        top = rows[best][2]
        if 0 < best < len(rows) - 1 and top - rows[0][2] > CLEAR_MULTIPLE * noise \
                and top - rows[-1][2] > CLEAR_MULTIPLE * noise:
            found.append((trial, rows[best][1]))
    return found


def test_own_turns_match_a_scan_by_hand() -> None:
    rng = np.random.default_rng(7)
    paths = pd.DataFrame({"trial": np.repeat(np.arange(9), 6), "update": np.tile(np.arange(1, 7), 9),
                          "kl": rng.uniform(0.1, 30, 54), "gold": rng.uniform(0, 1, 54)})
    for noise in (0.02, 0.1, 0.3):
        assert [(turn.trial, turn.kl) for turn in own_turns(paths, noise)] == own_turns_reference(paths, noise)
    assert own_turns(paths, math.nan) == ()


def hacked_runs() -> pd.DataFrame:
    """Three runs as the fifth text task's curve drew them: each rises to a peak of gold at its own KL, 27-39 nats,
    then hacks its proxy; the first parks at 39-50 nats with gold 0, where the others still peak."""
    runs = {0: ([0, 3.5, 13.6, 27.4, 43.9, 39.4, 40.2, 40.5, 46.4], [0.34, 0.46, 0.65, 0.89, 0, 0, 0, 0, 0]),
            1: ([0, 2.8, 4.4, 10.2, 20.3, 38.9, 54.1, 61.1, 56.5], [0.36, 0.44, 0.52, 0.59, 0.67, 0.70, 0.41, 0, 0]),
            2: ([0, 1.0, 3.6, 8.1, 17.6, 37.4, 51.6, 62.8, 62.2], [0.36, 0.46, 0.41, 0.45, 0.69, 0.82, 0.24, 0.05, 0])}
    return pd.DataFrame([{"trial": t, "update": 8 * i, "kl": k, "gold": g}
                         for t, (kls, golds) in runs.items() for i, (k, g) in enumerate(zip(kls, golds, strict=True))])


def test_runs_that_turn_at_their_own_kl_are_named_where_the_pooled_curve_shows_no_peak() -> None:
    reading = read_peak(hacked_runs())
    assert not reading.found  # pooled in KL, one run's collapse sits beside the others' peaks
    words = headline(reading).words
    assert "trials rose and then fell by more than 2x the noise" in words and "nats: gold turns within runs" in words
    assert {turn.trial for turn in reading.own} >= {0, 2}
    assert all(27 <= turn.kl <= 39 for turn in reading.own)


def test_a_flat_study_names_no_trials_that_turned() -> None:
    numbers, kls, golds = flat_gold()
    paths = pd.DataFrame({"trial": numbers, "kl": kls, "gold": golds})
    paths["update"] = paths.groupby("trial").cumcount() + 1
    reading = read_peak(paths)
    assert len(reading.own) < reading.peak.trials / 2  # a few pass by noise alone; too few to be named
    assert "turns within runs" not in headline(reading).words


def test_a_kl_range_that_starts_below_zero_reads_as_a_range_not_a_subtraction() -> None:
    # A held-out KL estimate near the start can dip below zero (an unbiased estimator's noise): the flat study with
    # its first evaluation at -0.0552 nats, read as the Frontier page, `ppo-tune show` and Health's advice read it.
    numbers, kls, golds = flat_gold()
    paths = pd.DataFrame({"trial": numbers, "kl": [-0.0552, *kls[1:]], "gold": golds})
    paths["update"] = paths.groupby("trial").cumcount() + 1
    reading = read_peak(paths)
    assert reading.status == "unclear" and reading.peak.kl_min == -0.0552
    (advice,) = peak_advice(reading)
    for text in (headline(reading).words, advice.evidence):
        assert re.search(r"\d-[-\d]", text) is None, text  # "-0.0552-23.6" reads as a subtraction
        assert "across -0.0552 to 23.6 nats" in text, text
