"""Optuna's own tables read with plain SQL, read-only: a study's trials as :class:`~optuna.trial.FrozenTrial`
objects, read incrementally, and an in-memory :class:`optuna.Study` over them for the code that wants a Study.

Why not ``optuna.load_study(...).get_trials()``: Optuna's RDB storage builds every trial through the ORM, one
object per parameter, attribute and intermediate value; for 200 trials of 200 updates that is a second of
a cold page open. Selecting the same columns and building the FrozenTrials directly takes a fraction of it.
The rows are turned into Python values as ``optuna.storages.RDBStorage`` does (same enums, the same
naive-UTC-to-local datetimes, the same JSON), and ``tests/test_dashboard/test_dashboard_reader.py`` checks the result
against ``optuna.load_study`` on SQLite and PostgreSQL.

The tables below name only the columns read, with plain types: on PostgreSQL Optuna's enums are native
enum types, which come back as their names; nothing here filters on them, since comparing a native enum
with a text parameter is an error there. The schema is the one Optuna has kept since v3.0 (the
``value_type`` columns); an older database fails with the database's "no such column" error.

Example::

    engine = sqlalchemy.create_engine(url)
    with engine.connect() as connection:
        record = read_study(connection, "my-study")
        trials = TrialCache(record.study_id)
        study = snapshot_study(record, trials.refresh(connection))
    print(study.best_trial.params)
"""

from __future__ import annotations

import copy
import datetime
import functools
import hashlib
import json
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import optuna
import orjson
import sqlalchemy
from optuna.distributions import BaseDistribution, json_to_distribution
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.study._frozen import FrozenStudy  # BaseStorage.get_all_studies returns it; Optuna exports it nowhere
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table, Text

_METADATA = MetaData()
STUDIES = Table("studies", _METADATA, Column("study_id", Integer), Column("study_name", String))
STUDY_DIRECTIONS = Table("study_directions", _METADATA, Column("study_id", Integer), Column("objective", Integer),
                         Column("direction", String))
STUDY_USER_ATTRS = Table("study_user_attributes", _METADATA, Column("study_user_attribute_id", Integer),
                         Column("study_id", Integer), Column("key", String), Column("value_json", Text))
STUDY_SYSTEM_ATTRS = Table("study_system_attributes", _METADATA, Column("study_system_attribute_id", Integer),
                           Column("study_id", Integer), Column("key", String), Column("value_json", Text))
TRIALS = Table("trials", _METADATA, Column("trial_id", Integer), Column("number", Integer),
               Column("study_id", Integer), Column("state", String), Column("datetime_start", DateTime),
               Column("datetime_complete", DateTime))
TRIAL_PARAMS = Table("trial_params", _METADATA, Column("param_id", Integer), Column("trial_id", Integer),
                     Column("param_name", String), Column("param_value", Float), Column("distribution_json", Text))
TRIAL_VALUES = Table("trial_values", _METADATA, Column("trial_id", Integer), Column("objective", Integer),
                     Column("value", Float), Column("value_type", String))
TRIAL_USER_ATTRS = Table("trial_user_attributes", _METADATA, Column("trial_user_attribute_id", Integer),
                         Column("trial_id", Integer), Column("key", String), Column("value_json", Text))
TRIAL_SYSTEM_ATTRS = Table("trial_system_attributes", _METADATA, Column("trial_system_attribute_id", Integer),
                           Column("trial_id", Integer), Column("key", String), Column("value_json", Text))
TRIAL_INTERMEDIATE = Table("trial_intermediate_values", _METADATA, Column("trial_id", Integer),
                           Column("step", Integer), Column("intermediate_value", Float),
                           Column("intermediate_value_type", String))

UNFINISHED = (TrialState.RUNNING, TrialState.WAITING)
# How Optuna stores values a float column cannot hold (TrialValueModel / TrialIntermediateValueModel).
_SPECIAL_FLOATS = {"INF_POS": float("inf"), "INF_NEG": float("-inf"), "NAN": float("nan")}


