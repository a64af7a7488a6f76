"""A population's segments as its trials record them: one Optuna trial per member per segment of updates.

Each segment's trial carries ``POPULATION_ATTR``, a mapping of what it is in the population (:class:`Segment`): the
member (a slot 0..size-1), the generation (its segment's index), the updates it trains (``start`` exclusive to
``stop`` inclusive), and where it came from: ``start`` (a first segment, configured by the sampler), ``continue``
(the member's own previous segment), ``cool`` (its own previous segment, its learning rate lowered and its KL
coefficient raised as it heads past the KL budget), ``exploit`` (a copy of another member's previous segment, with
``mutated`` saying which knobs changed, from what to what) or ``backtrack`` (a copy of the population's elite, an
earlier segment's end, mutated likewise: its ``start`` is the elite's ``stop``, the update it went back to, and it
trains to its generation's stop, a longer segment). Its parent's trial number is ``parent``. This is the
population's lineage, kept in the study's database with the rest of the study: a segment's metric rows begin with a
copy of its parent's up to its ``start``, so each segment's trial holds its lineage's whole curve, from update 0.

A retried segment (an interrupted one, queued again) carries the same record; of a slot's trials the latest is the
one that counts.

Example::

    slots = generation_slots(study.get_trials(), generation=2)   # {member: its latest trial}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from optuna.trial import FrozenTrial, TrialState

from tuner.store.attrs import BUDGET_ATTR, DUPLICATE_OF_ATTR, POPULATION_ATTR

Origin = Literal["start", "continue", "cool", "exploit", "backtrack"]
COPIES = ("exploit", "backtrack")
"""The origins of a segment that copied another member's (its parent, mutated)."""
ENDED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@dataclass(frozen=True)
class Segment:
    """One member's segment of updates (see the module's docstring)."""

    member: int
    generation: int
    start: int
    stop: int
    origin: Origin = "start"
    parent: int | None = None
    mutated: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def as_attr(self) -> dict[str, Any]:
        return {"member": self.member, "generation": self.generation, "start": self.start, "stop": self.stop,
                "origin": self.origin, "parent": self.parent,
                "mutated": {name: list(change) for name, change in self.mutated.items()}}

    @classmethod
    def from_attr(cls, attr: Mapping[str, Any]) -> Segment:
        mutated = {str(name): (float(old), float(new)) for name, (old, new) in (attr.get("mutated") or {}).items()}
        parent = attr.get("parent")
        return cls(int(attr["member"]), int(attr["generation"]), int(attr["start"]), int(attr["stop"]),
                   attr.get("origin", "start"), None if parent is None else int(parent), mutated)


def segment_of(trial: FrozenTrial) -> Segment | None:
    """The segment ``trial`` trains, None for a trial that is none (a study without a population)."""
    attr = trial.user_attrs.get(POPULATION_ATTR)
    return Segment.from_attr(attr) if isinstance(attr, Mapping) else None


def generation_slots(trials: Sequence[FrozenTrial], generation: int) -> dict[int, FrozenTrial]:
    """Each member's latest trial of ``generation`` (a retry replaces the attempt it retries)."""
    slots: dict[int, FrozenTrial] = {}
    for trial in trials:
        segment = segment_of(trial)
        if segment is None or segment.generation != generation or DUPLICATE_OF_ATTR in trial.user_attrs:
            continue
        if segment.member not in slots or slots[segment.member].number < trial.number:
            slots[segment.member] = trial
    return slots


def last_generation(trials: Sequence[FrozenTrial]) -> int:
    """The highest generation any trial belongs to; -1 when there is none yet."""
    return max((segment.generation for t in trials if (segment := segment_of(t)) is not None), default=-1)


def generation_ended(trials: Sequence[FrozenTrial], generation: int, size: int) -> bool:
    """Whether every member of ``generation`` has a segment and each one has ended (complete, pruned or failed)."""
    slots = generation_slots(trials, generation)
    return len(slots) == size and all(t.state in ENDED for t in slots.values())


def horizon(trials: Sequence[FrozenTrial]) -> int | None:
    """The run's length in updates, as the first segments' trials recorded it (the reporter's budget)."""
    for trial in trials:
        budget = trial.user_attrs.get(BUDGET_ATTR)
        if segment_of(trial) is not None and isinstance(budget, int) and budget > 0:
            return budget
    return None


def lineage(trials: Sequence[FrozenTrial], last: FrozenTrial) -> list[tuple[FrozenTrial, Segment]]:
    """The segments that led to ``last``, first to last, each with its trial."""
    by_number = {t.number: t for t in trials}
    chain: list[tuple[FrozenTrial, Segment]] = []
    current: FrozenTrial | None = last
    while current is not None and (segment := segment_of(current)) is not None:
        chain.append((current, segment))
        current = by_number.get(segment.parent) if segment.parent is not None else None
    return chain[::-1]


def duplicate_of(trials: Sequence[FrozenTrial], trial: FrozenTrial) -> int | None:
    """The earlier trial of the same member and generation that ``trial`` repeats (queued twice by two workers at
    once), None when it repeats none: a failed attempt's retry repeats nothing."""
    segment = segment_of(trial)
    if segment is None:
        return None
    for other in sorted(trials, key=lambda t: t.number):
        theirs = segment_of(other)
        if other.number < trial.number and theirs is not None and DUPLICATE_OF_ATTR not in other.user_attrs and \
                (theirs.generation, theirs.member) == (segment.generation, segment.member) and \
                other.state != TrialState.FAIL:
            return other.number
    return None


__all__ = [
    "COPIES",
    "ENDED",
    "Origin",
    "Segment",
    "duplicate_of",
    "generation_ended",
    "generation_slots",
    "horizon",
    "last_generation",
    "lineage",
    "segment_of",
]
