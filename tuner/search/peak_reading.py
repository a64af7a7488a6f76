"""Where a study's gold peaks in KL, and whether the data single that peak out: the one reading the frontier sampler
aims by (``tuner.search.frontier_aim``), and the Frontier page, Health's advice, ``ppo-tune show`` and the
peak-reading benchmark report.

:func:`tuner.search.frontier_points.study_peak` smooths the study's (KL, gold) points and finds the curve's highest
point. Smoothing a flat, noisy study still gives a curve with a highest point, often inside the measured range and
in most resampled studies too; only its size against the run-to-run spread tells a peak from a plateau. So a peak is
*found* (:attr:`PeakReading.found`) only where the smoothed curve rises to it and falls after it by more than the
runs' noise allows (:func:`peak_clearance`); where only its rise or its fall is clear the reading says which way gold
lies, and otherwise that it is unclear. One meaning of "found", wherever a peak is read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tuner.search.frontier_peak import KL_FLOOR, FrontierPeak, thin_paths
from tuner.search.frontier_points import frontier_source, study_peak, trajectories

CLEAR_MULTIPLE = 2.0
"""A peak is named where the rise to it and the fall after it each exceed this many run-to-run SDs. The gold of two
runs differs with SD sigma·sqrt(2), so at a gap of 2 sigma a run at the peak beats a run at either end in
Phi(2 / sqrt(2)) = 92% of pairs. At 1 sigma (76% of pairs) a flat study's curve often passes by chance: its highest
point is where the noise ran luckiest, and its ends rest on few points."""


def run_noise(trials: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """The run-to-run SD of y at similar x: each point against the nearest point (in x) of another trial,

        sigma = sqrt( (1 / 2n) · sum_i (y_i - y_j(i))^2 ),   j(i) = argmin over j with t_j != t_i of |x_j - x_i|

    (ties, which need equal x, go to the lower x, then to the earlier point). Two runs' values at one x differ by
    the noise alone, with twice a run's variance; where gold changes between neighbours the difference adds that
    change, so sigma errs large, not small. Points of one trial are never paired: consecutive evaluations of a run
    share its luck. nan with fewer than two trials.
    """
    order = np.argsort(x, kind="stable")
    t, x, y = trials[order], x[order], y[order]
    squared = np.empty(len(x))
    for trial in np.unique(t):
        mine = t == trial
        other_x, other_y = x[~mine], y[~mine]
        if not len(other_x):
            return math.nan
        at = np.searchsorted(other_x, x[mine])  # the first other point at or above each of this trial's
        left, right = np.clip(at - 1, 0, len(other_x) - 1), np.clip(at, 0, len(other_x) - 1)
        left = np.searchsorted(other_x, other_x[left])  # the earliest of the other points at that x
        nearer_left = np.abs(x[mine] - other_x[left]) <= np.abs(other_x[right] - x[mine])
        squared[mine] = (y[mine] - other_y[np.where(nearer_left, left, right)]) ** 2
    return math.sqrt(float(squared.mean()) / 2) if len(x) else math.nan


@dataclass(frozen=True)
class PeakClearance:
    """How far the smoothed curve's best point stands above each end of it, against the runs' noise.

    ``rise`` = max m - m(lowest KL read), ``fall`` = max m - m(highest KL read), m the smoothed gold;
    ``noise`` the run-to-run SD (:func:`run_noise`) of the points m was fitted to. Each is clear where it exceeds
    :data:`CLEAR_MULTIPLE` times the noise.
    """

    rise: float
    fall: float
    noise: float

    @property
    def rise_clear(self) -> bool:
        return bool(self.rise > CLEAR_MULTIPLE * self.noise)

    @property
    def fall_clear(self) -> bool:
        return bool(self.fall > CLEAR_MULTIPLE * self.noise)

    def numbers(self) -> str:
        """E.g. ``rise +0.031, fall +0.012, noise ±0.02 (run-to-run SD)``."""
        return f"rise {self.rise:+.2g}, fall {self.fall:+.2g}, noise ±{self.noise:.2g} (run-to-run SD)"


def peak_clearance(curve: Sequence[float] | np.ndarray, trials: np.ndarray, x: np.ndarray,
                   y: np.ndarray) -> PeakClearance:
    """The rise and fall of the smoothed ``curve`` (its values from the lowest KL read to the highest) and the
    run-to-run SD of the points (``trials``, ``x``, ``y``) it was fitted to. Rise and fall are nan without a curve."""
    values = np.asarray(curve, dtype=float)
    best = float(values.max()) if len(values) else math.nan
    rise, fall = (best - float(values[0]), best - float(values[-1])) if len(values) else (math.nan, math.nan)
    return PeakClearance(rise, fall, run_noise(trials, x, y))


def fitted_points(paths: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points :func:`study_peak` smooths, as ``tuner.search.frontier_peak.frontier_peak`` prepares them: (trial,
    ln max(KL, KL_FLOOR), gold) of every row with a finite KL and gold, sorted by trial then KL, a trial of many
    points averaged into runs (``thin_paths``). The noise is measured on these, at the scale the curve sees."""
    rows = paths[paths["gold"].notna()]
    t, k, v = (rows[c].to_numpy(dtype=d) for c, d in (("trial", np.int64), ("kl", float), ("gold", float)))
    keep = np.isfinite(k) & np.isfinite(v)
    t, k, v = t[keep], k[keep], v[keep]
    order = np.lexsort((v, k, t))
    return thin_paths(t[order], np.log(np.maximum(k[order], KL_FLOOR)), v[order])


