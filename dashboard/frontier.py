"""The reward–KL frontier of a study, as pure functions over the metrics frame: no Streamlit, no torch.

Gao, Schulman & Hilton (ICML 2023, "Scaling laws for reward model overoptimization") measure a policy's distance
from its start as d = sqrt(KL) and find that under RL the gold score follows R(d) = d (alpha - beta log d) above
the initial score while the proxy score keeps rising: optimising the proxy past the gold peak overoptimises it.
The functions here pick the metrics to read (:func:`frontier_source`), lay each trial's path out in d
(:func:`trajectories`), find where gold peaks (:func:`gold_peaks`), place each trial's end point
(:func:`final_points`), keep the non-dominated ones (:func:`pareto_front`) and fit Gao's form (:func:`fit_gao`),
whose peak KL* = d*^2 is a suggested ``kl_target`` (KL summed over a response, the units of ``objective/kl``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ppo_core.metric_names import EVAL_GOLD_SCORE, EVAL_KL, EVAL_SCORE, GOLD_SCORE

TRAIN_KL = "objective/kl"
TRAIN_SCORE = "objective/scores"
TRIAL_COLUMN = "trial_number"  # the metrics frame's trial number (tuner.trial_records.METRIC_KEYS)
TRAJECTORY_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "proxy", "gold"]
PEAK_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "gold"]
POINT_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "proxy", "gold", "y", "state"]
MIN_FIT_POINTS = 4  # three parameters (r0, alpha, beta): at least one degree of freedom left for r²
# Which trials' points the fit pools: every trial (pruned ones ran furthest in KL, past gold's peak) or only those
# that finished their budget.
FIT_SCOPES = {"all": "Every trial's points", "complete": "Complete trials only"}
GROUP_FIT_COLUMNS = ["group", "trials", "points", "kl_star", "gold_star", "r2", "note"]
GOLD_BOUNDS = (0.0, 1.0)
"""What a gold score can be: the built-in task's is the share of the shortest route walked (ppo_core.tasks.gold), and
no other gold scorer is recorded. A fitted curve is clipped to it, and a peak outside it is no suggestion."""
KL_MARGIN = 0.25
"""How far past the highest measured KL a fitted peak may lie and still be headlined as a kl_target: a quarter of
the measured range's top. The fit is drawn this far, not to wherever its peak lands."""


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
class GaoFit:
    """Gao et al.'s RL form fitted to (d, gold) points: R(d) = r0 + d (alpha - beta log d), d = sqrt(KL).

    ``d_star`` = exp(alpha / beta - 1) is where dR/dd = alpha - beta log d - beta = 0 (a maximum for beta > 0);
    ``kl_star`` = d_star^2 is the suggested ``kl_target``. ``extrapolated`` is True when d_star lies outside the
    fitted points' d range: the peak is the curve's guess, not something the data showed.
    """

    r0: float
    alpha: float
    beta: float
    d_star: float
    kl_star: float
    gold_star: float
    r2: float
    n: int
    extrapolated: bool
    kl_low: float = 0.0  # the fitted points' KL range
    kl_high: float = np.inf

    def predict(self, sqrt_kl: np.ndarray) -> np.ndarray:
        """R(d), clipped to what a gold score can be (:data:`GOLD_BOUNDS`)."""
        return np.clip(gao_curve(np.asarray(sqrt_kl, dtype=float), self.r0, self.alpha, self.beta), *GOLD_BOUNDS)

    @property
    def drawn_to(self) -> float:
        """The KL the fitted curve is drawn to: a little past the data (:data:`KL_MARGIN`), never to a far peak."""
        return self.kl_high * (1.0 + KL_MARGIN)

    @property
    def supported(self) -> bool:
        """Whether KL* may be headlined as a kl_target: inside the measured KL range or within :data:`KL_MARGIN`
        past its top, at a gold score a gold score can be."""
        low, high = GOLD_BOUNDS
        return self.kl_low <= self.kl_star <= self.drawn_to and low <= self.gold_star <= high


