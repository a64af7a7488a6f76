"""A study's spec recorded with it: who made the study, what a resume compares against, and what ``validate``
rebuilds from.

The study file's mapping is kept on the study (``tuner.store.attrs.SPEC_ATTR``). A resume with a file whose
objectives, base, search space, pruner, sampler, KL guard, constraints or warm starts differ would otherwise go on
under the old study's trials as if nothing had changed; :func:`spec_changes` names what did.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy

from tuner.store.attrs import KL_GUARD_ATTR, OBJECTIVES_ATTR, SPEC_ATTR
from tuner.store.database import StorageError, open_read_only_storage, sqlite_path
from tuner.study.spec import StudySpec
from tuner.study.stored_spec import stored_spec_mapping
from tuner.study.study_file import parse_study
from tuner.study.values import StudySpecError

# The parts of a study file that decide which trials run and how they are judged. The rest (n_trials, timeout,
# storage, heartbeat_interval, trial_timeout, description, processes_per_trial) may change between runs.
FINGERPRINTED = ("objectives", "base", "search_space", "pruner", "sampler", "kl_guard", "constraints", "enqueue",
                 "target", "seed_policy", "trainer", "hacking_guard")
# base fields that say how often a trial saves its checkpoints (tuner.trial.checkpoints), not what it computes: a
# study resumed with another interval runs and judges the same trials.
UNFINGERPRINTED_BASE = ("save_steps", "save_total_limit")


PPO_TUNE_MARKS = (SPEC_ATTR, KL_GUARD_ATTR, OBJECTIVES_ATTR)
"""User attributes ppo-tune sets on every study it creates (the last two already before specs were stored)."""
CREATION_GRACE_S = 10.0
"""How long an empty, unmarked study may wait for its creator to mark it: another ``ppo-tune run`` of the same study
file may have created it a moment ago."""


class StudyChangedError(StudySpecError):
    """The study file no longer matches the study it resumes; one line naming what changed."""


class NotOurStudyError(StudySpecError):
    """A study of the study file's name exists in the storage, and ppo-tune did not create it."""


def check_ours(study: optuna.Study, spec: StudySpec, grace_s: float = CREATION_GRACE_S) -> None:
    """Raise :class:`NotOurStudyError` unless the existing ``study`` is one ppo-tune created (it carries ppo-tune's
    attributes), before anything is written to it: a study of another tool is never modified.

    An empty study without attributes may be one another ``ppo-tune run`` has just created and is about to mark (any
    number of them may start at the same moment): it is given ``grace_s`` to be marked.
    """
    directions = [direction.name.lower() for direction in study.directions]
    deadline = time.monotonic() + grace_s
    while True:
        attrs = study.user_attrs
        if any(mark in attrs for mark in PPO_TUNE_MARKS):
            return
        if directions != list(spec.directions):
            why = f"it has {len(directions)} objective(s), {', '.join(directions)}; the study file " \
                  f"{len(spec.directions)}, {', '.join(spec.directions)}"
            break
        if attrs or study.get_trials(deepcopy=False) or time.monotonic() > deadline:
            why = "it carries no ppo-tune study spec"
            break
        time.sleep(0.2)
    where = sqlalchemy.engine.make_url(spec.storage).render_as_string(hide_password=True)
    raise NotOurStudyError(f"study {spec.name!r} in {where} was not created by ppo-tune ({why}); it is left as it "
                           "is: give the study file another name, or another storage")


def check_existing_is_ours(spec: StudySpec) -> None:
    """Refuse a study of the file's name in an existing SQLite file that ppo-tune did not create, reading the file
    only: opening it to write would switch it to WAL mode, a change to a database that is not ours. (Any other
    storage is checked once opened, before anything is written: ``check_ours`` in ``tuner.run.worker.open_study``.)"""
    try:
        path = sqlite_path(spec.storage)
        storage = open_read_only_storage(spec.storage) if path is not None and path.is_file() else None
    except (StorageError, OSError):
        return  # no study in it to refuse; opening it to write says what is wrong with it
    if storage is None:
        return
    try:
        check_ours(optuna.load_study(study_name=spec.name, storage=storage), spec)
    except KeyError:
        return
    finally:
        storage.engine.dispose()


def _canonical(value: Any) -> Any:
    """The value as JSON would store it (so 1e-5 read from YAML and from the database compare equal)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _show(value: Any) -> str:
    return "unset" if value is None else json.dumps(value, sort_keys=True, default=str)


def spec_changes(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two stored specs, one phrase per changed part; empty when they match.

    Mappings (``base``, ``search_space``, ``pruner``, ``sampler``, ``kl_guard``) are compared key by key, so the
    phrase names the field: ``base.learning_rate 0.0003 -> 0.0001``.

    Example::

        spec_changes({"base": {"seed": 0}}, {"base": {"seed": 1}})  # ["base.seed 0 -> 1"]
    """
    changes = []
    for part in FINGERPRINTED:
        old, new = _canonical(stored.get(part)), _canonical(current.get(part))
        if part == "base" and isinstance(old, dict) and isinstance(new, dict):
            old, new = ({k: v for k, v in base.items() if k not in UNFINGERPRINTED_BASE} for base in (old, new))
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new)):
                if old.get(key) != new.get(key):
                    changes.append(f"{part}.{key} {_show(old.get(key))} -> {_show(new.get(key))}")
        else:
            changes.append(f"{part} {_show(old)} -> {_show(new)}")
    return changes


def record_spec(study: optuna.Study, spec: StudySpec, allow_changes: bool) -> list[str]:
    """Store the spec's mapping on a new study; on a resume, raise :class:`StudyChangedError` naming what changed,
    unless ``allow_changes``, in which case the new mapping is stored and the changes are returned."""
    stored = study.user_attrs.get(SPEC_ATTR)
    current = _canonical(spec.mapping)
    if stored is None:
        study.set_user_attr(SPEC_ATTR, current)
        return []
    changes = spec_changes(stored, current)
    if changes and not allow_changes:
        shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
        raise StudyChangedError(f"study {spec.name!r} in {spec.storage} was created from a different study spec: "
                                f"{shown}. Give the study a new name, or pass --allow-changes to resume it anyway")
    if changes:
        study.set_user_attr(SPEC_ATTR, current)
    return changes


def rebuilt_spec(study: optuna.Study, storage: str) -> StudySpec:
    """The study's spec rebuilt from its stored mapping, on ``storage`` (no study file needed)."""
    mapping = stored_spec_mapping(study.user_attrs)
    if mapping is None:
        raise StudySpecError(f"study {study.study_name!r} has no stored spec (it was created by an older "
                             "ppo-tune); run it once with its study file to store it")
    return parse_study(dict(mapping), Path(f"{study.study_name}.yaml"), storage)
