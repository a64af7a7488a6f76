"""Garbage collection of a population's checkpoints: a segment's checkpoint is read only by the next generation's
segments that continue or copy it, so once the generation after it has ended, nothing can reach it any more.

The last generation's checkpoints stay: they hold the members' trained weights, the winner's among them.
"""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial

from tuner.store.segments import segment_of
from tuner.trial.checkpoints import first_of_chain, remove_trial_checkpoints, trial_checkpoints


def remove_generation_checkpoints(study: optuna.Study, storage_url: str, trials: Sequence[FrozenTrial],
                                  generation: int) -> None:
    """Remove the checkpoints of every segment of ``generation`` (none below 0) of ``study``, kept in ``storage_url``;
    a chain of retries keeps its checkpoints under its first trial (``tuner.trial.checkpoints.first_of_chain``)."""
    if generation < 0:
        return
    for trial in trials:
        segment = segment_of(trial)
        if segment is not None and segment.generation == generation:
            first = first_of_chain(study._storage, study._study_id, trial.number, trial.user_attrs)
            remove_trial_checkpoints(trial_checkpoints(storage_url, study.study_name, first))


__all__ = ["remove_generation_checkpoints"]
