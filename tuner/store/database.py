"""Storage URLs: the Optuna RDB storage, set up for several readers and writers at once, and opened read-only for
the commands that only read.

SQLite runs in WAL mode with a busy timeout, so the dashboard reading a study never breaks a
worker writing it; PostgreSQL needs nothing special. Heartbeats let a crashed worker's trial be
failed and retried by the others. A storage that cannot be used (an unknown scheme, a path that is a directory, a
file that is not a database, a read-only file system) raises :class:`StorageError`: one line naming it and why.
Reading never changes a database: no tables are created, no WAL switch, and a read-only file system is read as such.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import random
import sqlite3
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import optuna
import sqlalchemy
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from ppo_core.errors import InputError
from tuner.store.attrs import FAIL_REASON_ATTR, STALE_REASON, retry_user_attrs
from tuner.store.messages import one_line

SQLITE_BUSY_TIMEOUT_S = 60
SUPPORTED_STORAGES = "sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DATABASE"
OPTUNA_TABLE = "studies"
"""A table every Optuna storage has: a SQLite file with tables but without this one belongs to something else."""
GRACE_HEARTBEATS = 4
"""Missed heartbeats after which a RUNNING trial's worker counts as dead."""

# Heartbeats and the retry callback are marked experimental in Optuna, but they are the documented way
# to recover a killed worker's trial; the warning would print once per worker per start.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def default_storage_url(study_file: str | Path, name: str) -> str:
    """``sqlite:///<dir of the study file>/<name>.db``: results live beside the study config."""
    return f"sqlite:///{Path(study_file).resolve().parent / (name + '.db')}"


POSTGRES_INSTALL = "pip install 'ppo-tune[postgres]'"
"""What installs the PostgreSQL driver (psycopg), the ``postgres`` extra."""


class StorageError(InputError):
    """A storage that cannot be used as given; one line naming it and why."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


T = TypeVar("T")


def check_storage_url(url: str, in_memory: bool = False) -> None:
    """Raise :class:`StorageError` unless ``url`` names a SQLite file (or, with ``in_memory``, SQLite's in-memory
    database) or a PostgreSQL database; opens nothing."""
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:
        raise StorageError(f"storage: {url!r} is not a database URL; expected {SUPPORTED_STORAGES}") from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise StorageError(f"storage: unsupported scheme {parsed.drivername!r}; expected {SUPPORTED_STORAGES}")
    if backend == "postgresql":
        # Importing the driver connects to nothing; missing, it would surface later as Optuna's "Failed to import DB
        # access module" or a bare ModuleNotFoundError, neither naming what to install.
        try:
            parsed.get_dialect().import_dbapi()
        except ImportError as error:
            # The extra installs psycopg, the driver postgresql:// means; another driver named in the URL is the
            # user's choice to install, or to drop.
            fix = POSTGRES_INSTALL if parsed.drivername in ("postgresql", "postgresql+psycopg") else \
                f"install {error.name or 'it'}, or use postgresql:// with {POSTGRES_INSTALL}"
            raise StorageError(f"storage: {parsed.drivername}: its database driver is not installed ({error}): "
                               f"{fix}") from None
    if backend == "sqlite" and sqlite_path(url) is None and not in_memory:
        # An in-memory database would be a different, empty one in every worker process.
        raise StorageError(f"storage: {url!r} names no database file; expected sqlite:///PATH")


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL, or None for other databases."""
    parsed = sqlalchemy.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def _cannot(path: Path, action: str, error: OSError) -> StorageError:
    return StorageError(f"storage: cannot {action} {path}: {error.strerror or error}")


def _read_only_file_system(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def _why_not_writable(path: Path) -> str:
    return os.strerror(errno.EROFS if _read_only_file_system(path) else errno.EACCES)


def _check_sqlite_database(connection: sqlite3.Connection, path: Path) -> list[str]:
    """The tables of the SQLite database ``path``; raises if the file is not a SQLite database."""
    try:
        return [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    except sqlite3.DatabaseError as error:
        raise StorageError(f"storage: {path} is not a SQLite database ({error})") from None


def _check_optuna_tables(tables: list[str], path: Path) -> None:
    if tables and OPTUNA_TABLE not in tables:
        raise StorageError(f"storage: {path} is a SQLite database of something else (it has no Optuna tables); "
                           "give the study a database of its own")


def retry_while_locked(action: Callable[[], T], deadline_s: float = SQLITE_BUSY_TIMEOUT_S) -> T:
    """``action()``, again after a short random pause while SQLite says the database is locked or another process's
    setup got there first (a table it found missing now exists), until ``deadline_s`` have passed.

    Optuna creates its tables and version rows with a check and then a write, not one atomic step; SQLite's busy
    timeout does not cover every lock (a journal-mode switch while another connection reads). Each step is
    idempotent, so running the setup again once the other process's writes are in is what a lock would have done.
    """
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return action()
        # PostgreSQL reports a table another worker created between the check and the CREATE as a ProgrammingError
        # (DuplicateTable), not as the OperationalError SQLite raises.
        except (sqlite3.OperationalError, sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError,
                sqlalchemy.exc.ProgrammingError, optuna.exceptions.StorageInternalError) as error:
            cause = error.__cause__ if isinstance(error, optuna.exceptions.StorageInternalError) else error
            text = str(cause)
            racing = "locked" in text or "already exists" in text or isinstance(cause, sqlalchemy.exc.IntegrityError)
            if not racing or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.02, 0.2))


