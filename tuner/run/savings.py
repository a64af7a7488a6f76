"""What stopping trials early saved: the PPO updates pruned and KL-guarded trials did not run, against running every
trial to its planned end (its ``budget_updates``), for ``ppo-tune run``'s summary, ``show`` and the dashboard."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

RAN_OR_STOPPED = ("COMPLETE", "PRUNED")
"""The trials that count: run to the end, or stopped early by the pruner or the KL guard. A failed trial's unrun
updates were lost to its failure, not saved by a decision."""


@dataclass(frozen=True)
class UpdateSavings:
    ran: int  # updates the counted trials ran
    planned: int  # updates they would have run, each to its end
    stopped: int  # trials stopped early
    trials: int  # trials counted
    episodes: float | None = None  # episodes the unrun updates would have generated (None: no trial's rollout known)
    seconds: float | None = None  # the time they would have taken, at each trial's own pace (None: no pace known)

    @property
    def saved(self) -> int:
        return self.planned - self.ran

    def line(self) -> str:
        """One line: ``early stopping saved 1234 of 2880 updates (43%) against running every trial to the end: 12 of
        30 trials pruned or stopped by the KL guard; about 19,744 episodes and 257 s``."""
        share = self.saved / self.planned if self.planned else 0.0
        line = (f"early stopping saved {self.saved} of {self.planned} updates ({share:.0%}) against running every "
                f"trial to the end: {self.stopped} of {self.trials} trials pruned or stopped by the KL guard")
        costs = [f"{self.episodes:,.0f} episodes" if self.episodes is not None else "",
                 f"{self.seconds:,.0f} s at each trial's own pace" if self.seconds is not None else ""]
        costs = [cost for cost in costs if cost]
        return f"{line}; about {' and '.join(costs)}" if costs else line


def _finite(values: pd.Series) -> pd.Series:
    return pd.to_numeric(values, errors="coerce").replace([math.inf, -math.inf], math.nan)


def update_savings(frame: pd.DataFrame) -> UpdateSavings | None:
    """saved = sum over completed and pruned trials of (budget_updates - updates): ``frame`` as
    :func:`tuner.study.reports.trials_frame` makes it. None when no such trial recorded its budget. The same unrun
    updates in episodes (x each trial's ``episodes_per_update``) and in seconds (x each trial's ``duration_s`` /
    ``updates``, its own pace), over the trials that know them."""
    if frame.empty or "budget_updates" not in frame.columns:
        return None
    counted = frame[frame["state"].isin(RAN_OR_STOPPED)]
    counted = counted[[isinstance(b, (int, float)) and math.isfinite(b) for b in counted["budget_updates"]]]
    if counted.empty:
        return None
    planned = int(counted["budget_updates"].sum())
    ran_each = counted["updates"].clip(upper=counted["budget_updates"])
    unrun = counted["budget_updates"] - ran_each
    episodes = seconds = None
    if "episodes_per_update" in counted.columns:
        known = _finite(counted["episodes_per_update"])
        episodes = float((unrun * known).sum()) if known.notna().any() else None
    if "duration_s" in counted.columns:
        pace = _finite(counted["duration_s"]) / ran_each.where(ran_each > 0)
        seconds = float((unrun * pace).sum()) if pace.notna().any() else None
    return UpdateSavings(ran=int(ran_each.sum()), planned=planned, stopped=int((counted["state"] == "PRUNED").sum()),
                         trials=len(counted), episodes=episodes, seconds=seconds)