def _stored_float(value: float | None, value_type: str) -> float:
    if value_type in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[value_type]
    assert value is not None, "Optuna stores every finite value"
    return float(value)


def _json(text: str) -> Any:
    # orjson is several times faster; Python's json writes NaN and Infinity, which only Python's json reads back.
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


@functools.lru_cache(maxsize=1024)
def _distribution(text: str) -> BaseDistribution:
    # Every trial of a study stores the same few distributions; parse each once.
    return json_to_distribution(text)


def _local(utc: datetime.datetime | None) -> datetime.datetime | None:
    """Optuna stores naive UTC and hands out naive local time (TrialModel.datetime_start)."""
    if utc is None:
        return None
    return utc.replace(tzinfo=datetime.timezone.utc).astimezone().replace(tzinfo=None)


def study_names(connection: sqlalchemy.Connection) -> list[str]:
    """Every study in the database, sorted."""
    query = sqlalchemy.select(STUDIES.c.study_name).order_by(STUDIES.c.study_name)
    return [str(name) for name in connection.execute(query).scalars()]


@dataclass(frozen=True)
class StudyRecord:
    """One study's row and its study-level attributes, at one read."""

    study_id: int
    name: str
    directions: tuple[StudyDirection, ...]
    user_attrs: dict[str, Any]
    system_attrs: dict[str, Any]
    attrs_key: str = ""  # a digest of the attributes as stored: changes exactly when one does


def _attrs(connection: sqlalchemy.Connection, table: Table, study_id: int) -> list[tuple[str, str]]:
    # In the order they were set, on every database.
    query = sqlalchemy.select(table.c.key, table.c.value_json).where(table.c.study_id == study_id).order_by(
        table.c[f"{table.name[:-1]}_id"])
    return [(str(key), str(value)) for key, value in connection.execute(query)]


def read_study(connection: sqlalchemy.Connection, name: str) -> StudyRecord:
    """The study called ``name``; raises KeyError (as Optuna does) when there is none."""
    study_id = connection.execute(
        sqlalchemy.select(STUDIES.c.study_id).where(STUDIES.c.study_name == name)).scalar()
    if study_id is None:
        raise KeyError(f"no study named {name!r} in this storage")
    directions = connection.execute(
        sqlalchemy.select(STUDY_DIRECTIONS.c.direction).where(STUDY_DIRECTIONS.c.study_id == study_id)
        .order_by(STUDY_DIRECTIONS.c.objective)).scalars()
    user, system = _attrs(connection, STUDY_USER_ATTRS, study_id), _attrs(connection, STUDY_SYSTEM_ATTRS, study_id)
    key = hashlib.blake2b(repr((user, system)).encode(), digest_size=6).hexdigest()
    return StudyRecord(int(study_id), name, tuple(StudyDirection[str(d)] for d in directions),
                       {k: _json(v) for k, v in user}, {k: _json(v) for k, v in system}, key)


@dataclass
class _TrialRows:
    """One trial's rows from every table, gathered before the FrozenTrial is built."""

    number: int
    state: TrialState
    start: datetime.datetime | None
    complete: datetime.datetime | None
    values: dict[int, float]
    params: list[tuple[int, str, float, str]]  # (param_id, name, stored value, distribution JSON)
    user_attrs: dict[str, Any]
    system_attrs: dict[str, Any]
    intermediate: dict[int, float]
    # Every row as read, for the fingerprint of an unfinished trial (None for a finished one, which never changes).
    raw: list[Sequence[Any]] | None = None

    def fingerprint(self) -> str:
        """A digest of the rows as stored: equal exactly when nothing changed (unlike the decoded values, where
        NaN is never equal to itself)."""
        text = repr((self.state.name, self.start, self.complete, self.raw))
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def keep(self, row: Sequence[Any]) -> None:
        if self.raw is not None:
            self.raw.append(row)

    def frozen(self, trial_id: int) -> FrozenTrial:
        params = sorted(self.params)  # in the order they were suggested, as Optuna gives them
        distributions = {name: _distribution(text) for _, name, _, text in params}
        return FrozenTrial(
            number=self.number, state=self.state, value=None,
            values=[self.values[i] for i in sorted(self.values)] if self.values else None,
            datetime_start=_local(self.start), datetime_complete=_local(self.complete),
            params={name: distributions[name].to_external_repr(value) for _, name, value, _ in params},
            distributions=distributions, user_attrs=self.user_attrs, system_attrs=self.system_attrs,
            intermediate_values=self.intermediate, trial_id=trial_id,
        )