def _switch_to_wal(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S)) as connection:
        _check_optuna_tables(_check_sqlite_database(connection, path), path)
        # WAL is a property of the database file: set once, it holds for every later connection.
        if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            connection.execute("PRAGMA journal_mode=WAL")


def _prepare_sqlite(path: Path) -> None:
    """Create the database file if it is missing and switch it to WAL, or raise :class:`StorageError` saying why it
    cannot be (a directory, a name too long, a read-only file system, not a database)."""
    try:
        if path.is_dir():
            raise StorageError(f"storage: {path} is a directory, not a database file")
        if not path.parent.is_dir():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise _cannot(path.parent, "create the directory", error) from None
        if not path.exists():
            # Created here, not by SQLite, for the reason it cannot be (SQLite says only "unable to open"). Never
            # done to an existing file: closing a descriptor of a database this process has open would drop
            # SQLite's locks on it (POSIX locks belong to the process), and two writers would corrupt it.
            try:
                os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666))
            except FileExistsError:
                pass  # another process created it a moment ago
            except OSError as error:
                raise _cannot(path, "create", error) from None
        elif not os.access(path, os.R_OK | os.W_OK):
            raise StorageError(f"storage: cannot write {path}: {_why_not_writable(path)}")
    except OSError as error:  # the name itself, e.g. too long to look up
        raise _cannot(path, "open", error) from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise StorageError(f"storage: cannot write in {path.parent}, where SQLite keeps {path.name}'s journal: "
                           f"{_why_not_writable(path.parent)}")
    try:
        retry_while_locked(lambda: _switch_to_wal(path))
    except sqlite3.OperationalError as error:
        raise StorageError(f"storage: cannot open {path}: {error}") from None


def read_only_url(url: str) -> str:
    """A SQLite URL rewritten to open its file read-only; other URLs unchanged.

    On a read-only file system the file is opened as immutable: nothing can change it there, and SQLite could not
    otherwise read a WAL-mode database (it would need to create the -shm file beside it).
    """
    path = sqlite_path(url)
    if path is None:
        return url
    resolved = path.resolve()
    immutable = "&immutable=1" if _read_only_file_system(resolved.parent) else ""
    return f"sqlite:///file:{quote(str(resolved))}?mode=ro{immutable}&uri=true"


def read_only_engine_kwargs(url: str) -> dict[str, Any]:
    if sqlite_path(url) is not None:
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    if sqlalchemy.engine.make_url(url).get_backend_name() == "postgresql":
        return {"pool_pre_ping": True, "connect_args": {"options": "-c default_transaction_read_only=on"}}
    return {"pool_pre_ping": True}


def open_read_only_engine(url: str) -> sqlalchemy.Engine:
    """A SQLAlchemy engine on the study database that cannot write; raises if a SQLite file is missing."""
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"no study database at {path}")
    return sqlalchemy.create_engine(read_only_url(url), **read_only_engine_kwargs(url))


def check_readable(url: str) -> None:
    """Raise :class:`StorageError` unless ``url`` is a storage a reader can open: a supported scheme and, for SQLite,
    an existing file that is a database with Optuna's tables (or none yet). Reads the file, never writes it."""
    check_storage_url(url)
    path = sqlite_path(url)
    if path is None:
        return
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as error:
        raise _cannot(path, "open", error) from None
    if is_dir:
        raise StorageError(f"storage: {path} is a directory, not a database file")
    if not exists:
        raise StorageError(f"storage: no database at {path}")
    uri = read_only_url(url).removeprefix("sqlite:///")
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)) as connection:
            tables = _check_sqlite_database(connection, path)
    except sqlite3.OperationalError as error:
        raise StorageError(f"storage: cannot read {path}: {error}") from None
    _check_optuna_tables(tables, path)
    if not tables:
        raise StorageError(f"storage: {path} is an empty database: no study was ever stored in it")


