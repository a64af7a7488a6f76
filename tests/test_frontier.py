"""The reward–KL frontier's math (dashboard.frontier) and figures (dashboard.frontier_charts)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dashboard.frontier import (
    GOLD_BOUNDS,
    KL_MARGIN,
    FrontierSource,
    final_points,
    fit_gao,
    frontier_source,
    gao_curve,
    gold_peaks,
    headline,
    pareto_front,
    trajectories,
)
from dashboard.frontier_charts import frontier_figure, traces_with_role, trajectory_figure

ALPHA, BETA, R0 = 0.4, 0.2, 0.1  # peak at d* = exp(1), KL* = e^2, gold there 0.64: a gold score, in [0, 1]


def metrics_frame(with_eval: bool = True, with_gold: bool = True, updates: int = 8) -> pd.DataFrame:
    """Two trials whose training KL grows; every fourth update is an evaluation update (eval/* NaN elsewhere)."""
    rows = []
    for trial in (0, 1):
        for update in range(1, updates + 1):
            kl = 0.5 * update * (trial + 1) - 0.2
            d = math.sqrt(max(kl, 0.0))
            row: dict[str, float] = {
                "trial_id": trial + 10, "trial_number": trial, "update": update, "episode": update * 4,
                "objective/kl": kl, "objective/scores": d,
            }
            if with_gold:
                row["objective/gold_score"] = float(gao_curve(np.array([d]), R0, ALPHA, BETA)[0])
            if with_eval:
                evaluated = update % 4 == 0
                row["eval/kl"] = kl * 1.1 if evaluated else math.nan
                row["eval/score"] = d if evaluated else math.nan
                if with_gold:
                    row["eval/gold_score"] = row["objective/gold_score"] if evaluated else math.nan
            rows.append(row)
    return pd.DataFrame(rows)


def test_source_prefers_held_out_metrics() -> None:
    source = frontier_source(metrics_frame())
    assert (source.kind, source.kl, source.proxy, source.gold) == ("eval", "eval/kl", "eval/score", "eval/gold_score")
    paths = trajectories(metrics_frame(), source)
    assert len(paths) == 4  # updates 4 and 8 of two trials: eval rows only
    assert list(paths.columns) == ["trial", "update", "kl", "sqrt_kl", "proxy", "gold"]


def test_source_falls_back_to_training_metrics() -> None:
    source = frontier_source(metrics_frame(with_eval=False))
    assert (source.kind, source.kl, source.proxy, source.gold) == (
        "train", "objective/kl", "objective/scores", "objective/gold_score")
    assert len(trajectories(metrics_frame(with_eval=False), source)) == 16


def test_study_without_gold_says_so_and_uses_the_proxy() -> None:
    metrics = metrics_frame(with_gold=False)
    source = frontier_source(metrics)
    assert source.gold is None and not source.has_gold and "no gold score" in source.note
    paths = trajectories(metrics, source)
    assert paths["gold"].isna().all()
    assert gold_peaks(paths).empty
    points = final_points(paths, {0: "COMPLETE", 1: "COMPLETE"})
    assert np.allclose(points["y"], points["proxy"])


def test_negative_kl_is_clipped_before_the_root() -> None:
    source = frontier_source(metrics_frame(with_eval=False))
    paths = trajectories(metrics_frame(with_eval=False), source)
    first = paths.iloc[0]
    assert first["kl"] == pytest.approx(0.3)
    frame = metrics_frame(with_eval=False)
    frame.loc[0, "objective/kl"] = -0.01
    paths = trajectories(frame, source)
    assert paths.iloc[0]["kl"] == pytest.approx(-0.01) and paths.iloc[0]["sqrt_kl"] == 0.0
    assert np.isfinite(paths["sqrt_kl"]).all()


def test_gold_peaks_and_final_points() -> None:
    metrics = metrics_frame(with_eval=False, updates=12)
    paths = trajectories(metrics, frontier_source(metrics))
    peaks = gold_peaks(paths)
    assert list(peaks["trial"]) == [0, 1]
    for row in peaks.itertuples():
        rows = paths[paths["trial"] == row.trial]
        assert row.gold == rows["gold"].max()
        assert row.update == int(rows.loc[rows["gold"].idxmax(), "update"])
    points = final_points(paths, {0: "COMPLETE", 1: "PRUNED"})
    assert list(points["update"]) == [12, 12]
    assert list(points["state"]) == ["COMPLETE", "PRUNED"]
    assert np.allclose(points["y"], points["gold"])


def test_fit_recovers_known_alpha_and_beta() -> None:
    rng = np.random.default_rng(0)
    d = rng.uniform(0.0, 5.0, 200)
    gold = gao_curve(d, R0, ALPHA, BETA) + rng.normal(0.0, 0.004, d.size)  # noise a 100th of the signal's span
    outcome = fit_gao(d, gold)
    fit = outcome.fit
    assert fit is not None, outcome.reason
    assert fit.alpha == pytest.approx(ALPHA, abs=0.01)
    assert fit.beta == pytest.approx(BETA, abs=0.01)
    assert fit.r0 == pytest.approx(R0, abs=0.01)
    assert fit.d_star == pytest.approx(math.e, rel=0.05)
    assert fit.kl_star == pytest.approx(fit.d_star**2)
    assert fit.r2 > 0.99 and fit.n == 200 and not fit.extrapolated and outcome.reason == ""


@pytest.mark.parametrize(("alpha", "beta"), [(2.0, 1.0), (1.0, 0.7), (0.3, 0.4), (3.0, 2.5)])
def test_peak_formula_matches_a_dense_argmax(alpha: float, beta: float) -> None:
    d_star = math.exp(alpha / beta - 1.0)
    d = np.linspace(1e-6, 4 * d_star, 400_001)
    numeric = d[np.argmax(gao_curve(d, 0.0, alpha, beta))]
    assert numeric == pytest.approx(d_star, rel=1e-4)
    fit = fit_gao(d[::4000], gao_curve(d[::4000], 0.0, alpha, beta)).fit
    assert fit is not None and fit.d_star == pytest.approx(d_star, rel=1e-6)


def test_peak_outside_the_data_is_flagged_as_extrapolated() -> None:
    d = np.linspace(0.1, 1.5, 20)  # still climbing: the peak e is beyond the data
    outcome = fit_gao(d, gao_curve(d, R0, ALPHA, BETA))
    assert outcome.fit is not None and outcome.fit.extrapolated
    assert "extrapolated" in outcome.reason


@pytest.mark.parametrize(("d", "gold", "words"), [
    ([0.5, 1.0, 1.5], [1.0, 2.0, 3.0], "at least 4"),
    ([1.0, 1.0, 2.0, 2.0, math.nan], [1.0, 1.1, 2.0, 2.1, 5.0], "distinct"),
    ([0.5, 1.0, 1.5, 2.0], [1.0, 1.0, 1.0, 1.0], "same at every point"),
    (list(np.linspace(0.1, 3.0, 10)), list(np.linspace(0.1, 3.0, 10) ** 2), "beta"),  # convex: beta < 0
    ([math.nan] * 5, [1.0] * 5, "0 point"),
])
def test_degenerate_fits_return_none_with_a_reason(d: list[float], gold: list[float], words: str) -> None:
    outcome = fit_gao(np.array(d), np.array(gold))
    assert outcome.fit is None
    assert words in outcome.reason


def slow_front(points: pd.DataFrame) -> set[int]:
    """O(n²) reference: the COMPLETE points no other COMPLETE point dominates."""
    done = points[points["state"] == "COMPLETE"]
    front = set()
    for i, p in done.iterrows():
        dominated = any(
            q["kl"] <= p["kl"] and q["y"] >= p["y"] and (q["kl"] < p["kl"] or q["y"] > p["y"])
            for j, q in done.iterrows() if j != i
        )
        if not dominated:
            front.add(int(p["trial"]))
    return front


@pytest.mark.parametrize("seed", range(6))
def test_pareto_front_matches_the_slow_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    # Rounded so that ties in KL, in y and whole repeated points happen.
    points = pd.DataFrame({
        "trial": np.arange(n), "kl": rng.integers(0, 12, n).astype(float), "y": rng.integers(0, 12, n).astype(float),
        "state": rng.choice(["COMPLETE", "COMPLETE", "PRUNED", "FAIL", "RUNNING"], n),
    })
    if seed % 2:
        points["kl"] += rng.uniform(0, 1, n)
        points["y"] += rng.uniform(0, 1, n)
    front = pareto_front(points)
    assert set(front["trial"].astype(int)) == slow_front(points)
    assert (front["state"] == "COMPLETE").all()
    assert front["kl"].is_monotonic_increasing


def test_trajectory_figure_marks_each_gold_peak() -> None:
    metrics = metrics_frame(with_eval=False, updates=12)
    paths = trajectories(metrics, frontier_source(metrics))
    peaks = gold_peaks(paths)
    figure = trajectory_figure(paths, peaks, {0: "COMPLETE", 1: "RUNNING"})
    series = {(t.meta["trial"], t.meta["series"]) for t in figure.data if "series" in t.meta}
    assert series == {(0, "gold"), (0, "proxy"), (1, "gold"), (1, "proxy")}
    markers = traces_with_role(figure, "gold_peak")
    assert len(markers) == 2
    for marker in markers:
        peak = peaks[peaks["trial"] == marker.meta["trial"]].iloc[0]
        assert marker.x[0] == pytest.approx(peak["sqrt_kl"]) and marker.y[0] == pytest.approx(peak["gold"])


def test_frontier_figure_draws_points_front_fit_and_kl_star() -> None:
    rng = np.random.default_rng(1)
    d = rng.uniform(0.2, 4.0, 30)
    points = pd.DataFrame({
        "trial": np.arange(30), "update": 10, "kl": d**2, "sqrt_kl": d, "proxy": d,
        "gold": gao_curve(d, R0, ALPHA, BETA), "state": ["COMPLETE"] * 20 + ["PRUNED"] * 5 + ["FAIL"] * 5,
    })
    points["y"] = points["gold"]
    fit = fit_gao(points["sqrt_kl"], points["gold"]).fit
    assert fit is not None
    figure = frontier_figure(points, pareto_front(points), fit)
    assert {t.meta["state"] for t in traces_with_role(figure, "points")} == {"COMPLETE", "PRUNED", "FAIL"}
    assert len(traces_with_role(figure, "pareto_front")) == 1
    assert len(traces_with_role(figure, "fit")) == 1
    (star,) = traces_with_role(figure, "kl_star")
    assert list(star.x) == pytest.approx([fit.kl_star, fit.kl_star])
    assert fit.kl_star == pytest.approx(math.e**2, rel=1e-6)
    bare = frontier_figure(points, pareto_front(points))
    assert not traces_with_role(bare, "fit") and not traces_with_role(bare, "kl_star")


def test_empty_inputs_give_empty_frames() -> None:
    empty = pd.DataFrame(columns=["trial_id", "trial_number", "update", "episode"])
    source = frontier_source(empty)
    assert isinstance(source, FrontierSource) and source.kind == "train" and source.gold is None
    paths = trajectories(empty, source)
    assert paths.empty and gold_peaks(paths).empty and final_points(paths, {}).empty
    assert pareto_front(final_points(paths, {})).empty



# --- no number the data cannot support (issue 28, point 1) ---

def test_a_peak_far_past_the_data_is_no_headline_and_the_fit_is_drawn_only_a_little_past_it() -> None:
    # Gold still climbing over 0..2.5 nats (a quickstart study's held-out range): the fitted peak lies hundreds of
    # nats out. The page must not headline it, and the chart must not stretch to it.
    d = np.sqrt(np.linspace(0.05, 2.5, 24))
    gold = 0.5 + 0.1 * d - 0.004 * d * np.log(d)  # alpha/beta = 25: d* = e^24
    fit = fit_gao(d, gold).fit
    assert fit is not None and fit.kl_star > 1e3 and not fit.supported
    lead = headline(fit)
    assert lead.value == f"{2.5:.3g} nats" and lead.label == "Gold still rising at"
    assert "still rising at the highest KL measured (2.5 nats)" in lead.words
    points = pd.DataFrame({"trial": range(24), "update": 10, "kl": d**2, "sqrt_kl": d, "proxy": d, "gold": gold,
                           "state": "COMPLETE"})
    points["y"] = points["gold"]
    figure = frontier_figure(points, pareto_front(points), fit)
    (curve,) = traces_with_role(figure, "fit")
    assert max(curve.x) == pytest.approx(2.5 * (1 + KL_MARGIN))  # a quarter past the data, not to the peak
    assert not traces_with_role(figure, "kl_star")


def test_a_fitted_gold_outside_what_gold_can_be_is_no_suggestion() -> None:
    d = np.linspace(0.3, 3.0, 20)
    fit = fit_gao(d, gao_curve(d, 0.5, 2.0, 1.0)).fit  # peaks at e with gold 3.2: no gold score reaches that
    assert fit is not None and not fit.extrapolated and not fit.supported
    assert headline(fit).value is None and "outside what a gold score can be" in headline(fit).words
    assert float(np.max(fit.predict(d))) <= GOLD_BOUNDS[1]  # the drawn curve stays where gold can be


def test_a_peak_inside_the_data_is_the_headline() -> None:
    d = np.linspace(0.3, 4.0, 30)
    fit = fit_gao(d, gao_curve(d, R0, ALPHA, BETA)).fit
    assert fit is not None and fit.supported
    assert headline(fit).value == f"{math.e**2:.3g} nats"


def test_the_studys_kl_constraint_is_drawn_where_that_kl_is() -> None:
    # Issue 28, point 5: the constraint (eval/kl <= 5) was drawn nowhere.
    d = np.sqrt(np.linspace(0.5, 8.0, 12))
    points = pd.DataFrame({"trial": range(12), "update": 10, "kl": d**2, "sqrt_kl": d, "proxy": d,
                           "gold": 0.5 + 0.01 * d, "state": "COMPLETE"})
    points["y"] = points["gold"]
    figure = frontier_figure(points, pareto_front(points), kl_limit=5.0)
    (line,) = traces_with_role(figure, "constraint")
    assert list(line.x) == [5.0, 5.0] and "KL ≤ 5" in line.name
    assert not traces_with_role(frontier_figure(points, pareto_front(points)), "constraint")
