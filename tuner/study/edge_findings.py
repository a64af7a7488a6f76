"""Edge-of-range findings: searched ranges whose best trials crowd against a bound, so the optimum may lie beyond it.

Among a study's completed (and feasible) trials, the best ``top_fraction`` by the first objective are taken; for each
float or int parameter, if at least ``EDGE_SHARE`` of those that used it lie within ``margin`` of the range's width
of one bound (measured in log space for a log-scale parameter), that bound is a finding: widen the range past it.

Example::

    space = read_stored_spec(study.user_attrs, len(study.directions)).search_space  # tuner.study.stored_spec
    print(format_edge_findings(edge_findings(study.get_trials(), space, study.directions)))
    # learning_rate: the best 6 of 30 trials lie within 10% of the upper bound 5e-05; widen the range above it
    # (the best trials end at 1.1 to 1.9 nats of KL)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from tuner.search.frontier_peak import kl_range
from tuner.search.space import ParamSpec
from tuner.store.attrs import KL_HISTORY_ATTR
from tuner.study.constraints import feasible
from tuner.study.winner import rank_completed

MIN_COMPLETE = 5  # fewer completed trials say nothing about where the optimum lies
MIN_TOP = 3  # the best trials taken, at the least (and the least of them that must use a parameter)
# Not every one of the best trials: one of them lying elsewhere by the sampler's chance would otherwise hide an edge
# the rest agree on. With 3 or 4 of them, 80% still means all.
EDGE_SHARE = 0.8


@dataclass(frozen=True)
class EdgeFinding:
    """The best trials of a study crowd against one bound of a searched range."""

    param: str
    bound: Literal["low", "high"]
    value: float
    """The bound's value."""
    near: int
    """How many of the best trials (those that used the parameter) lie within the margin of the bound."""
    top: int
    """How many of the best trials used the parameter."""
    ranked: int
    """Completed (and feasible) trials the best were taken from."""
    margin: float
    kl_band: tuple[float, float] | None = None
    """The lowest and highest final KL (the KL guard's metric, as each trial recorded it) of the best trials: where
    in KL the good configurations end, which a wider range should keep them (None when none recorded it)."""

    @property
    def advice(self) -> str:
        return f"widen {self.param} {'above' if self.bound == 'high' else 'below'} {self.value:g}"

    @property
    def message(self) -> str:
        """One line, e.g. ``learning_rate: the best 6 of 30 trials lie within 10% of the upper bound 5e-05; widen
        the range above it``."""
        who = f"the best {self.top} of {self.ranked} trials lie" if self.near == self.top \
            else f"{self.near} of the best {self.top} of {self.ranked} trials lie"
        side = "upper" if self.bound == "high" else "lower"
        band = "" if self.kl_band is None else \
            f" (the best trials end at {kl_range(*self.kl_band)} nats of KL)"
        return (f"{self.param}: {who} within {self.margin:.0%} of the {side} bound {self.value:g}; widen the range "
                f"{'above' if self.bound == 'high' else 'below'} it{band}")


def position(spec: ParamSpec, value: float) -> float:
    """Where ``value`` lies in ``spec``'s range, 0 at low and 1 at high: (v - low) / (high - low), or
    (log v - log low) / (log high - log low) on a log scale."""
    assert spec.low is not None and spec.high is not None  # numeric parameters have both
    if spec.log:
        return (math.log(value) - math.log(spec.low)) / (math.log(spec.high) - math.log(spec.low))
    return (value - spec.low) / (spec.high - spec.low)


def final_kl(trial: FrozenTrial) -> float | None:
    """The last finite KL a trial recorded for its KL guard (user attribute ``kl_history``); None without one."""
    history = trial.user_attrs.get(KL_HISTORY_ATTR) or []
    finite = [float(v) for v in history if isinstance(v, (int, float)) and math.isfinite(v)]
    return finite[-1] if finite else None


def kl_band(trials: Sequence[FrozenTrial]) -> tuple[float, float] | None:
    """(lowest, highest) :func:`final_kl` of ``trials``; None when none recorded one."""
    finals = [kl for kl in map(final_kl, trials) if kl is not None]
    return (min(finals), max(finals)) if finals else None


def best_ranked(trials: Sequence[FrozenTrial], directions: Sequence[StudyDirection]) -> list[FrozenTrial]:
    """The completed, feasible trials with a finite first objective, best first (several objectives: by the first)."""
    return [t for t in rank_completed(trials, directions) if feasible(t)]


def edge_findings(
    trials: Sequence[FrozenTrial], space: Mapping[str, ParamSpec], directions: Sequence[StudyDirection],
    top_fraction: float = 0.2, margin: float = 0.1,
) -> list[EdgeFinding]:
    """The bounds of ``space``'s float and int ranges that the best trials crowd against.

    The best ``ceil(top_fraction · n)`` of the n completed, feasible trials are taken (at least ``MIN_TOP``; nothing
    is found with fewer than ``MIN_COMPLETE``). For each parameter, among those best trials that used it (``kl_coef``
    goes unused under an adaptive controller) and at least ``MIN_TOP`` of them: if ``EDGE_SHARE`` of them or more
    have :func:`position` <= margin, the low bound is a finding; >= 1 - margin, the high one.
    """
    ranked = best_ranked(trials, directions)
    if len(ranked) < MIN_COMPLETE:
        return []
    best = ranked[:max(MIN_TOP, math.ceil(top_fraction * len(ranked)))]
    band = kl_band(best)
    findings = []
    for name, spec in space.items():
        if spec.type not in ("float", "int") or spec.low is None or spec.high is None or spec.low >= spec.high:
            continue
        positions = [position(spec, float(t.params[name])) for t in best if name in t.params]
        if len(positions) < MIN_TOP:
            continue
        crowds: list[tuple[Literal["low", "high"], float, int]] = [
            ("low", spec.low, sum(p <= margin for p in positions)),
            ("high", spec.high, sum(p >= 1 - margin for p in positions)),
        ]
        for bound, value, near in crowds:
            if near >= EDGE_SHARE * len(positions):
                findings.append(EdgeFinding(name, bound, value, near, len(positions), len(ranked), margin, band))
    return findings


def format_edge_findings(findings: Sequence[EdgeFinding]) -> str:
    """The findings as lines under a heading, for a terminal; empty when there are none."""
    if not findings:
        return ""
    return "\n".join(["Edges of the search space (the optimum may lie beyond them):",
                      *(f"  {finding.message}" for finding in findings)])