def open_read_only_storage(url: str) -> RDBStorage:
    """An Optuna storage on ``url`` that reads and never writes: no tables created, no WAL switch, a SQLite file
    opened read-only (a study in it can be loaded and its trials read; a write fails)."""
    check_readable(url)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        return RDBStorage(read_only_url(url), engine_kwargs=read_only_engine_kwargs(url), skip_table_creation=True)
    except ImportError as error:
        raise StorageError(f"storage: {url.split(':', 1)[0]}: {error}") from None
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.OperationalError) as error:
        # Optuna writes two version rows (its own, then alembic's) just after it makes its tables; read in between
        # (another run creating the database at this moment), a read-only storage tries to write the missing row
        # itself and fails: the first as Optuna's error, the second as SQLAlchemy's.
        cause = error.__cause__ if isinstance(error, optuna.exceptions.StorageInternalError) else error
        if "readonly" not in str(cause):
            raise
        where = sqlite_path(url) or "the database"  # never a URL: it may hold a password
        raise StorageError(f"storage: {where} is being created by another process: no study is stored in it yet") \
            from None


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
    (``_get_stale_trial_ids``): tests/test_tuner/test_study_state.py fails if it stops being called.
    """

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        stale = super()._get_stale_trial_ids(study_id) + self._never_beat(study_id)
        for trial_id in stale:
            with contextlib.suppress(UpdateFinishedTrialError):  # another process failed it first
                self.set_trial_user_attr(trial_id, FAIL_REASON_ATTR, STALE_REASON)
        return stale

    def _never_beat(self, study_id: int) -> list[int]:
        """RUNNING trials that never sent a heartbeat and started more than a grace period ago: a worker stopped
        between Optuna's claim of the trial and its heartbeat thread's first beat, which comes at once in a live one.
        Optuna counts only trials with a heartbeat as stale, so no resume would ever fail these.

        The start is the claiming worker's clock (Optuna's ``datetime_start``), so it is compared with this one's."""
        from optuna.storages._rdb import models  # the heartbeat table, which no public call reads

        grace = datetime.timedelta(seconds=self.grace_period or 2 * (self.heartbeat_interval or 0))
        cutoff = datetime.datetime.now() - grace
        trials, beats = models.TrialModel.__table__.c, models.TrialHeartbeatModel.__table__.c
        query = (sqlalchemy.select(trials.trial_id)
                 .outerjoin(models.TrialHeartbeatModel.__table__, beats.trial_id == trials.trial_id)
                 .where(trials.study_id == study_id, trials.state == TrialState.RUNNING.name,
                        beats.trial_heartbeat_id.is_(None), trials.datetime_start < cutoff))
        with self.engine.connect() as connection:
            return [trial_id for (trial_id,) in connection.execute(query)]


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
    """An Optuna RDB storage that a study can be written to, its database and tables created if missing; with a
    heartbeat, stale RUNNING trials are failed and retried ``max_retry`` times.

    Any number of processes may open a new SQLite file at the same moment: the setup is retried while another one's
    is under way (:func:`retry_while_locked`).
    """
    check_storage_url(url)
    path = sqlite_path(url)
    if path is not None:
        _prepare_sqlite(path)
    # Failed trials are reported with their reason by ppo-tune itself; Optuna would add a traceback per trial.
    optuna.logging.set_verbosity(optuna.logging.ERROR)

    def build() -> RDBStorage:
        if heartbeat_interval is None:
            return RDBStorage(url, engine_kwargs=engine_kwargs(url))
        return HeartbeatStorage(url, engine_kwargs=engine_kwargs(url), heartbeat_interval=heartbeat_interval,
                                grace_period=GRACE_HEARTBEATS * heartbeat_interval,
                                heartbeat_stale_trial_callback=RetryStaleTrial(max_retry))

    try:
        storage = retry_while_locked(build) if path is not None else build()
    except ImportError as error:  # a driver check_storage_url could not foresee
        raise StorageError(f"storage: {url.split(':', 1)[0]}: {error} ({POSTGRES_INSTALL})") from None
    if path is not None:
        serialise_sqlite_transactions(storage.engine)
    return storage


def create_engine(url: str) -> sqlalchemy.Engine:
    """A SQLAlchemy engine on the same database, for the project's own tables."""
    check_storage_url(url)
    path = sqlite_path(url)
    if path is not None:
        _prepare_sqlite(path)
    return sqlalchemy.create_engine(url, **engine_kwargs(url))
