"""A population segment's run, in the trial's process: the member's updates from ``start`` to ``stop``, continued
from the checkpoint its parent segment wrote at ``start`` (none for a first segment), with the parent's stored
updates copied first, so that the segment's trial holds its lineage's whole curve and its reporter judges the new
updates as one run would (the KL guard's history, the objective's last evaluations).

A segment that went back to the population's elite (origin ``backtrack``) starts at the elite's last update, earlier
than the rest of its generation, and trains to the same ``stop``: its parent is the elite, and the copied rows are
the elite's lineage's up to that update only.

The segment writes its own checkpoint at ``stop`` (none before it), in its chain's directory
(``tuner.trial.checkpoints``), for the next generation to continue or copy. Its config is its lineage's: the parent's
config with the schedules' new pairs, which begin after ``start`` (the checkpoint accepts such a config:
``ppo_core.run.checkpoint_match``).
"""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from ppo_core.config.io import build_config
from ppo_core.config.launch_env import launched_rank
from ppo_core.run.checkpoint_files import checkpoints_dir, complete_checkpoints
from ppo_core.run.trainer import PPOTrainer
from tuner.store.attrs import CONFIG_ATTR
from tuner.store.records import TrialStore
from tuner.store.segments import Segment
from tuner.trial.checkpoints import first_of_chain, remove_trial_checkpoints, trial_checkpoints
from tuner.trial.reporter import TrialReporter


class SegmentError(RuntimeError):
    """A segment cannot start: the checkpoint it continues from is gone."""


def _directory(study: optuna.Study, storage_url: str, trial: FrozenTrial) -> Path:
    """The checkpoint directory of ``trial``'s chain of retries."""
    first = first_of_chain(study._storage, study._study_id, trial.number, trial.user_attrs)
    return trial_checkpoints(storage_url, study.study_name, first)


def parent_checkpoint(study: optuna.Study, storage_url: str, segment: Segment) -> tuple[FrozenTrial, Path] | None:
    """The parent segment's trial and its checkpoint at ``segment.start``; None for a first segment. SegmentError
    when that checkpoint is not there."""
    if segment.parent is None:
        return None
    parent = study._storage.get_trial(study._storage.get_trial_id_from_study_id_trial_number(study._study_id,
                                                                                            segment.parent))
    found = dict(complete_checkpoints(checkpoints_dir(_directory(study, storage_url, parent))))
    if segment.start not in found:
        raise SegmentError(f"population: trial {segment.parent}'s checkpoint at update {segment.start}, which this "
                           "segment continues, is gone")
    return parent, found[segment.start]


def run_segment(study: optuna.Study, storage_url: str, frozen: FrozenTrial, segment: Segment,
                reporter: TrialReporter, store: TrialStore) -> None:
    """Train ``segment`` (the trial ``frozen``'s), reporting through ``reporter``."""
    directory = _directory(study, storage_url, frozen)
    if launched_rank() == 0:  # an earlier attempt's partial checkpoints: the segment starts again from its parent's
        remove_trial_checkpoints(directory)
    parent = parent_checkpoint(study, storage_url, segment)
    # Saved every ``stop`` updates: at ``stop`` alone, however long the segment (a backtracked one is longer).
    config = build_config({**frozen.user_attrs[CONFIG_ATTR], "output_dir": str(directory),
                           "save_steps": segment.stop})
    if parent is not None and launched_rank() == 0:
        reporter.restore(store.copy_from(parent[0]._trial_id, segment.start))
    trainer = PPOTrainer(config, [reporter])
    trainer.train(parent[1] if parent is not None else None, stop_after=min(segment.stop, trainer.num_updates))


__all__ = ["SegmentError", "parent_checkpoint", "run_segment"]