@dataclass(frozen=True)
class OwnTurn:
    """One trial whose own gold rose and then fell, each by more than :data:`CLEAR_MULTIPLE` times the runs' noise:
    its peak's ``kl`` and ``gold``, the ``rise`` from its first evaluation and the ``fall`` to its last."""

    trial: int
    kl: float
    gold: float
    rise: float
    fall: float


def own_turns(paths: pd.DataFrame, noise: float) -> tuple[OwnTurn, ...]:
    """The trials whose own path turns clearly: for trial t with gold g_1..g_n over its evaluations in update order
    (the rows' order where ``paths`` has no update) and its highest g_p (the first such on ties),

        rise = g_p - g_1 > CLEAR_MULTIPLE · noise   and   fall = g_p - g_n > CLEAR_MULTIPLE · noise   (1 < p < n)

    Runs that hack their proxy at different KLs turn at different KLs: pooled in KL, one run's collapse lies beside
    another's peak, and the study's curve can stay within a noise that this mix inflates, while each run turned. No
    trial qualifies when ``noise`` is not finite."""
    if not math.isfinite(noise):
        return ()
    order = ["trial", "update"] if "update" in paths.columns else ["trial"]  # else the rows' own order
    rows = paths[paths["gold"].notna()].sort_values(order, kind="stable")
    turns = []
    for trial, path in rows.groupby("trial", sort=True):
        gold = path["gold"].to_numpy(dtype=float)
        at = int(np.argmax(gold))
        rise, fall = float(gold[at] - gold[0]), float(gold[at] - gold[-1])
        if 0 < at < len(gold) - 1 and rise > CLEAR_MULTIPLE * noise and fall > CLEAR_MULTIPLE * noise:
            turns.append(OwnTurn(int(trial), float(path["kl"].iloc[at]), float(gold[at]), rise, fall))
    return tuple(turns)


@dataclass(frozen=True)
class PeakReading:
    """The tuner's reading of where gold peaks (``peak``) and how clear of the runs' noise its curve's rise and fall
    stand (``clearance``): what the Frontier page and Health's advice say about a peak; ``own``, the trials whose
    own path turned clearly (:func:`own_turns`), for a study whose pooled curve shows no clear peak."""

    peak: FrontierPeak
    clearance: PeakClearance
    own: tuple[OwnTurn, ...] = ()

    @property
    def status(self) -> str:
        """What the data show: "peak" where the curve turns inside them and both its rise and its fall are clear;
        "rising" or "falling" (the tuner's) where the one change the curve shows is clear; "unclear" where the tuner
        reads any of those but the change behind it is not; "none" where no curve can be read."""
        status, clearance = self.peak.status, self.clearance
        if status == "peak":
            return "peak" if clearance.rise_clear and clearance.fall_clear else "unclear"
        if status == "rising":
            return status if clearance.rise_clear else "unclear"
        if status == "falling":
            return status if clearance.fall_clear else "unclear"
        return status

    @property
    def found(self) -> bool:
        """A peak the data support: the only reading a KL is suggested from."""
        return self.status == "peak"

    @property
    def highest_inside(self) -> bool:
        """Whether the smoothed curve's highest point lies inside the measured KL, found or not: where the frontier
        search keeps trials while the peak is unclear, since that is what makes it clear."""
        return self.peak.status == "peak"


def read_peak(paths: pd.DataFrame) -> PeakReading:
    """:func:`study_peak` over ``paths`` and the clearance of its curve over the same points."""
    peak = study_peak(paths)
    clearance = peak_clearance(peak.curve_value, *fitted_points(paths))
    return PeakReading(peak, clearance, own_turns(paths, clearance.noise))


def read_metrics_peak(metrics: pd.DataFrame, judge: str | None = None) -> PeakReading | None:
    """:func:`read_peak` over a study's metrics frame, from the metrics the frontier reads, on ``judge`` where named
    (``tuner.search.frontier_points.frontier_source``); None when the study records no gold score."""
    source = frontier_source(metrics, judge)
    return read_peak(trajectories(metrics, source)) if source.has_gold else None
