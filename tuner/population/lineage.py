"""A population member's lineage in words: the segments that made its run, where it copied another member (or went back
to an earlier one's best point) and what it changed, for ``ppo-tune best`` to print beside the schedule its config
holds.

Example::

    lineage_lines(trials, winner)
    # ['lineage of trial 21 (member 3): updates 1-6 trial 3, started by the sampler', 'updates 7-12 trial 10,
    #  copied trial 5 at update 6: learning_rate 3.1e-05 -> 2.5e-05', 'updates 13-18 trial 19, its own line']
"""

from __future__ import annotations

from collections.abc import Sequence

from optuna.trial import FrozenTrial

from tuner.store.segments import lineage, segment_of


def lineage_lines(trials: Sequence[FrozenTrial], last: FrozenTrial) -> list[str]:
    """One line per segment of ``last``'s lineage, first to last, after a line naming it; none where ``last`` is no
    population segment."""
    chain = lineage(trials, last)
    segment = segment_of(last)
    if not chain or segment is None:
        return []
    lines = [f"lineage of trial {last.number} (member {segment.member}):"]
    for trial, part in chain:
        where = f"updates {part.start + 1}-{part.stop} trial {trial.number}"
        if part.origin == "start":
            lines.append(f"  {where}, started by the sampler")
        elif part.origin == "continue":
            lines.append(f"  {where}, its own line")
        else:
            changes = ", ".join(f"{name} {old:.3g} -> {new:.3g}" for name, (old, new) in part.mutated.items())
            how = {"cool": "its own line cooled, heading past the KL budget",
                   "backtrack": f"went back to trial {part.parent}'s update {part.start}, the best earlier point"}.get(
                part.origin, f"copied trial {part.parent} at update {part.start}")
            lines.append(f"  {where}, {how}: {changes}")
    return lines


def population_line(trials: Sequence[FrozenTrial], size: int, extinct_at: int | None) -> str | None:
    """What a population study did, in one line: its generations, the copies made, and how it ended; None for a
    study with no segments."""
    segments = [(trial, segment) for trial in trials if (segment := segment_of(trial)) is not None]
    if not segments:
        return None
    generations = 1 + max(segment.generation for _, segment in segments)
    copies = sum(segment.origin == "exploit" for _, segment in segments)
    backs = sum(segment.origin == "backtrack" for _, segment in segments)
    line = f"population: {size} members over {generations} generations, {copies} copies of a better member"
    if backs:
        line += f", {backs} back to a better earlier point"
    if extinct_at is not None:
        line += f"; stopped after generation {extinct_at}: no member completed it inside the study's constraints"
    return line


__all__ = ["lineage_lines", "population_line"]
