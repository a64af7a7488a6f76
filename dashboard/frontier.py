"""The reward–KL frontier of a study, as pure functions over the metrics frame: no Streamlit, no torch.

Gao, Schulman & Hilton (ICML 2023, "Scaling laws for reward model overoptimization") find that under RL the gold
score rises with the policy's KL from its start, peaks and falls, while the proxy score keeps rising: optimising the
proxy past the gold peak overoptimises it. The functions here pick the metrics to read (:func:`frontier_source`),
lay each trial's path out in KL (:func:`trajectories`), find where each trial's gold peaked (:func:`gold_peaks`),
place each trial's end point (:func:`final_points`), keep the non-dominated ones (:func:`pareto_front`), and read
where the study's gold peaks from every evaluation of every trial (:func:`study_peak`, the tuner's own
:mod:`tuner.frontier_peak`): a suggested ``kl_target`` (KL summed over a response, the units of ``objective/kl``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ppo_core.metric_names import EVAL_GOLD_SCORE, EVAL_KL, EVAL_SCORE, GOLD_SCORE
from tuner.frontier_peak import FrontierPeak, frontier_peak

TRAIN_KL = "objective/kl"
TRAIN_SCORE = "objective/scores"
TRIAL_COLUMN = "trial_number"  # the metrics frame's trial number (tuner.trial_records.METRIC_KEYS)
TRAJECTORY_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "proxy", "gold"]
PEAK_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "gold"]
POINT_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "proxy", "gold", "y", "state"]
# Which trials' points the peak is read from: every trial (pruned ones ran furthest in KL, past gold's peak) or only
# those that finished their budget.
FIT_SCOPES = {"all": "Every trial's points", "complete": "Complete trials only"}
GROUP_PEAK_COLUMNS = ["group", "trials", "points", "status", "kl", "kl_low", "kl_high", "gold", "note"]


def _has_values(metrics: pd.DataFrame, metric: str) -> bool:
    return metric in metrics.columns and bool(metrics[metric].notna().any())


@dataclass(frozen=True)
class FrontierSource:
    """The metric triple the frontier reads: held-out (``kind`` "eval") or training (``kind`` "train").

    ``gold`` is None when the study records no gold score of that kind (a custom reward without a gold scorer);
    ``note`` then says so, for the page to show, and the charts fall back to the proxy.
    """

    kind: str
    kl: str
    proxy: str
    gold: str | None
    note: str = ""

    @property
    def has_gold(self) -> bool:
        return self.gold is not None


def frontier_source(metrics: pd.DataFrame) -> FrontierSource:
    """Held-out metrics (``eval/kl``, ``eval/score``, ``eval/gold_score``) where the study records them, else the
    training ones (``objective/kl``, ``objective/scores``, ``objective/gold_score``).

    Held-out first: they are measured on prompts the policy did not train on, with one fixed sampling setting, so
    trials compare fairly; training metrics are the fallback for studies run without evaluation. Gold is taken from
    the same kind as KL, never mixed: eval and training rows are different samples at different updates.
    """
    if _has_values(metrics, EVAL_KL) and _has_values(metrics, EVAL_SCORE):
        kind, kl, proxy, gold = "eval", EVAL_KL, EVAL_SCORE, EVAL_GOLD_SCORE
        where = "held-out evaluation"
    else:
        kind, kl, proxy, gold = "train", TRAIN_KL, TRAIN_SCORE, GOLD_SCORE
        where = "training rollouts (the study records no held-out evaluation)"
    if _has_values(metrics, gold):
        return FrontierSource(kind, kl, proxy, gold, f"KL and scores from the {where}.")
    return FrontierSource(
        kind, kl, proxy, None,
        f"KL and scores from the {where}; no gold score ({gold}) is recorded, so the proxy score stands in "
        "and overoptimisation cannot be seen.",
    )


def trajectories(metrics: pd.DataFrame, source: FrontierSource) -> pd.DataFrame:
    """Per trial, the rows where ``source.kl`` is present, sorted by trial and update.

    Columns trial, update, kl, sqrt_kl, proxy, gold: sqrt_kl = sqrt(max(kl, 0)), since the k1 estimator of KL
    (mean of log pi/pi_ref) can come out slightly negative near the start; gold is NaN without a gold score.
    """
    if metrics.empty or source.kl not in metrics.columns:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in TRAJECTORY_COLUMNS})
    rows = metrics[metrics[source.kl].notna()]
    kl = rows[source.kl].to_numpy(dtype=float)
    frame = pd.DataFrame({
        "trial": rows[TRIAL_COLUMN].to_numpy(dtype=int),
        "update": rows["update"].to_numpy(dtype=int),
        "kl": kl,
        "sqrt_kl": np.sqrt(np.clip(kl, 0.0, None)),
        "proxy": rows[source.proxy].to_numpy(dtype=float) if source.proxy in rows.columns else np.nan,
        "gold": rows[source.gold].to_numpy(dtype=float)
        if source.gold is not None and source.gold in rows.columns else np.nan,
    })
    return frame.sort_values(["trial", "update"], kind="stable").reset_index(drop=True)


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


def study_peak(paths: pd.DataFrame) -> FrontierPeak:
    """Where gold peaks in KL over ``paths`` (every evaluation of every trial): the tuner's own reading
    (:func:`tuner.frontier_peak.frontier_peak`). Without a gold score there is nothing to read: the proxy
    score keeps rising with KL by construction."""
    rows = paths[paths["gold"].notna()]
    return frontier_peak(rows["trial"].to_numpy(dtype=int), rows["kl"].to_numpy(dtype=float),
                         rows["gold"].to_numpy(dtype=float))


def headline(peak: FrontierPeak) -> Headline:
    """The peak's KL where the data show a turn; else which way it lies (gold still rising at the highest KL
    measured, or already falling at the lowest), or why nothing can be read yet."""
    interval = f"{peak.kl_low:.3g}-{peak.kl_high:.3g}"
    if peak.found:
        return Headline("Gold peaks at", f"{peak.kl:.3g} nats",
                        f"gold peaks at {peak.kl:.3g} nats of KL (from {peak.trials} trials' {peak.points} "
                        f"evaluations; {interval} in 80% of resampled studies, {peak.inside:.0%} of which show the "
                        "turn inside the measured range): a kl_target, or a KL budget, near it keeps runs there")
    if peak.status == "rising":
        return Headline("Gold still rising at", f"{peak.kl:.3g} nats",
                        f"gold was still rising at the highest KL the data cover ({peak.kl:.3g} nats): its peak lies "
                        "beyond, so no kl_target to suggest; trials with more KL would show where it turns")
    if peak.status == "falling":
        return Headline("Gold already falling at", f"{peak.kl:.3g} nats",
                        f"gold was already falling at the lowest KL the data cover ({peak.kl:.3g} nats): its peak "
                        "lies below every trial's KL, so no kl_target to suggest; trials with less KL would show it")
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
    """:func:`study_peak` within each group of trials (``groups``: trial -> label, e.g. the estimator).

    One row per group: group, trials, points, status, kl, kl_low, kl_high and gold (NaN where no peak is read),
    and a note (the reason there is none).
    """
    labels = paths["trial"].map(lambda n: groups.get(int(n)))
    rows = []
    for label in sorted({str(g) for g in labels.dropna()}):
        chosen = paths[labels == label]
        peak = study_peak(chosen)
        rows.append({
            "group": label, "trials": int(chosen["trial"].nunique()), "points": int(chosen["gold"].notna().sum()),
            "status": peak.status, "kl": peak.kl if peak.found else np.nan,
            "kl_low": peak.kl_low if peak.found else np.nan, "kl_high": peak.kl_high if peak.found else np.nan,
            "gold": peak.value if peak.found else np.nan, "note": peak.reason or headline(peak).words,
        })
    return pd.DataFrame(rows, columns=GROUP_PEAK_COLUMNS)
