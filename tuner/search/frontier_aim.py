"""Where the frontier-guided search aims its next trial, in KL, and which candidate configuration lands there: pure
functions over the study's peak (``tuner.search.frontier_peak``) and KL model (``tuner.search.kl_model``).

- **peak**: the data show the turn (a found peak: ``tuner.search.peak_reading.PeakReading.found``). Aim at a draw
  from N(ln KL*, s²), s from the peak's resampled interval (an 80% interval spans 2·1.28 s), at least
  :data:`MIN_SPREAD`: the less sure the peak, the wider the aim.
- **highest**: the smoothed curve's highest point lies inside the data, but its rise or fall is within the runs'
  noise, so no peak is found. Aim as at a peak: trials there are what would make it clear or move it.
- **above** / **below**: the objective still rises at the highest KL measured, or already falls at the lowest. Aim
  :data:`STEP` beyond that edge (in ln KL), spread by half a step: where the turn must be.
- **spread**: no peak can be read yet, or one draw in :data:`EXPLORE` (so a wrong early peak gets corrected): aim
  uniformly over the ln KL the candidates are predicted to reach.
- **within the budget**: where the study caps the KL its trials may end at (a constraint on held-out KL), an aim past
  that budget is drawn back to it (:func:`within_budget`): a trial aimed past the budget is infeasible by design. And
  only a candidate the KL model predicts keeps the budget on a fresh seed with probability :data:`KEEP_BUDGET` is
  proposed (:func:`budget_weights`): aimed at the budget itself, half of a configuration's seeds end past it.
- **start**: no KL model yet (fewer than two trials measured), or fewer than the start-up trials measured and no
  turn in the data yet. Spread the first trials over the step mass instead:
  trial n takes the candidate at the n-th point of a van der Corput sequence (1/2, 1/4, 3/4, 1/8, ...), shifted by
  a random amount per study (modulo 1), among the candidates' step-mass quantiles, so any few of them cover the
  range evenly.

Given an aim t, a candidate whose ln KL the model predicts as N(μ, sd²) is drawn with weight N(t; μ, sd²): the
candidates the model says land near t, the sure ones first. The knobs the KL barely depends on are left to the
random draw of candidates. Nothing here is fitted to a task: the constants are step sizes in ln KL.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from tuner.search.frontier_peak import INTERVAL, FrontierPeak, kl_range
from tuner.search.space import ParamSpec, choose_point

STEP = 1.0
"""How far past the measured edge to aim while the turn lies outside the data, in ln KL (a factor of e in KL)."""
MIN_SPREAD = 0.15
"""The narrowest aim around a found peak, in ln KL: its interval from resampling understates what the next trial's
own seed adds."""
EXPLORE = 0.1
"""The share of aims drawn over the whole predicted range even when a peak is found."""
CANDIDATES = 512
"""Random configurations drawn per proposal, from which the aim picks; enough that a 0.3-wide aim holds dozens."""
AIM_KINDS = ("start", "spread", "peak", "highest", "above", "below")
KEEP_BUDGET = 0.8
"""Held within a KL budget, a proposed configuration must keep it on a fresh seed with at least this probability
under the KL model's predictive N(μ, sd²) of its ln KL: the share of seeds a user can expect to stay inside the
budget in production. At 0.5 (an aim at the budget's edge) the fifth text task's validated winner ended past its
10-nat budget on all 5 fresh seeds, 11-20 nats (benchmarks/results/real_model_study/README.md)."""
_Z = NormalDist().inv_cdf(0.5 + INTERVAL / 2)  # a central interval of INTERVAL spans 2 x this many sds


@dataclass(frozen=True)
class Aim:
    """One proposal's aim: ``kind`` (one of :data:`AIM_KINDS`), ``center`` and ``spread`` of the drawn ln KL (for
    "start", of the step-mass quantile), the drawn ``target`` and why (``reason``)."""

    kind: str
    center: float
    spread: float
    target: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def van_der_corput(n: int) -> float:
    """The n-th point (n >= 1) of the base-2 van der Corput sequence: n's binary digits mirrored after the point,

        n = Σ b_i 2^i  ->  Σ b_i 2^-(i+1)        (1 -> 1/2, 2 -> 1/4, 3 -> 3/4, 4 -> 1/8, ...)
    """
    value, scale = 0.0, 0.5
    while n > 0:
        n, bit = divmod(n, 2)
        value += bit * scale
        scale /= 2
    return value


def peak_spread(peak: FrontierPeak) -> float:
    """s of a found peak's aim: the width of its interval in ln KL (the central ``INTERVAL`` of resampled peaks, 80%)
    over 2·z, z the standard normal's quantile at 0.5 + INTERVAL/2 (1.2816), at least :data:`MIN_SPREAD`."""
    width = math.log(peak.kl_high) - math.log(peak.kl_low)
    return max(width / (2 * _Z), MIN_SPREAD) if math.isfinite(width) else MIN_SPREAD


