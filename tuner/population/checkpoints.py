"""Garbage collection of a population's checkpoints: a segment's checkpoint is read only by the next generation's
segments that continue or copy it, so once the generation after it has ended, nothing can reach it any more.

The last generation's checkpoints stay: they hold the members' trained weights, the winner's among them.
"""

from __future__ import annotations

from collections.abc import Sequence

from optuna.trial import FrozenTrial

from tuner.store.attrs import RETRY_OF_ATTR
from tuner.store.segments import segment_of
from tuner.trial.checkpoints import remove_trial_checkpoints, trial_checkpoints


def chain_first(trials: Sequence[FrozenTrial], trial: FrozenTrial) -> int:
    """The first trial of ``trial``'s chain of retries, from the trials at hand (the number whose directory the
    chain's checkpoints are in: ``tuner.trial.checkpoints``)."""
    by_number = {t.number: t for t in trials}
    number = trial.number
    while isinstance(retried := by_number[number].user_attrs.get(RETRY_OF_ATTR), int) and retried in by_number:
        number = retried
    return number


def remove_generation_checkpoints(storage_url: str, study_name: str, trials: Sequence[FrozenTrial],
                                  generation: int) -> None:
    """Remove the checkpoints of every segment of ``generation`` (none below 0)."""
    if generation < 0:
        return
    for trial in trials:
        segment = segment_of(trial)
        if segment is not None and segment.generation == generation:
            remove_trial_checkpoints(trial_checkpoints(storage_url, study_name, chain_first(trials, trial)))


__all__ = ["chain_first", "remove_generation_checkpoints"]
