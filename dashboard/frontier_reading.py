"""The reward–KL frontier of a study, as pure functions over the metrics frame: no Streamlit, no torch.

Gao, Schulman & Hilton (ICML 2023, "Scaling laws for reward model overoptimization") find that under RL the gold
score rises with the policy's KL from its start, peaks and falls, while the proxy score keeps rising: optimising the
proxy past the gold peak overoptimises it. Over the trials' paths in KL (``tuner.search.frontier_points``: the metrics
read, and where the study's gold peaks, as the tuner reads them) the functions here find where each trial's gold
peaked (:func:`gold_peaks`), place each trial's end point (:func:`final_points`), keep the non-dominated ones
(:func:`pareto_front`), say where the study's gold peaks (:func:`headline`: a suggested ``kl_target``, in KL summed
over a response, the units of ``objective/kl``), and read it per group of trials (:func:`group_peaks`).

A peak is named only where the data single it out (:class:`PeakReading`): the smoothed curve must rise to it and
fall after it by more than the runs' noise allows (:func:`peak_clearance`). Smoothing a flat, noisy study still
gives a curve with a highest point, often inside the measured range and in most resampled studies too; only its
size against the run-to-run spread tells a peak from a plateau.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tuner.search.frontier_peak import KL_FLOOR, FrontierPeak, kl_range, thin_paths
from tuner.search.frontier_points import frontier_source, study_peak, trajectories

PEAK_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "gold"]
POINT_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "proxy", "gold", "y", "state"]
# Which trials' points the peak is read from: every trial (pruned ones ran furthest in KL, past gold's peak) or only
# those that finished their budget.
FIT_SCOPES = {"all": "Every trial's points", "complete": "Complete trials only"}
GROUP_PEAK_COLUMNS = ["group", "trials", "points", "status", "kl", "kl_low", "kl_high", "gold", "note"]
CLEAR_MULTIPLE = 2.0
"""A peak is named where the rise to it and the fall after it each exceed this many run-to-run SDs. The gold of two
runs differs with SD sigma·sqrt(2), so at a gap of 2 sigma a run at the peak beats a run at either end in
Phi(2 / sqrt(2)) = 92% of pairs. At 1 sigma (76% of pairs) a flat study's curve often passes by chance: its highest
point is where the noise ran luckiest, and its ends rest on few points."""


def gold_peaks(paths: pd.DataFrame) -> pd.DataFrame:
    """Per trial, the row where gold is highest: argmax over updates of gold (the first such row on ties).

    Columns trial, update, kl, sqrt_kl, gold; trials without any gold value are left out.
    """
    rows = paths[paths["gold"].notna()]
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in PEAK_COLUMNS})
    best = rows.loc[rows.groupby("trial")["gold"].idxmax()]
    return best[PEAK_COLUMNS].sort_values("trial").reset_index(drop=True)


def final_points(paths: pd.DataFrame, states: Mapping[int, str]) -> pd.DataFrame:
    """Each trial's last point with a value: (kl, y) at its highest update where y is finite, with its state.

    y is gold when the trajectories carry any gold, else the proxy score. ``state`` is the trial's Optuna state
    (COMPLETE, PRUNED, FAIL, RUNNING) from ``states``; a trial missing there is "UNKNOWN".
    """
    y_column = "gold" if bool(paths["gold"].notna().any()) else "proxy"
    rows = paths[paths[y_column].notna()]
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in POINT_COLUMNS})
    last = rows.sort_values(["trial", "update"], kind="stable").groupby("trial", as_index=False).tail(1)
    points = last.assign(y=last[y_column], state=[states.get(int(t), "UNKNOWN") for t in last["trial"]])
    return points[POINT_COLUMNS].reset_index(drop=True)


def pareto_front(points: pd.DataFrame, x: str = "kl", y: str = "y") -> pd.DataFrame:
    """The COMPLETE points no other COMPLETE point dominates, maximising ``y`` and minimising ``x``, by ``x``.

    p dominates q when p.x <= q.x and p.y >= q.y with one of them strict. Sorted by x ascending (y descending on
    ties) a point is on the front iff its y beats every earlier point's, or it repeats the last front point
    exactly: O(n log n). Pruned, failed and running trials did not finish their budget, so they are drawn but
    never on the front.
    """
    done = points[(points["state"] == "COMPLETE") & points[x].notna() & points[y].notna()]
    ordered = done.sort_values([x, y], ascending=[True, False], kind="stable")
    keep: list[int] = []
    best_y = -np.inf
    last: tuple[float, float] | None = None
    for index, px, py in zip(ordered.index, ordered[x].to_numpy(float), ordered[y].to_numpy(float), strict=True):
        if py > best_y or (last is not None and (px, py) == last):
            keep.append(index)
            best_y, last = py, (px, py)
    return ordered.loc[keep].reset_index(drop=True)


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


def read_peak(paths: pd.DataFrame) -> PeakReading:
    """:func:`study_peak` over ``paths`` and the clearance of its curve over the same points."""
    peak = study_peak(paths)
    clearance = peak_clearance(peak.curve_value, *fitted_points(paths))
    return PeakReading(peak, clearance, own_turns(paths, clearance.noise))


def read_metrics_peak(metrics: pd.DataFrame) -> PeakReading | None:
    """:func:`read_peak` over a study's metrics frame, from the metrics the frontier reads
    (``tuner.search.frontier_points.frontier_source``); None when the study records no gold score."""
    source = frontier_source(metrics)
    return read_peak(trajectories(metrics, source)) if source.has_gold else None


@dataclass(frozen=True)
class Headline:
    """What the page leads with: where gold peaks, where the data show one, else what the data showed, in words
    (``value`` None when there is no KL to name)."""

    label: str
    value: str | None
    words: str


def own_turn_words(reading: PeakReading) -> str:
    """Where at least two trials, and at least half of the study's, turned on their own paths (:func:`own_turns`):
    how many, and at what KL; else "". Half, because among many trials of flat gold a few pass the test by their
    noise alone (2 of 13 in the flat study of tests/test_dashboard/test_frontier_clear_peak.py)."""
    own = reading.own
    if len(own) < max(2, reading.peak.trials / 2):
        return ""
    kls = sorted(turn.kl for turn in own)
    return (f". On their own paths {len(own)} of {reading.peak.trials} trials rose and then fell by more than "
            f"{CLEAR_MULTIPLE:g}x the noise, peaking at {kl_range(kls[0], kls[-1])} nats: gold turns within runs, "
            "but not at one KL across them")


def unclear_words(reading: PeakReading) -> str:
    """Why a curve that turns, or rises, or falls is no peak to aim at: which of its changes stays within the runs'
    noise, with the numbers (no KL to aim at in it), and how many trials turned on their own paths."""
    return _unclear_reason(reading) + own_turn_words(reading)


def _unclear_reason(reading: PeakReading) -> str:
    peak, clearance = reading.peak, reading.clearance
    against = (f"{clearance.numbers()}, where a peak needs a rise and a fall of more than {CLEAR_MULTIPLE:g}x the "
               "noise each")
    if peak.status == "peak" and clearance.rise_clear:
        return (f"gold rises to about {peak.kl:.3g} nats, then falls by less than the runs' noise up to "
                f"{peak.kl_max:.3g} nats: {against}. It levels off rather than turns, so there is no kl_target to "
                "suggest; trials with more KL would show whether it falls")
    if peak.status == "peak" and clearance.fall_clear:
        return (f"gold varies by less than the runs' noise from {peak.kl_min:.3g} to about {peak.kl:.3g} nats, then "
                f"falls: {against}. No KL below that stands out, so there is no kl_target to suggest")
    return (f"gold varies by less than the runs' noise across {kl_range(peak.kl_min, peak.kl_max)} nats: {against}. "
            "The data single out no KL, so there is no kl_target to suggest")


def headline(reading: PeakReading) -> Headline:
    """The peak's KL where the data show a clear turn; else which way gold lies (still rising at the highest KL
    measured, or already falling at the lowest), that it shows no clear peak, or why nothing can be read yet."""
    peak = reading.peak
    interval = kl_range(peak.kl_low, peak.kl_high)
    if reading.status == "peak":
        return Headline("Gold peaks at", f"{peak.kl:.3g} nats",
                        f"gold peaks at {peak.kl:.3g} nats of KL (from {peak.trials} trials' {peak.points} "
                        f"evaluations; {interval} in 80% of resampled studies, {peak.inside:.0%} of which show the "
                        "turn inside the measured range): a kl_target, or a KL budget, near it keeps runs there")
    if reading.status == "rising":
        return Headline("Gold still rising at", f"{peak.kl:.3g} nats",
                        f"gold was still rising at the highest KL the data cover ({peak.kl:.3g} nats): its peak lies "
                        "beyond, so no kl_target to suggest; trials with more KL would show where it turns")
    if reading.status == "falling":
        return Headline("Gold already falling at", f"{peak.kl:.3g} nats",
                        f"gold was already falling at the lowest KL the data cover ({peak.kl:.3g} nats): its peak "
                        "lies below every trial's KL, so no kl_target to suggest; trials with less KL would show it")
    if reading.status == "unclear":
        return Headline("No clear peak", None, f"no clear peak: {unclear_words(reading)}")
    return Headline("No peak yet", None, f"no peak can be read yet: {peak.reason}")


def fit_points(paths: pd.DataFrame, states: Mapping[int, str], scope: str) -> pd.DataFrame:
    """The trajectory rows the peak is read from: all of them for scope "all", the COMPLETE trials' for "complete"."""
    if scope not in FIT_SCOPES:
        raise ValueError(f"unknown fit scope {scope!r}; expected one of {', '.join(FIT_SCOPES)}")
    if scope == "all":
        return paths
    complete = [n for n, state in states.items() if state == "COMPLETE"]
    return paths[paths["trial"].isin(complete)]


def group_peaks(paths: pd.DataFrame, groups: Mapping[int, str]) -> pd.DataFrame:
    """:func:`read_peak` within each group of trials (``groups``: trial -> label, e.g. the estimator).

    One row per group: group, trials, points, status (:attr:`PeakReading.status`), kl, kl_low, kl_high and gold
    (NaN where no clear peak is read), and a note (why there is none).
    """
    labels = paths["trial"].map(lambda n: groups.get(int(n)))
    rows = []
    for label in sorted({str(g) for g in labels.dropna()}):
        chosen = paths[labels == label]
        reading = read_peak(chosen)
        peak, found = reading.peak, reading.found
        rows.append({
            "group": label, "trials": int(chosen["trial"].nunique()), "points": int(chosen["gold"].notna().sum()),
            "status": reading.status, "kl": peak.kl if found else np.nan,
            "kl_low": peak.kl_low if found else np.nan, "kl_high": peak.kl_high if found else np.nan,
            "gold": peak.value if found else np.nan, "note": peak.reason or headline(reading).words,
        })
    return pd.DataFrame(rows, columns=GROUP_PEAK_COLUMNS)