class TrialCache:
    """A study's trials, kept between refreshes: each refresh reads the trials past the last trial id seen and
    those that were unfinished at the last one (a finished trial never changes), as Optuna's cached storage does.
    """

    def __init__(self, study_id: int) -> None:
        self.study_id = study_id
        self._trials: dict[int, FrozenTrial] = {}  # by trial id, in trial id order (Optuna's order)
        self._last_id = -1
        self._unfinished: dict[int, str] = {}  # trial id -> fingerprint of its rows at the last read
        self._snapshot: tuple[FrozenTrial, ...] = ()

    @property
    def unfinished_key(self) -> str:
        """Changes when an unfinished trial's rows do (a new intermediate value or attribute), for change tokens."""
        text = ",".join(f"{trial_id}:{key}" for trial_id, key in sorted(self._unfinished.items()))
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest() if text else ""

    def refresh(self, connection: sqlalchemy.Connection) -> tuple[FrozenTrial, ...]:
        """Every trial, re-reading the new and the unfinished ones (a running trial's intermediate values and
        attributes grow without a change of state); the same tuple when none of them changed."""
        wanted = TRIALS.c.trial_id > self._last_id
        if self._unfinished:
            wanted = wanted | TRIALS.c.trial_id.in_(sorted(self._unfinished))
        chosen = (TRIALS.c.study_id == self.study_id) & wanted
        # The trials' own rows first, their other rows after: a trial that finishes in between is read as
        # unfinished, with some finished rows, and so is read again next time. The other way round, it could be
        # read as finished with its last values missing, and never again.
        trial_rows = connection.execute(
            sqlalchemy.select(TRIALS.c.trial_id, TRIALS.c.number, TRIALS.c.state, TRIALS.c.datetime_start,
                              TRIALS.c.datetime_complete).where(chosen)).all()
        if not trial_rows:  # no new trial, none unfinished: nothing can have changed
            return self._snapshot
        rows = {int(trial_id): _TrialRows(int(number), TrialState[str(state)], start, complete, {}, [], {}, {}, {})
                for trial_id, number, state, start, complete in trial_rows}
        for read in rows.values():
            if read.state in UNFINISHED:
                read.raw = []
        ids = sqlalchemy.select(TRIALS.c.trial_id).where(chosen).scalar_subquery()
        self._read_children(connection, ids, rows)
        changed = False
        for trial_id in sorted(rows):
            read = rows[trial_id]
            fingerprint = read.fingerprint() if read.raw is not None else ""
            if fingerprint and self._unfinished.get(trial_id) == fingerprint:
                continue  # still running, nothing new: keep the trial already built
            self._trials[trial_id] = read.frozen(trial_id)
            changed = True
            if read.state in UNFINISHED:
                self._unfinished[trial_id] = fingerprint
            else:
                self._unfinished.pop(trial_id, None)
        self._last_id = max(self._last_id, *rows)
        if changed:
            self._snapshot = tuple(self._trials.values())
        return self._snapshot

    @staticmethod
    def _read_children(connection: sqlalchemy.Connection, ids: Any, rows: dict[int, _TrialRows]) -> None:
        # A trial created after the trials' rows were read has rows here too; it is read whole next time.
        def select(*columns: Any, order: Any) -> Iterable[Sequence[Any]]:
            # Ordered, so that a trial's attributes keep the order they were set in on every database.
            query = sqlalchemy.select(*columns).where(columns[0].in_(ids)).order_by(order)
            return connection.execute(query).all()

        t = TRIAL_VALUES.c
        for trial_id, objective, value, value_type in select(t.trial_id, t.objective, t.value, t.value_type,
                                                             order=t.objective):
            if trial_id in rows:
                rows[trial_id].values[objective] = _stored_float(value, value_type)
                rows[trial_id].keep((objective, value, value_type))
        p = TRIAL_PARAMS.c
        for trial_id, param_id, name, value, text in select(p.trial_id, p.param_id, p.param_name, p.param_value,
                                                            p.distribution_json, order=p.param_id):
            if trial_id in rows:
                rows[trial_id].params.append((param_id, name, value, text))
                rows[trial_id].keep((param_id, name, value, text))
        for table, kind in ((TRIAL_USER_ATTRS, "user_attrs"), (TRIAL_SYSTEM_ATTRS, "system_attrs")):
            for trial_id, key, value in select(table.c.trial_id, table.c.key, table.c.value_json,
                                               order=table.c[f"{table.name[:-1]}_id"]):
                if trial_id in rows:
                    getattr(rows[trial_id], kind)[key] = _json(value)
                    rows[trial_id].keep((kind, key, value))
        i = TRIAL_INTERMEDIATE.c
        for trial_id, step, value, value_type in select(i.trial_id, i.step, i.intermediate_value,
                                                        i.intermediate_value_type, order=i.step):
            if trial_id in rows:
                rows[trial_id].intermediate[step] = _stored_float(value, value_type)
                rows[trial_id].keep((step, value, value_type))


