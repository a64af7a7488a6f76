"""Searched knobs that cannot act: a study that spends its search on a knob its base makes inert, and a finished
study whose metrics show a searched knob did nothing.

PPO's clip (``cliprange``, its bounds, the dual clip and the value clip) acts only where the probability ratio has
moved from 1, which needs a second optimizer step on the same rollout. With one epoch of one mini-batch
(``num_ppo_epochs`` and ``num_mini_batches`` both 1, TRL's ``num_iterations`` 1 with one step a generation) every
ratio is exactly 1 when it is clipped, so the clip never acts: on the seventh text task's study the clip fraction
read 0.0 in every update. Before a run, :func:`inert_notice` reads that from the study file; after it,
:func:`inert_findings` reads it from what the trials logged: a clip fraction of 0 in every update of every trial
means the searched clip range did nothing, whatever the base said.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tuner.search.space import ParamSpec

CLIP_KNOBS = ("cliprange", "cliprange_low", "cliprange_high", "dual_clip", "cliprange_value")
"""Knobs that act only through a ratio moved away from 1 (or, for the value clip, values moved from the old ones)."""
EVIDENCE: dict[str, tuple[str, ...]] = {
    "cliprange": ("policy/clipfrac_avg", "clip_ratio/low", "clip_ratio/high"),
    "cliprange_low": ("clip_ratio/low",),
    "cliprange_high": ("clip_ratio/high",),
    "dual_clip": ("policy/clipfrac_avg",),
    "cliprange_value": ("val/clipfrac_avg",),
}
"""For each knob, the logged metrics that are nonzero in an update where it acted."""
STEP_FIELDS = ("num_ppo_epochs", "num_mini_batches")
"""Their product is the optimizer steps an update takes on one rollout."""


def _fixed_steps(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> int | None:
    """Optimizer steps per rollout when no searched knob can change them; None when one can."""
    if any(name in space for name in STEP_FIELDS):
        return None
    from ppo_core.config.ppo_config import settable_fields

    fields = settable_fields()
    steps = 1
    for name in STEP_FIELDS:
        value = base.get(name, fields[name].default)
        steps *= int(value)
    return steps


def inert_searched(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> list[str]:
    """The searched clip knobs that no trial of the study can make act: one optimizer step per rollout, fixed."""
    if _fixed_steps(space, base) != 1:
        return []
    return [name for name in CLIP_KNOBS if name in space]


def inert_notice(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> str | None:
    """One line for ``ppo-tune run`` when the study searches a knob its base makes inert."""
    inert = inert_searched(space, base)
    if not inert:
        return None
    return (f"warning: this study searches {', '.join(inert)}, which cannot act here: with num_ppo_epochs 1 and "
            "num_mini_batches 1 each update takes one optimizer step per rollout, so every probability ratio is 1 "
            "where it is clipped; drop it from search_space, or search num_ppo_epochs or num_mini_batches too")


@dataclass(frozen=True)
class InertFinding:
    """A searched knob whose metric shows it never acted in any trial."""

    param: str
    metric: str
    updates: int
    trials: int

    def words(self) -> str:
        return (f"{self.param} did nothing: {self.metric} was 0 in all {self.updates} updates of {self.trials} "
                f"trials; its search was spent on nothing")


def inert_findings(metrics: pd.DataFrame, space: Mapping[str, ParamSpec]) -> list[InertFinding]:
    """For each searched knob with evidence, the first of its metrics that every update of every trial logged as 0
    (an update that did not log it is left out; a metric no update logged says nothing)."""
    found = []
    for param in (name for name in EVIDENCE if name in space):
        for metric in EVIDENCE[param]:
            if metric not in metrics.columns:
                continue
            logged = metrics[metrics[metric].notna()]
            values = [float(value) for value in logged[metric]]
            if values and all(math.isfinite(v) and v == 0.0 for v in values):
                found.append(InertFinding(param, metric, len(values), int(logged["trial_number"].nunique())
                                          if "trial_number" in logged.columns else 0))
                break
    return found


def format_inert_findings(findings: Sequence[InertFinding]) -> str:
    return "\n".join(finding.words() for finding in findings)
