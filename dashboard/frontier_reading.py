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

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tuner.search.frontier_peak import kl_range
from tuner.search.peak_reading import CLEAR_MULTIPLE, PeakReading, read_peak

PEAK_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "gold"]
POINT_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "proxy", "gold", "y", "state"]
# Which trials' points the peak is read from: every trial (pruned ones ran furthest in KL, past gold's peak) or only
# those that finished their budget.
FIT_SCOPES = {"all": "Every trial's points", "complete": "Complete trials only"}
GROUP_PEAK_COLUMNS = ["group", "trials", "points", "status", "kl", "kl_low", "kl_high", "gold", "note"]


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