class SnapshotStorage(BaseStorage):
    """One study's trials as read at one refresh, behind Optuna's storage interface so that ``optuna.Study``,
    its best trials and ``optuna.visualization`` work on them. Read-only: every write raises."""

    def __init__(self, record: StudyRecord, trials: Sequence[FrozenTrial]) -> None:
        self.record = record
        self.trials = list(trials)
        self._by_id = {trial._trial_id: trial for trial in self.trials}

    def _check(self, study_id: int) -> None:
        if study_id != self.record.study_id:
            raise KeyError(f"no study with id {study_id} in this snapshot")

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError("the dashboard reads studies; it never writes them")

    create_new_study = delete_study = set_study_user_attr = set_study_system_attr = _read_only
    create_new_trial = set_trial_param = set_trial_state_values = set_trial_intermediate_value = _read_only
    set_trial_user_attr = set_trial_system_attr = _read_only

    def get_study_id_from_name(self, study_name: str) -> int:
        if study_name != self.record.name:
            raise KeyError(f"no study named {study_name!r} in this snapshot")
        return self.record.study_id

    def get_study_name_from_id(self, study_id: int) -> str:
        self._check(study_id)
        return self.record.name

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        self._check(study_id)
        return list(self.record.directions)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        self._check(study_id)
        return dict(self.record.user_attrs)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        self._check(study_id)
        return dict(self.record.system_attrs)

    def get_all_studies(self) -> list[FrozenStudy]:
        record = self.record
        return [FrozenStudy(record.name, None, dict(record.user_attrs), dict(record.system_attrs), record.study_id,
                            directions=list(record.directions))]

    def get_trial(self, trial_id: int) -> FrozenTrial:
        if trial_id not in self._by_id:
            raise KeyError(f"no trial with id {trial_id} in this snapshot")
        return self._by_id[trial_id]

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        self._check(study_id)
        for trial in self.trials:
            if trial.number == trial_number:
                return trial._trial_id
        raise KeyError(f"no trial number {trial_number} in this snapshot")

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        self._check(study_id)
        trials = self.trials if states is None else [t for t in self.trials if t.state in states]
        # The trials are shared by every snapshot of the reader: a caller that may change them gets copies.
        return copy.deepcopy(trials) if deepcopy else list(trials)


def snapshot_study(record: StudyRecord, trials: Sequence[FrozenTrial]) -> optuna.Study:
    """An ``optuna.Study`` over the trials read, for ``tuner.study.reports``, edge findings and Optuna's plots."""
    # RandomSampler: the dashboard never asks this study for a trial, and TPE's would be wasted work.
    return optuna.Study(record.name, SnapshotStorage(record, trials), sampler=optuna.samplers.RandomSampler())