@dataclass(frozen=True)
class FitOutcome:
    """:func:`fit_gao`'s answer: the fit, or None with ``reason`` saying why (also a note on an extrapolated peak)."""

    fit: GaoFit | None
    reason: str


def gao_curve(d: np.ndarray, r0: float, alpha: float, beta: float) -> np.ndarray:
    """R(d) = r0 + alpha d - beta d log d, with d log d -> 0 at d = 0."""
    d = np.clip(np.asarray(d, dtype=float), 0.0, None)
    d_log_d = np.where(d > 0, d * np.log(np.where(d > 0, d, 1.0)), 0.0)
    return r0 + alpha * d - beta * d_log_d


def fit_gao(sqrt_kl: np.ndarray | pd.Series, gold: np.ndarray | pd.Series) -> FitOutcome:
    """Least-squares fit of R(d) = r0 + d (alpha - beta log d) to the finite (d, gold) pairs.

    r0 is fitted rather than read off: a study's trials share their start policy, but its score at d = 0 is
    rarely recorded (the first evaluation already follows an update), and taking one trial's first point as r0
    would give that single noisy point the whole intercept. Adding r0 moves no part of the peak: dR/dd does not
    depend on it, so d* = exp(alpha / beta - 1) as in Gao's form without it.

    The form is linear in (r0, alpha, beta), with regressors 1, d and -d log d, so the least-squares optimum is
    the closed-form linear solution (numpy's lstsq): exact and unique, with no start guess and no iterations that
    could fail to converge, where ``scipy.optimize.curve_fit`` would only approximate it.

    r² = 1 - SS_res / SS_tot. None, with the reason, for fewer than 4 points, too few distinct d values to
    separate the three terms, a constant gold score, or beta <= 0 (gold never turns down: no peak in the form).
    """
    d = np.asarray(sqrt_kl, dtype=float)
    y = np.asarray(gold, dtype=float)
    keep = np.isfinite(d) & np.isfinite(y)
    d, y = np.clip(d[keep], 0.0, None), y[keep]
    n = len(d)
    if n < MIN_FIT_POINTS:
        return FitOutcome(None, f"{n} point(s) with KL and gold; the fit needs at least {MIN_FIT_POINTS}.")
    if len(np.unique(d)) < 3:
        return FitOutcome(None, "fewer than 3 distinct KL values: r0, alpha and beta cannot be told apart.")
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0.0:
        return FitOutcome(None, "the gold score is the same at every point: nothing to fit.")
    d_log_d = np.where(d > 0, d * np.log(np.where(d > 0, d, 1.0)), 0.0)
    design = np.column_stack([np.ones(n), d, -d_log_d])
    (r0, alpha, beta), _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    if rank < 3:
        return FitOutcome(None, "the points cannot separate r0, alpha and beta (a degenerate design).")
    r0, alpha, beta = float(r0), float(alpha), float(beta)
    if beta <= 0:
        return FitOutcome(None, f"fitted beta = {beta:.3g} <= 0: gold does not turn down with KL, so there is no "
                                f"peak to suggest (alpha = {alpha:.3g}).")
    residual = y - gao_curve(d, r0, alpha, beta)
    r2 = 1.0 - float(np.sum(residual**2)) / ss_tot
    exponent = alpha / beta - 1.0
    if exponent > 700:  # exp overflows a float: the peak is astronomically far out
        return FitOutcome(None, f"the fitted peak d* = exp({exponent:.3g}) is far beyond any KL: no usable target.")
    d_star = float(np.exp(exponent))
    extrapolated = not (float(d.min()) <= d_star <= float(d.max()))
    fit = GaoFit(
        r0=r0, alpha=alpha, beta=beta, d_star=d_star, kl_star=d_star**2,
        gold_star=float(gao_curve(np.array([d_star]), r0, alpha, beta)[0]), r2=r2, n=n, extrapolated=extrapolated,
        kl_low=float(d.min()) ** 2, kl_high=float(d.max()) ** 2,
    )
    reason = (f"the peak KL* = {fit.kl_star:.3g} lies outside the data's KL range "
              f"[{float(d.min()) ** 2:.3g}, {float(d.max()) ** 2:.3g}]: extrapolated." if extrapolated else "")
    return FitOutcome(fit, reason)


