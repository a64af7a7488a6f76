"""tuner.search.frontier_aim: the aim's choice from a study's peak, the candidates' weights, and the start-up spread."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tuner.search.frontier_aim import (
    EXPLORE,
    MIN_SPREAD,
    STEP,
    aim_weights,
    aim_words,
    choose_aim,
    peak_spread,
    pick_by_quantile,
    random_value,
    start_aim,
    van_der_corput,
)
from tuner.search.frontier_peak import FrontierPeak
from tuner.search.space import ParamSpec

PEAK = FrontierPeak("peak", kl=2.0, value=0.8, kl_low=1.5, kl_high=3.0, inside=0.9, kl_min=0.1, kl_max=9.0,
                    trials=12, points=48, bandwidth=0.3)


def _slow_van_der_corput(n: int) -> float:
    """n in binary, its digits mirrored after the point."""
    digits = bin(n)[2:][::-1]
    return sum(int(d) / 2 ** (i + 1) for i, d in enumerate(digits))


def test_van_der_corput_equals_mirrored_binary_and_fills_the_unit_interval_evenly() -> None:
    assert [van_der_corput(n) for n in range(1, 5)] == [0.5, 0.25, 0.75, 0.125]
    assert all(van_der_corput(n) == _slow_van_der_corput(n) for n in range(1, 300))
    first = sorted(van_der_corput(n) for n in range(1, 16))
    assert first == pytest.approx([k / 16 for k in range(1, 16)])


def test_a_found_peak_is_aimed_at_within_its_interval() -> None:
    rng = np.random.default_rng(0)
    aims = [choose_aim(PEAK, np.array([-3.0, 3.0]), rng, found=True) for _ in range(4000)]
    at_peak = [a for a in aims if a.kind == "peak"]
    assert len(at_peak) / len(aims) == pytest.approx(1 - EXPLORE, abs=0.02)
    targets = np.array([a.target for a in at_peak])
    # N(ln 2, s²), s = ln(3 / 1.5) / (2 x 1.2816): 80% of targets inside the peak's 80% interval.
    assert float(np.mean(targets)) == pytest.approx(math.log(2.0), abs=0.02)
    assert float(np.mean((targets > math.log(1.5)) & (targets < math.log(3.0)))) == pytest.approx(0.8, abs=0.03)
    assert peak_spread(PEAK) == pytest.approx(math.log(2) / (2 * 1.2815515655446004))
    explored = np.array([a.target for a in aims if a.kind == "spread"])
    assert explored.min() >= -3 and explored.max() <= 3


def test_a_highest_point_not_clear_of_the_noise_is_aimed_at_but_never_called_a_peak() -> None:
    rng, found_rng = np.random.default_rng(3), np.random.default_rng(3)
    for _ in range(200):
        unclear, found = choose_aim(PEAK, np.array([-3.0, 3.0]), rng, found=False), \
            choose_aim(PEAK, np.array([-3.0, 3.0]), found_rng, found=True)
        assert (unclear.target, unclear.spread) == (found.target, found.spread)  # the same aim, drawn alike
        assert unclear.kind in ("highest", "spread") and found.kind in ("peak", "spread")
        if unclear.kind == "highest":
            assert "no clear peak yet" in unclear.reason and "peaks at" not in unclear.reason


def test_a_sure_peak_still_spreads_its_aim_a_little() -> None:
    assert peak_spread(replace(PEAK, kl_low=1.99, kl_high=2.01)) == MIN_SPREAD


@pytest.mark.parametrize(("status", "sign"), [("rising", 1), ("falling", -1)])
def test_a_turn_outside_the_data_is_aimed_at_a_step_past_the_edge(status: str, sign: int) -> None:
    edge = replace(PEAK, status=status, kl=4.0 if status == "rising" else 0.2)
    rng = np.random.default_rng(1)
    aims = (choose_aim(edge, np.array([-3.0, 3.0]), rng, found=False) for _ in range(3000))
    targets = np.array([a.target for a in aims if a.kind != "spread"])
    assert float(np.median(targets)) == pytest.approx(math.log(edge.kl) + sign * STEP, abs=0.05)
    assert float(np.mean(sign * (targets - math.log(edge.kl)) > 0)) > 0.95  # past the edge, nearly always


def test_no_peak_spreads_the_aim_over_the_predicted_range_and_says_why() -> None:
    rng = np.random.default_rng(2)
    none = replace(PEAK, status="none", reason="fewer than 3 trials")
    aims = [choose_aim(none, np.array([-1.0, 0.5, 2.0]), rng, found=False) for _ in range(500)]
    assert {a.kind for a in aims} == {"spread"} and aims[0].reason == "fewer than 3 trials"
    targets = [a.target for a in aims]
    assert min(targets) >= -1 and max(targets) <= 2 and np.std(targets) == pytest.approx(3 / math.sqrt(12), rel=0.1)
    assert "no gold score" in choose_aim(None, np.array([0.0, 1.0]), rng, found=False).reason


def test_aim_weights_are_the_normal_density_normalised() -> None:
    mean, sd = np.array([0.0, 1.0, 2.0, 5.0]), np.array([0.5, 0.5, 1.0, 0.2])
    slow = [math.exp(-0.5 * ((1.2 - m) / s) ** 2) / (s * math.sqrt(2 * math.pi)) for m, s in zip(mean, sd,
                                                                                               strict=True)]
    assert aim_weights(mean, sd, 1.2) == pytest.approx(np.array(slow) / sum(slow))
    # Far from every candidate the densities underflow; the weights stay a distribution.
    far = aim_weights(mean, sd, 1e6)
    assert far.sum() == pytest.approx(1) and np.all(np.isfinite(far))


def test_start_up_trials_take_spread_quantiles_of_the_step_mass() -> None:
    masses = np.arange(100.0)[::-1]  # candidate i has mass 99 - i
    assert [start_aim(n).target for n in range(3)] == [0.5, 0.25, 0.75]
    assert [masses[pick_by_quantile(masses, start_aim(n).target)] for n in range(3)] == [50, 25, 75]
    assert masses[pick_by_quantile(masses, 0.999)] == 99
    # A shift moves every point alike, modulo 1: the spread is kept.
    assert [start_aim(n, 0.6).target for n in range(3)] == pytest.approx([0.1, 0.85, 0.35])


def test_random_values_stay_in_range_on_their_grid() -> None:
    rng = np.random.default_rng(3)
    specs = [ParamSpec("a", "float", 1e-6, 1e-3, log=True), ParamSpec("b", "float", 0.1, 0.3, step=0.05),
             ParamSpec("c", "int", 1, 9, step=2), ParamSpec("d", "int", 1, 64, log=True),
             ParamSpec("e", "categorical", choices=(4, 8, 16))]
    for spec in specs:
        values = [random_value(spec, rng) for _ in range(2000)]
        if spec.type == "categorical":
            assert set(values) == set(spec.choices)
            continue
        assert spec.low is not None and spec.high is not None  # every range above has both ends
        assert min(values) >= spec.low and max(values) <= spec.high
        if spec.step is not None:
            assert all(abs((v - spec.low) / spec.step - round((v - spec.low) / spec.step)) < 1e-9 for v in values)
        if spec.type == "int":
            assert all(isinstance(v, int) for v in values) and {spec.low, spec.high} <= set(values)
        if spec.log and spec.type == "float":  # uniform on the log scale: half the draws below the geometric middle
            middle = math.sqrt(spec.low * spec.high)
            assert float(np.mean(np.array(values) < middle)) == pytest.approx(0.5, abs=0.06)


def test_a_stored_aim_reads_as_one_line_naming_where_why_and_the_prediction() -> None:
    rng = np.random.default_rng(4)
    aim = choose_aim(PEAK, np.array([0.0]), rng, found=True)
    while aim.kind != "peak":
        aim = choose_aim(PEAK, np.array([0.0]), rng, found=True)
    stored = {**aim.to_dict(), "predicted_ln_kl": math.log(1.8), "predicted_sd": 0.2, "trials_measured": 12}
    line = aim_words(stored, 17)
    assert line.startswith(f"trial 17 aimed at {math.exp(aim.target):.3g} nats of held-out KL: the objective peaks "
                           "at 2 nats (1.5 to 3 in 80% of resampled studies; 12 trials' 48 evaluations)")
    low, high = 1.8 * math.exp(-1.2815515655446004 * 0.2), 1.8 * math.exp(1.2815515655446004 * 0.2)
    assert line.endswith(f"the KL model (12 trials) predicted 1.8 nats ({low:.3g} to {high:.3g})")
    start = {**start_aim(2).to_dict(), "predicted_ln_kl": None, "predicted_sd": None, "trials_measured": 0}
    assert aim_words(start, 2) == ("trial 2 was a start-up trial, at the 75% quantile of the step mass: no KL model "
                                   "yet, so the first trials spread over the step mass")
    assert "\n" not in line
