"""Where a study's trials keep their checkpoints, so that a trial queued again after an interruption or a lost
worker continues from the last one instead of from update 0.

A trial saves checkpoints when its config asks (``save_steps`` in the study's ``base``, or searched): saving costs
a write of the trained weights and optimizer states at every interval, which a short trial pays for more than it
could ever win back, so it is the study's choice, made where a run's checkpoints are asked for everywhere else.

A chain of retries (trial 3, its retry 7, 7's retry 9, linked by ``RETRY_OF_ATTR``) shares one directory, named by
the chain's first trial: each retry continues from the last checkpoint any of them wrote, and writes its own there.

- SQLite storage: beside the database file, ``<file>.checkpoints/<study>/trial-<first>``, so that the study and its
  checkpoints move (and are removed) together;
- any other storage (PostgreSQL): under the cache, ``$PPO_TUNE_CACHE/checkpoints/<host-database>/<study>/
  trial-<first>``, on the machine that runs the trial; a retry on another machine finds none and starts afresh.

The directory is removed once the trial ends for good (complete, pruned, or failed and not queued again).

Example::

    directory = trial_checkpoints(spec.storage, spec.name, first_of_chain(storage, study_id, trial.number, attrs))
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import quote

import sqlalchemy
from optuna.storages import BaseStorage

from ppo_core.models.cache_root import default_cache_dir
from tuner.store.attrs import RETRY_OF_ATTR
from tuner.store.database import sqlite_path


def study_checkpoints(storage: str, study_name: str) -> Path:
    """The directory that holds the checkpoints of every trial of ``study_name`` in ``storage``."""
    database = sqlite_path(storage)
    if database is not None:
        root = database.resolve().with_name(f"{database.name}.checkpoints")
    else:
        url = sqlalchemy.engine.make_url(storage)
        where = re.sub(r"[^A-Za-z0-9._-]", "_", f"{url.host or 'local'}-{url.port or ''}-{url.database or ''}")
        root = default_cache_dir() / "checkpoints" / where
    return root / quote(study_name, safe="")


def trial_checkpoints(storage: str, study_name: str, first: int) -> Path:
    """The checkpoint directory (a run's ``output_dir``) of the chain of retries that trial ``first`` began."""
    return study_checkpoints(storage, study_name) / f"trial-{first}"


def first_of_chain(storage: BaseStorage, study_id: int, number: int, user_attrs: dict[str, object]) -> int:
    """The number of the trial that the chain of retries ending at trial ``number`` (with ``user_attrs``) began."""
    while isinstance(retried := user_attrs.get(RETRY_OF_ATTR), int):
        number = retried
        user_attrs = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, number)).user_attrs
    return number


def remove_trial_checkpoints(directory: Path) -> None:
    """Remove a trial's checkpoints once nothing will continue from them."""
    shutil.rmtree(directory, ignore_errors=True)