@dataclass(frozen=True)
class Headline:
    """What the page leads with: a suggested kl_target only where the data supports one, else what the data
    showed, in words (``value`` None)."""

    label: str
    value: str | None
    words: str


def headline(fit: GaoFit) -> Headline:
    """KL* as the headline when :attr:`GaoFit.supported`; else where gold stood: still rising at the highest KL
    measured (the fitted peak lies beyond it), already falling at the lowest (it lies before), or a fitted peak
    whose gold no score can reach."""
    if fit.supported:
        return Headline("Suggested kl_target", f"{fit.kl_star:.3g} nats",
                        f"the fitted gold score peaks at KL* = {fit.kl_star:.3g} nats, within the measured KL range "
                        f"[{fit.kl_low:.3g}, {fit.kl_high:.3g}] or just past it")
    if fit.kl_star > fit.drawn_to:
        return Headline("Gold still rising at", f"{fit.kl_high:.3g} nats",
                        f"gold was still rising at the highest KL measured ({fit.kl_high:.3g} nats): no peak inside "
                        "the data, so no kl_target to suggest; trials with more KL would show where it turns")
    if fit.kl_star < fit.kl_low:
        return Headline("Gold already falling at", f"{fit.kl_low:.3g} nats",
                        f"gold was already falling at the lowest KL measured ({fit.kl_low:.3g} nats): its peak lies "
                        "below every trial's KL, so no kl_target to suggest; trials with less KL would show it")
    return Headline("No kl_target", None,
                    f"the fitted peak's gold ({fit.gold_star:.3g}) lies outside what a gold score can be "
                    f"[{GOLD_BOUNDS[0]:g}, {GOLD_BOUNDS[1]:g}]: the fit does not describe this study")


def fit_points(paths: pd.DataFrame, states: Mapping[int, str], scope: str) -> pd.DataFrame:
    """The trajectory rows a fit pools: all of them for scope "all", the COMPLETE trials' for "complete"."""
    if scope not in FIT_SCOPES:
        raise ValueError(f"unknown fit scope {scope!r}; expected one of {', '.join(FIT_SCOPES)}")
    if scope == "all":
        return paths
    complete = [n for n, state in states.items() if state == "COMPLETE"]
    return paths[paths["trial"].isin(complete)]


def group_fits(paths: pd.DataFrame, groups: Mapping[int, str]) -> pd.DataFrame:
    """:func:`fit_gao` within each group of trials (``groups``: trial -> label, e.g. the estimator).

    One row per group: group, trials, points, kl_star, gold_star, r2 (NaN without a fit) and a note (the reason
    there is no fit, or that the peak is extrapolated).
    """
    labels = paths["trial"].map(lambda n: groups.get(int(n)))
    rows = []
    for label in sorted({str(g) for g in labels.dropna()}):
        chosen = paths[labels == label]
        outcome = fit_gao(chosen["sqrt_kl"], chosen["gold"])
        fit = outcome.fit
        rows.append({
            "group": label, "trials": int(chosen["trial"].nunique()), "points": int(chosen["gold"].notna().sum()),
            "kl_star": fit.kl_star if fit else np.nan, "gold_star": fit.gold_star if fit else np.nan,
            "r2": fit.r2 if fit else np.nan, "note": outcome.reason,
        })
    return pd.DataFrame(rows, columns=GROUP_FIT_COLUMNS)
