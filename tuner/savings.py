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

    @property
    def saved(self) -> int:
        return self.planned - self.ran

    def line(self) -> str:
        """One line: ``early stopping saved 1234 of 2880 updates (43%): 12 of 30 trials stopped early``."""
        share = self.saved / self.planned if self.planned else 0.0
        return (f"early stopping saved {self.saved} of {self.planned} updates ({share:.0%}) against running every "
                f"trial to the end: {self.stopped} of {self.trials} trials pruned or stopped by the KL guard")


def update_savings(frame: pd.DataFrame) -> UpdateSavings | None:
    """saved = sum over completed and pruned trials of (budget_updates - updates): ``frame`` as
    :func:`tuner.reports.trials_frame` makes it. None when no such trial recorded its budget."""
    if frame.empty or "budget_updates" not in frame.columns:
        return None
    counted = frame[frame["state"].isin(RAN_OR_STOPPED)]
    counted = counted[[isinstance(b, (int, float)) and math.isfinite(b) for b in counted["budget_updates"]]]
    if counted.empty:
        return None
    planned = int(counted["budget_updates"].sum())
    ran = int(counted["updates"].clip(upper=counted["budget_updates"]).sum())
    return UpdateSavings(ran=ran, planned=planned, stopped=int((counted["state"] == "PRUNED").sum()),
                         trials=len(counted))
