"""Exploit: which members of a generation copy which, once every member's segment has ended (truncation selection).

Members are ranked best first: those that completed their segment inside every constraint of the study, by the first
objective; then those that completed it outside a constraint (over the KL budget); then those that did not complete it
(stopped by the KL guard or a hacking guard, or failed). The ``cut`` lowest, and every member that is not a feasible
completed one, are recipients; the ``cut`` highest feasible completed members are the donors, and a recipient copies
one drawn at random. A member over the budget or stopped for hacking never donates. A recipient still feasible copies
only a donor ahead of it by at least ``margin``; otherwise it continues its own line. With no margin, a recipient tied
with its donor copies it too, as truncation selection does: its copy is then perturbed, which a tie has not ruled out.

A member inside the constraints but heading past the KL budget by the run's end neither donates nor copies: it
continues its own line cooled (:func:`cooling`), as RLHF practice lowers the learning rate and raises β as KL climbs.

Example::

    plan = exploit_plan([Standing(0, 0.71, True), Standing(1, 0.64, True), ...], cut=2, margin=0.0,
                        maximize=True, rng=random.Random(7))   # {1: 0, ...}: member 1 copies member 0
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Standing:
    """How one member's segment ended: its first objective (None where it did not complete), and whether it kept
    every constraint."""

    member: int
    value: float | None
    feasible: bool
    heading: bool = False
    """Inside every constraint now, but forecast to end past the KL budget (``tuner.population.heading``)."""

    @property
    def alive(self) -> bool:
        """Completed, inside every constraint, with a finite value: the members that may donate."""
        return self.feasible and self.value is not None and math.isfinite(self.value)


def ranked(standings: Sequence[Standing], maximize: bool) -> list[Standing]:
    """Best first: feasible completed members by value, then completed ones over a constraint, then the rest; ties
    by member."""
    sign = -1.0 if maximize else 1.0

    def key(standing: Standing) -> tuple[int, float, int]:
        completed = standing.value is not None and math.isfinite(standing.value)
        tier = 0 if standing.alive else 1 if completed else 2
        return tier, sign * standing.value if completed and standing.value is not None else 0.0, standing.member

    return sorted(standings, key=key)


def donors(standings: Sequence[Standing], cut: int, maximize: bool) -> list[Standing]:
    """The members a recipient may copy, best first: the ``cut`` best alive and not heading past the budget; only
    where every member still alive is heading there, the ``cut`` best of them, rather than leave the population
    nothing to copy. Empty where no member is alive."""
    order = ranked(standings, maximize)
    return [s for s in order if s.alive and not s.heading][:cut] or [s for s in order if s.alive][:cut]


def exploit_plan(standings: Sequence[Standing], cut: int, margin: float, maximize: bool,
                 rng: random.Random) -> dict[int, int] | None:
    """{recipient member: donor member} for this ranking; None when no member may donate (every one stopped or over
    a constraint: the population has nothing left to copy)."""
    order = ranked(standings, maximize)
    # A member heading past the budget neither donates nor copies (it cools: cooling()).
    pool = donors(standings, cut, maximize)
    if not pool:
        return None
    donor_ids = {s.member for s in pool}
    steady = [s for s in order if not (s.alive and s.heading)]
    recipients = [s for s in steady[max(0, len(steady) - cut):] if s.member not in donor_ids]
    recipients += [s for s in order if not s.alive and s not in recipients]
    plan: dict[int, int] = {}
    for recipient in recipients:
        donor = rng.choice(pool)
        if not recipient.alive or recipient.value is None or donor.value is None or \
                (donor.value - recipient.value if maximize else recipient.value - donor.value) >= margin:
            plan[recipient.member] = donor.member
    return plan


def cooling(standings: Sequence[Standing], plan: dict[int, int]) -> list[int]:
    """The members that continue their own line cooled (a lower learning rate, a higher KL coefficient): alive and
    heading past the budget, and copying nobody."""
    return [s.member for s in standings if s.alive and s.heading and s.member not in plan]


__all__ = ["Standing", "cooling", "donors", "exploit_plan", "ranked"]
