"""Backtracking: a recipient may copy the population's elite, the best earlier segment end of any lineage, rather
than a current member (Orion's ``BacktrackExploit``). In RLHF that undoes a hack that began after a member's peak:
where every member's held-out judge has fallen since, the point where it stood highest is copied back.

The elite, at the ranking after generation g, is the best of the segments of the generations before g that completed
inside every constraint of the study and are not heading past its KL budget (the line through their own held-out KL,
:mod:`tuner.population.heading`), by the first objective; ties go to the later end (more of the run trained), then
to the lower trial. A recipient goes back to it only while it is ahead of the generation's best donor (:func:`ahead`).

How a value read at an earlier update compares with the current members': a segment's value is the study's first
objective, reduced as the study says (``last``, ``mean_last_k``) over the held-out evaluations up to its end, the
reading the current members are ranked by too; the two compare as they stand, each the judge's reading of a policy
on the held-out prompts, and the one that reads higher is the better policy by the judge whatever its update. The
KL budget is kept by the elite's own feasibility and forecast, not by its update. The caveat: the elite is the best
of every earlier reading, each of them noisy, so its value is biased upward (the winner's curse), the more so the
longer the population runs; ``margin`` (one evaluation's standard error is a fair one) keeps a recipient from going
back for noise alone, and ``validate``'s replay on fresh seeds is what judges the schedule that comes out.

Example::

    best = elite(segment_ends(trials, before=3), maximize=True, heading=lambda trial: False)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial, TrialState

from tuner.store.segments import generation_slots, segment_of
from tuner.study.constraints import feasible


@dataclass(frozen=True)
class SegmentEnd:
    """Where a segment ended: its trial, its last update, its first objective (None where it did not complete)
    and whether it kept every constraint of the study."""

    trial: int
    stop: int
    value: float | None
    feasible: bool

    @property
    def alive(self) -> bool:
        """Completed inside every constraint, with a finite value: the ends a recipient may go back to."""
        return self.feasible and self.value is not None and math.isfinite(self.value)


def ranking_value(trial: FrozenTrial, scores: Mapping[int, float] | None = None) -> float | None:
    """What ``trial``'s segment end is ranked on: its first objective, or its score in ``scores`` (trial number to
    the study's ``exploit_on`` metric, reduced as the first objective is); None where it did not complete."""
    if trial.state != TrialState.COMPLETE or not trial.values:
        return None
    return trial.values[0] if scores is None else scores.get(trial.number)


def segment_ends(trials: Sequence[FrozenTrial], before: int,
                 scores: Mapping[int, float] | None = None) -> list[SegmentEnd]:
    """The end of every member's segment (the attempt that counts) in each generation before ``before``, valued as
    :func:`ranking_value` says."""
    ends = []
    for generation in range(before):
        for trial in generation_slots(trials, generation).values():
            segment = segment_of(trial)
            if segment is not None:
                value = ranking_value(trial, scores)
                ends.append(SegmentEnd(trial.number, segment.stop, value, value is not None and feasible(trial)))
    return ends


def elite(ends: Sequence[SegmentEnd], maximize: bool, heading: Callable[[int], bool]) -> SegmentEnd | None:
    """The best alive end whose trial is not ``heading`` past the KL budget; None when there is none. ``heading``
    (a trial number) is asked best end first, and only until one is not: it reads that trial's held-out KL."""
    sign = -1.0 if maximize else 1.0
    order = sorted((end for end in ends if end.alive), key=lambda end: (sign * (end.value or 0.0), -end.stop,
                                                                          end.trial))
    return next((end for end in order if not heading(end.trial)), None)


def ahead(value: float, than: float, margin: float, maximize: bool) -> bool:
    """Whether ``value`` is better than ``than`` (the generation's best donor) and by at least ``margin``: a
    recipient goes back to the elite only for a gain; at a tie it copies the current donor."""
    gain = value - than if maximize else than - value
    return gain > 0 and gain >= margin


__all__ = ["SegmentEnd", "ahead", "elite", "ranking_value", "segment_ends"]