def choose_aim(peak: FrontierPeak | None, predicted: np.ndarray, rng: np.random.Generator, *, found: bool) -> Aim:
    """The aim in ln KL, given the study's peak (None: no gold to read one from), whether the data single it out
    (``found``: ``tuner.search.peak_reading.PeakReading.found``, the one meaning of it) and the candidates' predicted
    ln KL (their range is where "spread" aims)."""
    low, high = (float(np.min(predicted)), float(np.max(predicted))) if len(predicted) else (0.0, 0.0)
    explore = rng.random() < EXPLORE

    def spread(reason: str) -> Aim:
        return Aim("spread", (low + high) / 2, (high - low) / 2, float(rng.uniform(low, high)), reason)

    if peak is None or peak.status == "none":
        return spread(peak.reason if peak is not None else "the study records no gold score to read a peak from")
    if explore:
        return spread(f"one proposal in {round(1 / EXPLORE)} explores the whole range")
    if peak.status == "peak":
        center, width = math.log(peak.kl), peak_spread(peak)
        where = f"{peak.kl:.3g} nats ({kl_range(peak.kl_low, peak.kl_high)} in {INTERVAL:.0%} of resampled studies; " \
                f"{_support(peak)})"
        return Aim("peak" if found else "highest", center, width, float(center + width * rng.standard_normal()),
                   f"the objective peaks at {where}" if found else
                   f"the objective's curve is highest at {where}, but no clear peak yet: trials there make it clear")
    edge = math.log(max(peak.kl, 1e-12))
    if peak.status == "rising":
        center, kind, words = edge + STEP, "above", "still rising at the highest KL measured"
    else:
        center, kind, words = edge - STEP, "below", "already falling at the lowest KL measured"
    return Aim(kind, center, STEP / 2, float(center + STEP / 2 * rng.standard_normal()),
               f"the objective is {words} ({peak.kl:.3g} nats; {_support(peak)})")


def within_budget(aim: Aim, kl_budget: float | None) -> Aim:
    """The aim drawn back to the study's KL budget B where it lies past it: target t' = min(t, ln B), center
    c' = min(c, ln B), the reason saying so. A start-up aim (a step-mass quantile, not a KL) and an aim within the
    budget are kept as they are.

    Why: the objective's peak may lie past the budget (held-out gold on SmolLM2 rose to 10-20 nats against a 10-nat
    budget), and a trial aimed there ends over it, where it cannot win."""
    if kl_budget is None or aim.kind == "start" or aim.target <= math.log(kl_budget):
        return aim
    cap = math.log(kl_budget)
    return Aim(aim.kind, min(aim.center, cap), aim.spread, cap,
               f"{aim.reason}; drawn back from {math.exp(aim.target):.3g} to the study's KL budget of "
               f"{kl_budget:g} nats")


def keep_probability(mean: np.ndarray, sd: np.ndarray, kl_budget: float) -> np.ndarray:
    """Each candidate's probability of ending within the budget B on a fresh seed, its ln KL ~ N(μ, sd²):

        P = Φ((ln B - μ) / sd)
    """
    z = (math.log(kl_budget) - np.asarray(mean, dtype=float)) / np.asarray(sd, dtype=float)
    return np.asarray([NormalDist().cdf(float(value)) for value in z])


def budget_weights(weights: np.ndarray, mean: np.ndarray, sd: np.ndarray, kl_budget: float | None,
                   keep: float = KEEP_BUDGET) -> np.ndarray:
    """``weights`` kept for the candidates whose :func:`keep_probability` is at least ``keep``, 0 for the others,
    renormalised to sum to 1; where no candidate reaches ``keep``, all the weight goes to the ones likeliest to keep
    the budget (the highest P, shared on ties). Unchanged without a budget."""
    if kl_budget is None:
        return weights
    probability = keep_probability(mean, sd, kl_budget)
    eligible = probability >= keep
    if not eligible.any():
        eligible = probability >= probability.max()
    held = np.where(eligible, weights, 0.0)
    total = float(held.sum())
    return held / total if total > 0 else eligible / eligible.sum()


