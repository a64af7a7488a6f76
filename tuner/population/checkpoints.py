"""Garbage collection of a population's checkpoints: a segment's checkpoint is read only by the segments that
continue or copy it, so once its generation's successors are queued, only the ones they read can be reached.

What stays: the checkpoints of the segments the controller names (the generation just ranked, whose successors are
queued; and, where the population backtracks, its elite, the best earlier segment end, until a better one replaces
it), and those of every segment not yet ended (queued, running, or a retry's chain) and of its parent. The last
generation's stay at the end: they hold the members' trained weights, the winner's among them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from tuner.store.segments import ENDED, segment_of
from tuner.trial.checkpoints import first_of_chain, remove_trial_checkpoints, trial_checkpoints


def remove_unreachable_checkpoints(study: optuna.Study, storage_url: str, trials: Sequence[FrozenTrial],
                                   keep: Collection[int]) -> list[Path]:
    """Remove the checkpoints of every ended segment of ``study`` (kept in ``storage_url``) but those of the trials
    in ``keep`` and those a segment not yet ended continues from; the directories removed (each a chain of retries',
    named by its first trial: ``tuner.trial.checkpoints.first_of_chain``)."""
    by_number = {trial.number: trial for trial in trials}

    def chain(number: int) -> int:
        trial = by_number.get(number)
        attrs = trial.user_attrs if trial is not None else {}
        return first_of_chain(study._storage, study._study_id, number, attrs)

    kept = {chain(number) for number in keep}
    ended = []
    for trial in trials:
        segment = segment_of(trial)
        if segment is None:
            continue
        if trial.state in ENDED:
            ended.append(trial.number)
            continue
        kept.add(chain(trial.number))
        if segment.parent is not None:
            kept.add(chain(segment.parent))
    removed = []
    for first in sorted({chain(number) for number in ended} - kept):
        directory = trial_checkpoints(storage_url, study.study_name, first)
        if directory.exists():
            remove_trial_checkpoints(directory)
            removed.append(directory)
    return removed


__all__ = ["remove_unreachable_checkpoints"]
