"""Reading a study, read-only: where the studies are, connections that cannot write, an incremental reader,
and the study as the pages see it (:class:`StudyView`). Nothing here knows about Streamlit.

The dashboard never writes: SQLite files are opened with ``mode=ro`` (a write fails instead of
locking out a worker; WAL lets readers and the writer go on side by side) and PostgreSQL sessions are
``default_transaction_read_only``. Optuna's tables are read with plain SQL (``dashboard.optuna_tables``):
Optuna's own storage builds every trial through its ORM, which costs a second per cold open of a big study.

A :class:`StudyReader` lives as long as the dashboard process (Streamlit keeps it as a resource), so a
refresh of a running study reads only what is new: the trials past the last trial id and the unfinished
ones, and the store's rows, which are only ever appended, past the last row id seen. A refresh reads the
trials and only the newest row ids of the store; the rows themselves are read when a page asks for them,
so the trial table opens without decoding every update of every trial.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import sqlalchemy
from optuna.trial import FrozenTrial, TrialState

from dashboard.optuna_tables import TrialCache, read_study, snapshot_study
from dashboard.optuna_tables import study_names as table_study_names
from dashboard.serve import STORAGE_ENV
from tuner.search.frontier_aim import aim_words
from tuner.search.frontier_sampler import AIM_ATTR
from tuner.store.attrs import CONFIG_ATTR, KL_GUARD_ATTR, KL_HISTORY_ATTR
from tuner.store.database import open_read_only_engine, sqlite_path
from tuner.store.default_storage import DEFAULT_STUDIES_DIR
from tuner.store.default_storage import storage_urls as tuner_storage_urls
from tuner.store.records import METRIC_KEYS, decode_metric_rows, metrics_table, samples_table
from tuner.study.constraints import Constraint, feasible
from tuner.study.edge_findings import EdgeFinding, edge_findings
from tuner.study.reports import trials_frame
from tuner.study.spec import KLGuard, Objective
from tuner.study.stored_spec import StoredSpec, read_stored_spec
from tuner.study.winner import BestFigure, Winner, read_winner

PARAM_PREFIX = "param:"  # how tuner.study.reports.trials_frame names the searched parameters' columns
SAMPLE_COLUMNS = [c.name for c in samples_table.c if c.name not in ("id", "study_name")]
STATE_ORDER = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


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


def storage_urls(explicit: str | None = None, studies_dir: Path = DEFAULT_STUDIES_DIR) -> list[str]:
    """The storage given (argument, then ``$PPO_TUNE_STORAGE``), else every ``studies/*.db`` like the CLI."""
    return tuner_storage_urls(explicit or os.environ.get(STORAGE_ENV), studies_dir)


def safe_url(url: str) -> str:
    """The URL with any password masked, for display."""
    return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)


def study_names(engine: sqlalchemy.Engine) -> list[str]:
    """The studies in the database, sorted; raises if it has no Optuna tables."""
    with engine.connect() as connection:
        if not sqlalchemy.inspect(connection).has_table("studies"):
            raise LookupError("no Optuna study tables in this database")
        return table_study_names(connection)


@dataclass(frozen=True)
class Snapshot:
    """The study's trials at one refresh; ``token`` changes when they or the stored rows change."""

    token: str
    study: optuna.Study
    trials: tuple[FrozenTrial, ...]
    user_attrs: dict[str, Any]
    system_attrs: dict[str, Any]


def decode_metrics(rows: Sequence[Sequence[Any]]) -> pd.DataFrame:
    """Rows of (trial_id, trial_number, update, episode, metrics JSON, id): the store's decoder, which reads the
    first five columns, so the trailing id needs no copy of every row to drop it."""
    return decode_metric_rows(rows)


def _decode_samples(rows: Sequence[Sequence[Any]]) -> pd.DataFrame:
    # Plain tuples: pandas builds a frame from SQLAlchemy's rows about twice as slowly.
    return pd.DataFrame([tuple(row) for row in rows], columns=[*SAMPLE_COLUMNS, "id"]).drop(columns="id")


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """No cyclic garbage collection while a read builds tens of thousands of dicts and tuples: none of them is in a
    cycle, yet their number sets off full collections over everything alive (about a sixth of a first read)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:  # found off (by another read, or by the program): whoever turned it off turns it on
            gc.enable()


class _AppendOnlyRows:
    """Rows of one store table for one study, fetched past the last id seen; the id comes last in each row
    (slicing it off the front of 40,000 SQLAlchemy rows costs a tenth of a second)."""

    def __init__(
        self, table: sqlalchemy.Table, columns: list[str], decode: Callable[[Sequence[Sequence[Any]]], pd.DataFrame],
        order: list[str],
    ) -> None:
        self.table = table
        self.columns = [*(table.c[name] for name in columns), table.c.id]
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
                self.last_id = int(rows[-1][-1])
            # Each refresh builds a new frame, so a snapshot handed out earlier never changes under a reader.
            old = self.frame
            combined = new if old is None or old.empty else pd.concat([old, new], ignore_index=True)
            self.frame = combined.sort_values(self.order, kind="stable").reset_index(drop=True)
        return self.frame


class StudyReader:
    """One study's data, refreshed on demand; safe to share between Streamlit sessions."""

    def __init__(self, ref: StudyRef, engine: sqlalchemy.Engine) -> None:
        self.ref = ref
        self.engine = engine
        with engine.connect() as connection:
            self.study_id = read_study(connection, ref.name).study_id  # KeyError if there is no such study
        self._trials = TrialCache(self.study_id)
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
        """Read what changed in the trials, the study's attributes and the store's newest row ids; return the
        snapshot and its token (the same snapshot when nothing changed)."""
        with self._lock:
            store = self._store_exists()
            with self.engine.connect() as connection:
                record = read_study(connection, self.ref.name)  # the study's attributes may change as it runs
                with _no_cyclic_gc():
                    trials = self._trials.refresh(connection)
                ids = (self._metrics.newest_id(connection, self.ref.name),
                       self._samples.newest_id(connection, self.ref.name)) if store else (0, 0)
            token = change_token(trials, *ids, self._trials.unfinished_key + record.attrs_key)
            last = self._snapshot
            if last is not None and last.trials is trials and last.token == token:
                return last
            self._snapshot = Snapshot(token, snapshot_study(record, trials), trials, record.user_attrs,
                                      record.system_attrs)
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
            with self.engine.connect() as connection, _no_cyclic_gc():
                return rows.refresh(connection, self.ref.name)


def change_token(trials: tuple[FrozenTrial, ...], metrics_id: int, samples_id: int, rows_key: str = "") -> str:
    """A short string that changes when a trial is added or changes state, a metric or sample is stored, or
    ``rows_key`` changes (the reader's: a digest of the unfinished trials' rows and the study's attributes)."""
    states = "".join(str(trial.state.value) for trial in trials) + rows_key
    digest = hashlib.blake2b(states.encode(), digest_size=6).hexdigest()
    return f"{len(trials)}-{digest}-{metrics_id}-{samples_id}"


def open_reader(ref: StudyRef) -> StudyReader:
    """A reader on a study, for scripts and benchmarks (the app keeps one per study in its cache)."""
    return StudyReader(ref, open_read_only_engine(ref.url))


@dataclass(frozen=True)
class StudyView:
    """Everything about a study's trials that the pages show, without the per-update data."""

    ref: StudyRef
    directions: tuple[str, ...]
    objective_names: tuple[str, ...]
    trials: pd.DataFrame  # one row per trial, columns as tuner.study.reports.trials_frame plus KL columns
    configs: Mapping[int, Mapping[str, Any]]
    winner: Winner  # who won and why, as `ppo-tune run`, show and best give it (tuner.study.winner)
    spec: StoredSpec  # the study's stored spec, read once (tuner.study.stored_spec)
    counts: Mapping[str, int] = field(default_factory=dict)  # trials by state, states with none left out
    edge_findings: tuple[EdgeFinding, ...] = ()  # searched ranges whose best trials crowd against a bound
    aim: str | None = None  # a frontier-guided study's latest proposal: where it aimed, why, and how sure
    constraint_values: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    """Each trial's constraint values as Optuna keeps them (``FrozenTrial.constraints``), where it has any."""

    @property
    def best(self) -> tuple[int, ...]:
        """The best trial's number, or the Pareto front's."""
        return tuple(trial.number for trial in self.winner.trials)

    @property
    def best_figure(self) -> BestFigure | None:
        """The best trial's headline figure."""
        return self.winner.figure

    @property
    def kl_guard(self) -> KLGuard:
        return self.spec.kl_guard

    @property
    def target(self) -> str | None:
        """The trainer the study's trials kept to (``target:``, or a TRL study's trainer); None without one."""
        return self.spec.target

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        return self.spec.constraints

    @property
    def objectives(self) -> tuple[Objective, ...]:
        return self.spec.objectives

    def upper_limit(self, metric: str) -> float | None:
        """The study's constraint ``metric <= max`` (the tightest), if it has one."""
        return self.spec.upper_limit(metric)

    @property
    def numbers(self) -> list[int]:
        return [int(n) for n in self.trials["number"]] if not self.trials.empty else []

    @property
    def multi_objective(self) -> bool:
        return len(self.directions) > 1

    def states(self) -> dict[int, str]:
        return dict(zip(self.numbers, self.trials["state"], strict=True)) if not self.trials.empty else {}

    def kl_targets(self) -> dict[int, float]:
        """The adaptive controller's target of each trial that has one."""
        targets = {}
        for number, config in self.configs.items():
            target = config.get("kl_target")
            if isinstance(target, (int, float)) and math.isfinite(target):
                targets[number] = float(target)
        return targets


def objective_names(study: optuna.Study) -> tuple[str, ...]:
    """The objectives' names: Optuna's metric names if the study set them, else ``value_<i>``."""
    return tuple(study.metric_names or [f"value_{i}" for i in range(len(study.directions))])


def _max_finite(values: list[Any]) -> float:
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return max(finite) if finite else math.nan


def _kl_columns(trial: FrozenTrial) -> dict[str, Any]:
    config = trial.user_attrs.get(CONFIG_ATTR, {}) or {}
    history = list(trial.user_attrs.get(KL_HISTORY_ATTR, []) or [])
    target = config.get("kl_target")
    return {
        "kl_control": "adaptive" if target is not None else ("fixed" if config else ""),
        # Kept the study's constraints: judged on completed trials only (a pruned one has no final values).
        "feasible": feasible(trial) if trial.state == TrialState.COMPLETE else None,
        "max_kl": _max_finite(history),
        "last_kl": float(history[-1]) if history and isinstance(history[-1], (int, float)) else math.nan,
    }


def _with_kl_columns(frame: pd.DataFrame, trials: Sequence[FrozenTrial]) -> pd.DataFrame:
    """The trial table with each trial's KL summary and feasibility after its objective values, in place."""
    if frame.empty:
        return frame
    by_number = {trial.number: trial for trial in trials}
    extra = pd.DataFrame([_kl_columns(by_number[int(n)]) for n in frame["number"]], index=frame.index)
    if f"{PARAM_PREFIX}kl_control" in frame.columns:  # searched, so the parameter column already says it
        extra = extra.drop(columns="kl_control")
    # Keep reports' column order and put the KL summary after the objective values.
    insert_at = list(frame.columns).index("reason")
    for offset, column in enumerate(extra.columns):
        frame.insert(insert_at + offset, column, extra[column])
    return frame


def build_study_view(ref: StudyRef, snapshot: Snapshot) -> StudyView:
    """The study as the pages see it: what the tuner reads of it first (its stored spec, who won, its trial table,
    the ranges its best trials crowd), then what the pages add (KL columns, counts by state, the latest aim)."""
    study = snapshot.study
    attrs = snapshot.user_attrs
    if KL_GUARD_ATTR not in attrs and KL_GUARD_ATTR in snapshot.system_attrs:  # where the oldest studies kept it
        attrs = {**attrs, KL_GUARD_ATTR: snapshot.system_attrs[KL_GUARD_ATTR]}
    spec = read_stored_spec(attrs, len(study.directions))
    winner = read_winner(study)
    frame = trials_frame(study)
    crowded = tuple(edge_findings(snapshot.trials, spec.search_space, study.directions))
    frame = _with_kl_columns(frame, snapshot.trials)
    counts = {state: int((frame["state"] == state).sum()) for state in STATE_ORDER} if not frame.empty else {}
    return StudyView(
        ref=ref,
        directions=tuple(d.name.lower() for d in study.directions),
        objective_names=objective_names(study),
        trials=frame,
        configs={trial.number: dict(trial.user_attrs.get(CONFIG_ATTR, {}) or {}) for trial in snapshot.trials},
        winner=winner,
        spec=spec,
        counts={state: count for state, count in counts.items() if count},
        edge_findings=crowded,
        aim=latest_aim(snapshot.trials),
        constraint_values={trial.number: trial.constraints for trial in snapshot.trials if trial.constraints},
    )


def latest_aim(trials: Iterable[FrozenTrial]) -> str | None:
    """The latest frontier-guided proposal's aim in words (``tuner.search.frontier_aim.aim_words``); None for a study
    whose sampler stored none."""
    aimed = [trial for trial in trials if isinstance(trial.user_attrs.get(AIM_ATTR), Mapping)]
    return aim_words(aimed[-1].user_attrs[AIM_ATTR], aimed[-1].number) if aimed else None