def _support(peak: FrontierPeak) -> str:
    return f"{peak.trials} trials' {peak.points} evaluations"


def aim_words(aim: Mapping[str, Any], number: int) -> str:
    """One line on a trial's stored aim (``tuner.search.frontier_sampler.AIM_ATTR``): where it aimed, why, and what the
    KL model predicted for the configuration chosen."""
    if aim["kind"] == "start":
        head = f"trial {number} was a start-up trial, at the {aim['target']:.0%} quantile of the step mass"
    else:
        verb = {"peak": "aimed at", "highest": "aimed at the curve's highest point,", "above": "aimed past the data at",
                "below": "aimed below the data at", "spread": "explored at"}[aim["kind"]]
        head = f"trial {number} {verb} {math.exp(aim['target']):.3g} nats of held-out KL"
    line = f"{head}: {aim['reason']}"
    if aim.get("predicted_ln_kl") is not None:
        low, high = (math.exp(aim["predicted_ln_kl"] + sign * _Z * aim["predicted_sd"]) for sign in (-1, 1))
        line += (f"; the KL model ({aim['trials_measured']} trials) predicted "
                 f"{math.exp(aim['predicted_ln_kl']):.3g} nats ({kl_range(low, high)})")
    return line


def start_aim(number: int, shift: float = 0.0) -> Aim:
    """The aim of start-up trial ``number`` (0-based): a step-mass quantile from the van der Corput sequence, shifted
    by ``shift`` modulo 1 (a random shift per study keeps the points evenly spread without starting every study at
    the median: where a task's band lies is not known, and the middle of a search space is no better a guess)."""
    quantile = (van_der_corput(number + 1) + shift) % 1.0
    return Aim("start", quantile, 0.0, quantile, "no KL model yet, so the first trials spread over the step mass")


def pick_by_quantile(masses: np.ndarray, quantile: float) -> int:
    """The index of the candidate whose step mass sits at ``quantile`` among the candidates' (the lower one on a
    tie)."""
    order = np.argsort(masses, kind="stable")
    return int(order[min(int(quantile * len(masses)), len(masses) - 1)])


def aim_weights(mean: np.ndarray, sd: np.ndarray, target: float) -> np.ndarray:
    """Each candidate's weight, the density of the aim under its predicted ln KL: N(t; μ, sd²), normalised to sum
    to 1 (uniform if every density underflows)."""
    log_density = -0.5 * ((target - mean) / sd) ** 2 - np.log(sd)
    weights = np.exp(log_density - np.max(log_density))
    total = float(np.sum(weights))
    return weights / total if total > 0 and math.isfinite(total) else np.full(len(mean), 1 / len(mean))


def random_value(spec: ParamSpec, rng: np.random.Generator) -> Any:
    """A value of ``spec`` drawn as Optuna's random sampler draws it: uniform over a categorical's choices and over
    a range (over its log for a log range), on its step's grid."""
    if spec.type == "categorical":
        return spec.choices[int(rng.integers(len(spec.choices)))]
    assert spec.low is not None and spec.high is not None  # numeric parameters have both
    if spec.type == "int":
        step = int(spec.step or 1)
        if spec.log:
            drawn = math.exp(rng.uniform(math.log(spec.low - 0.5), math.log(spec.high + 0.5)))
            return int(min(max(round(drawn), spec.low), spec.high))
        return int(spec.low) + step * int(rng.integers((int(spec.high) - int(spec.low)) // step + 1))
    if spec.log:
        return float(math.exp(rng.uniform(math.log(spec.low), math.log(spec.high))))
    if spec.step is not None:
        # min(): low + k·step can overshoot high by a rounding error, and Optuna would reject the value.
        return float(min(spec.low + spec.step * int(rng.integers(round((spec.high - spec.low) / spec.step) + 1)),
                         spec.high))
    return float(rng.uniform(spec.low, spec.high))


def random_points(space: Mapping[str, ParamSpec], base: Mapping[str, Any], count: int,
                  rng: np.random.Generator) -> list[dict[str, Any]]:
    """``count`` points of the space, each a value for every parameter in force there (``choose_point``)."""
    return [choose_point(space, lambda spec: random_value(spec, rng), base) for _ in range(count)]
