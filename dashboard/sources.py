"""Where the studies are, and read-only connections to them.

The dashboard never writes: SQLite files are opened with ``mode=ro`` (a write fails instead of
locking out a worker; WAL lets readers and the writer go on side by side), PostgreSQL sessions are
``default_transaction_read_only``, and Optuna's storage is told not to create tables.
"""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import optuna
import sqlalchemy
from optuna.storages import RDBStorage

from tuner.paths import DEFAULT_STUDIES_DIR, discover_storage_urls
from tuner.storage import SQLITE_BUSY_TIMEOUT_S, sqlite_path

STORAGE_ENV = "PPO_TUNE_STORAGE"


@dataclass(frozen=True, order=True)
class StudyRef:
    """One study in one storage."""

    url: str
    name: str

    def label(self, several_storages: bool) -> str:
        """The picker's text: the study name, with its database file when several are open."""
        if not several_storages:
            return self.name
        path = sqlite_path(self.url)
        return f"{self.name} ({path.name if path else sqlalchemy.engine.make_url(self.url).database})"


def parse_app_args(argv: Sequence[str]) -> str | None:
    """The ``--storage`` given after ``--`` on ``streamlit run dashboard/app.py -- --storage URL``."""
    parser = argparse.ArgumentParser(prog="dashboard/app.py", add_help=False, allow_abbrev=False)
    parser.add_argument("--storage", default=None)
    known, _ = parser.parse_known_args(list(argv))
    return known.storage


def storage_urls(explicit: str | None = None, studies_dir: Path = DEFAULT_STUDIES_DIR) -> list[str]:
    """The storage given (argument, then ``$PPO_TUNE_STORAGE``), else every ``studies/*.db`` like the CLI."""
    chosen = explicit or os.environ.get(STORAGE_ENV)
    if chosen:
        return [chosen]
    return discover_storage_urls(studies_dir)


def read_only_url(url: str) -> str:
    """A SQLite URL rewritten to open its file read-only; other URLs unchanged."""
    path = sqlite_path(url)
    if path is None:
        return url
    return f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"


def read_only_engine_kwargs(url: str) -> dict[str, Any]:
    if sqlite_path(url) is not None:
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    if sqlalchemy.engine.make_url(url).get_backend_name() == "postgresql":
        return {"pool_pre_ping": True, "connect_args": {"options": "-c default_transaction_read_only=on"}}
    return {"pool_pre_ping": True}


def open_read_only_engine(url: str) -> sqlalchemy.Engine:
    """A SQLAlchemy engine on the study database that cannot write."""
    return sqlalchemy.create_engine(read_only_url(url), **read_only_engine_kwargs(url))


def open_read_only_storage(url: str) -> RDBStorage:
    """Optuna's storage on the same database, without creating tables; raises if it is no Optuna database."""
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"no study database at {path}")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RDBStorage(read_only_url(url), engine_kwargs=read_only_engine_kwargs(url), skip_table_creation=True)


def study_names(storage: RDBStorage) -> list[str]:
    return sorted(optuna.get_all_study_names(storage))
