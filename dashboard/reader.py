"""Reads one study incrementally: trials through Optuna, per-update metrics and samples from the store.

A reader lives as long as the dashboard process (Streamlit keeps it as a resource), so a refresh
of a running study reads only what is new: Optuna's cached storage re-reads unfinished trials only,
and the store's rows, which are only ever appended, are fetched past the last row id seen. A
refresh reads the trials and only the newest row ids of the store; the rows themselves are read
when a page asks for them, so the trial table opens without decoding every update of every trial.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
import pandas as pd
import sqlalchemy
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial

from dashboard.sources import StudyRef
from tuner.store import METRIC_KEYS, decode_metric_rows, metrics_table, samples_table

SAMPLE_COLUMNS = [c.name for c in samples_table.c if c.name not in ("id", "study_name")]


@dataclass(frozen=True)
class Snapshot:
    """The study's trials at one refresh; ``token`` changes when they or the stored rows change."""

    token: str
    study: optuna.Study
    trials: tuple[FrozenTrial, ...]
    user_attrs: dict[str, Any]
    system_attrs: dict[str, Any]


def decode_metrics(rows: list[Any]) -> pd.DataFrame:
    """Rows of (id, trial_id, trial_number, update, episode, metrics JSON): the store's decoder, id dropped."""
    return decode_metric_rows([row[1:] for row in rows])


class _AppendOnlyRows:
    """Rows of one store table for one study, fetched past the last id seen."""

    def __init__(
        self, table: sqlalchemy.Table, columns: list[str], decode: Callable[[list[Any]], pd.DataFrame],
        order: list[str],
    ) -> None:
        self.table = table
        self.columns = [table.c.id, *(table.c[name] for name in columns)]
        self.decode = decode
        self.order = order
        self.last_id = 0
        self.frame: pd.DataFrame | None = None

    def newest_id(self, connection: sqlalchemy.Connection, study_name: str) -> int:
        """The newest row's id: cheap (the study index), and it changes whenever a row is added."""
        query = sqlalchemy.select(sqlalchemy.func.max(self.table.c.id)).where(self.table.c.study_name == study_name)
        return int(connection.execute(query).scalar() or 0)

    def refresh(self, connection: sqlalchemy.Connection, study_name: str) -> pd.DataFrame:
        query = sqlalchemy.select(*self.columns).where(
            (self.table.c.study_name == study_name) & (self.table.c.id > self.last_id)
        ).order_by(self.table.c.id)
        rows = connection.execute(query).all()
        if rows or self.frame is None:
            new = self.decode(rows)
            if rows:
                self.last_id = int(rows[-1][0])
            # Each refresh builds a new frame, so a snapshot handed out earlier never changes under a reader.
            old = self.frame
            combined = new if old is None or old.empty else pd.concat([old, new], ignore_index=True)
            self.frame = combined.sort_values(self.order, kind="stable").reset_index(drop=True)
        return self.frame


def _decode_samples(rows: list[Any]) -> pd.DataFrame:
    return pd.DataFrame([row[1:] for row in rows], columns=SAMPLE_COLUMNS)


class StudyReader:
    """One study's data, refreshed on demand; safe to share between Streamlit sessions."""

    def __init__(self, ref: StudyRef, storage: RDBStorage, engine: sqlalchemy.Engine) -> None:
        self.ref = ref
        self.engine = engine
        self.storage = storage
        self.study = optuna.load_study(study_name=ref.name, storage=storage)
        self.study_id = storage.get_study_id_from_name(ref.name)
        self._lock = threading.Lock()
        self._metrics = _AppendOnlyRows(
            metrics_table, ["trial_id", "trial_number", "update", "episode", "metrics"], decode_metrics,
            ["trial_number", "update"],
        )
        self._samples = _AppendOnlyRows(samples_table, SAMPLE_COLUMNS, _decode_samples,
                                        ["trial_number", "update", "prompt_index"])
        self._has_store = False
        self._snapshot: Snapshot | None = None

    def _store_exists(self) -> bool:
        # A study made by Optuna alone, or one whose first worker has not created the tables yet, has none.
        if not self._has_store:
            self._has_store = sqlalchemy.inspect(self.engine).has_table(metrics_table.name)
        return self._has_store

    def refresh(self) -> Snapshot:
        """Read the trials and the store's newest row ids; return the snapshot and its token."""
        with self._lock:
            trials = tuple(self.study.get_trials(deepcopy=False))
            ids = (0, 0)
            if self._store_exists():
                with self.engine.connect() as connection:
                    ids = (self._metrics.newest_id(connection, self.ref.name),
                           self._samples.newest_id(connection, self.ref.name))
            # Study attributes (the KL guard) are read through the storage: Optuna 5's Study has no system_attrs.
            user_attrs = self.storage.get_study_user_attrs(self.study_id)
            system_attrs = self.storage.get_study_system_attrs(self.study_id)
            self._snapshot = Snapshot(change_token(trials, *ids), self.study, trials, user_attrs, system_attrs)
            return self._snapshot

    def current(self) -> Snapshot:
        """The last snapshot (refreshing once if there is none yet)."""
        return self._snapshot or self.refresh()

    def metrics(self) -> pd.DataFrame:
        """Every stored update of every trial (one column per metric), reading only the rows not seen yet."""
        return self._rows(self._metrics, METRIC_KEYS)

    def samples(self) -> pd.DataFrame:
        """Every stored sample generation, reading only the rows not seen yet."""
        return self._rows(self._samples, SAMPLE_COLUMNS)

    def _rows(self, rows: _AppendOnlyRows, empty_columns: list[str]) -> pd.DataFrame:
        with self._lock:
            if not self._store_exists():
                return pd.DataFrame(columns=empty_columns)
            with self.engine.connect() as connection:
                return rows.refresh(connection, self.ref.name)


def change_token(trials: tuple[FrozenTrial, ...], metrics_id: int, samples_id: int) -> str:
    """A short string that changes when a trial is added or changes state, or a metric or sample is stored."""
    states = "".join(str(trial.state.value) for trial in trials)
    digest = hashlib.blake2b(states.encode(), digest_size=6).hexdigest()
    return f"{len(trials)}-{digest}-{metrics_id}-{samples_id}"
