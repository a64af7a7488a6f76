"""The points a study's reward–KL frontier is read from, and where its gold peaks: one reading for the tuner's
frontier-guided search, the dashboard's Frontier page and Health's study advice.

:func:`frontier_source` picks the metrics (held-out where the study records them), :func:`trajectories` lays each
trial's evaluations out in KL, and :func:`study_peak` reads the peak from every evaluation of every trial
(:func:`tuner.search.frontier_peak.frontier_peak`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ppo_core.metric_names import EVAL_GOLD_SCORE, EVAL_KL, EVAL_SCORE, GOLD_SCORE, HELD_OUT_JUDGE_METRICS
from tuner.search.frontier_peak import FrontierPeak, frontier_peak

TRAIN_KL = "objective/kl"
TRAIN_SCORE = "objective/scores"
TRIAL_COLUMN = "trial_number"  # the metrics frame's trial number (tuner.store.records.METRIC_KEYS)
TRAJECTORY_COLUMNS = ["trial", "update", "kl", "sqrt_kl", "proxy", "gold"]

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

    @property
    def judge_name(self) -> str:
        """What a page calls the gold column's judge: "gold" for a built-in task's gold, else the judge's metric."""
        return "gold" if self.gold in (None, EVAL_GOLD_SCORE, GOLD_SCORE) else f"judge ({self.gold})"

    @property
    def gold_label(self) -> str:
        """An axis title for the gold column: "gold score", or "judge (eval/judge_score) score"."""
        return f"{self.judge_name} score"


def frontier_source(metrics: pd.DataFrame, judge: str | None = None) -> FrontierSource:
    """Held-out metrics (``eval/kl``, ``eval/score``, and the held-out judge: the first recorded of
    ``eval/judge_score``, ``eval/judge_win_rate`` and ``eval/gold_score``, the name older studies recorded a built-in
    task's gold by) where the study records them, else the training ones (``objective/kl``, ``objective/scores``,
    ``objective/gold_score``). "Gold" below is that judge: a built-in task's gold is its judge unless the run names
    others. ``judge`` names the held-out judge metric to read instead (a study's objective).

    Held-out first: they are measured on prompts the policy did not train on, with one fixed sampling setting, so
    trials compare fairly; training metrics are the fallback for studies run without evaluation. Gold is taken from
    the same kind as KL, never mixed: eval and training rows are different samples at different updates.
    """
    if _has_values(metrics, EVAL_KL) and _has_values(metrics, EVAL_SCORE):
        judged = [metric for metric in ((judge,) if judge else HELD_OUT_JUDGE_METRICS) if _has_values(metrics, metric)]
        kind, kl, proxy, gold = "eval", EVAL_KL, EVAL_SCORE, judged[0] if judged else EVAL_GOLD_SCORE
        where = "held-out evaluation"
    else:
        kind, kl, proxy, gold = "train", TRAIN_KL, TRAIN_SCORE, GOLD_SCORE
        where = "training rollouts (the study records no held-out evaluation)"
    if _has_values(metrics, gold):
        judged_by = "" if gold in (EVAL_GOLD_SCORE, GOLD_SCORE) else f", judged by {gold}"
        return FrontierSource(kind, kl, proxy, gold, f"KL and scores from the {where}{judged_by}.")
    return FrontierSource(
        kind, kl, proxy, None,
        f"KL and scores from the {where}; no gold score ({gold}) is recorded, nor any held-out judge's, so the proxy "
        "score stands in and overoptimisation cannot be seen.",
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


def study_peak(paths: pd.DataFrame) -> FrontierPeak:
    """Where gold peaks in KL over ``paths`` (every evaluation of every trial): the tuner's own reading
    (:func:`tuner.search.frontier_peak.frontier_peak`). Without a gold score there is nothing to read: the proxy
    score keeps rising with KL by construction."""
    rows = paths[paths["gold"].notna()]
    return frontier_peak(rows["trial"].to_numpy(dtype=int), rows["kl"].to_numpy(dtype=float),
                         rows["gold"].to_numpy(dtype=float))
