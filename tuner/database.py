"""Storage URLs: the Optuna RDB storage, set up for several readers and writers at once.

SQLite runs in WAL mode with a busy timeout, so the dashboard reading a study never breaks a
worker writing it; PostgreSQL needs nothing special. Heartbeats let a crashed worker's trial be
failed and retried by the others.
"""

from __future__ import annotations

import contextlib
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import FAIL_REASON_ATTR, STALE_REASON, retry_user_attrs

SQLITE_BUSY_TIMEOUT_S = 60
GRACE_HEARTBEATS = 4
"""Missed heartbeats after which a RUNNING trial's worker counts as dead."""

# Heartbeats and the retry callback are marked experimental in Optuna, but they are the documented way
# to recover a killed worker's trial; the warning would print once per worker per start.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def default_storage_url(study_file: str | Path, name: str) -> str:
    """``sqlite:///<dir of the study file>/<name>.db``: results live beside the study config."""
    return f"sqlite:///{Path(study_file).resolve().parent / (name + '.db')}"


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL, or None for other databases."""
    parsed = sqlalchemy.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def _prepare_sqlite(path: Path) -> None:
    # WAL is a property of the database file: set once, it holds for every later connection.
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S) as connection:
        connection.execute("PRAGMA journal_mode=WAL")


def engine_kwargs(url: str) -> dict[str, Any]:
    if sqlite_path(url) is not None:
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    return {"pool_pre_ping": True}


class RetryStaleTrial:
    """Queue a stale trial again (at most ``max_retry`` times in a chain of retries), carrying only what says what
    to run: Optuna's own callback copies every user attribute, the dead attempt's KL history and reasons too."""

    def __init__(self, max_retry: int) -> None:
        self.max_retry = max_retry

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        history = [*trial.system_attrs.get("retry_history", []), trial.number]
        if len(history) > self.max_retry:
            return
        study.add_trial(optuna.trial.create_trial(
            state=TrialState.WAITING, params=trial.params, distributions=trial.distributions,
            user_attrs=retry_user_attrs(trial.user_attrs, trial.number),
            system_attrs={"failed_trial": trial.number, "retry_history": history},
        ))


class HeartbeatStorage(RDBStorage):
    """RDBStorage whose stale trials say why they failed.

    Optuna fails a trial whose worker stopped sending heartbeats (in ``optuna.storages.fail_stale_trials``, which
    every worker runs before each trial and ``ppo-tune run`` runs on a resume) without a reason; the reason is set
    here, while the trial is still RUNNING and can take one. This overrides a private method of Optuna's
    (``_get_stale_trial_ids``): tests/test_study_state.py fails if it stops being called.
    """

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        stale = super()._get_stale_trial_ids(study_id)
        for trial_id in stale:
            with contextlib.suppress(UpdateFinishedTrialError):  # another process failed it first
                self.set_trial_user_attr(trial_id, FAIL_REASON_ATTR, STALE_REASON)
        return stale


def serialise_sqlite_transactions(engine: sqlalchemy.Engine) -> None:
    """Make every transaction on a SQLite ``engine`` take the write lock when it begins (``BEGIN IMMEDIATE``).

    pysqlite reads outside any transaction until the first write, so Optuna's claim of a queued trial (read it is
    WAITING, then set it RUNNING) is not atomic on SQLite: two workers could both claim it and both run it. With
    the lock taken at BEGIN, the read and the write are one step. (SQLAlchemy's documented pysqlite recipe;
    PostgreSQL's SELECT ... FOR UPDATE already does this.)
    """

    @sqlalchemy.event.listens_for(engine, "connect")
    def _no_implicit_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @sqlalchemy.event.listens_for(engine, "begin")
    def _begin_immediate(connection: sqlalchemy.Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners would go on beginning lazily


def open_storage(
    url: str,
    heartbeat_interval: int | None = None,
    max_retry: int = 1,
) -> RDBStorage:
    """An Optuna RDB storage; with a heartbeat, stale RUNNING trials are failed and retried ``max_retry`` times."""
    path = sqlite_path(url)
    if path is not None:
        _prepare_sqlite(path)
    # Failed trials are reported with their reason by ppo-tune itself; Optuna would add a traceback per trial.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if heartbeat_interval is None:
        storage = RDBStorage(url, engine_kwargs=engine_kwargs(url))
    else:
        storage = HeartbeatStorage(url, engine_kwargs=engine_kwargs(url), heartbeat_interval=heartbeat_interval,
                                   grace_period=GRACE_HEARTBEATS * heartbeat_interval,
                                   heartbeat_stale_trial_callback=RetryStaleTrial(max_retry))
    if path is not None:
        serialise_sqlite_transactions(storage.engine)
    return storage


def create_engine(url: str) -> sqlalchemy.Engine:
    """A SQLAlchemy engine on the same database, for the project's own tables."""
    path = sqlite_path(url)
    if path is not None:
        _prepare_sqlite(path)
    return sqlalchemy.create_engine(url, **engine_kwargs(url))
