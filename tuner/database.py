"""Storage URLs: the Optuna RDB storage, set up for several readers and writers at once.

SQLite runs in WAL mode with a busy timeout, so the dashboard reading a study never breaks a
worker writing it; PostgreSQL needs nothing special. Heartbeats let a crashed worker's trial be
failed and retried by the others.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

SQLITE_BUSY_TIMEOUT_S = 60

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


def open_storage(
    url: str,
    heartbeat_interval: int | None = None,
    grace_period: int | None = None,
    max_retry: int | None = 1,
) -> RDBStorage:
    """An Optuna RDB storage; with a heartbeat, stale RUNNING trials are failed and retried ``max_retry`` times."""
    path = sqlite_path(url)
    if path is not None:
        _prepare_sqlite(path)
    heartbeat: dict[str, Any] = {}
    if heartbeat_interval is not None:
        heartbeat = {
            "heartbeat_interval": heartbeat_interval,
            "grace_period": grace_period or 4 * heartbeat_interval,
            "heartbeat_stale_trial_callback": RetryHeartbeatStaleTrialCallback(max_retry=max_retry),
        }
    # Failed trials are reported with their reason by ppo-tune itself; Optuna would add a traceback per trial.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return RDBStorage(url, engine_kwargs=engine_kwargs(url), **heartbeat)


def create_engine(url: str) -> sqlalchemy.Engine:
    """A SQLAlchemy engine on the same database, for the project's own tables."""
    path = sqlite_path(url)
    if path is not None:
        _prepare_sqlite(path)
    return sqlalchemy.create_engine(url, **engine_kwargs(url))
