"""The project's own tables, beside Optuna's in the same database: per-update metrics and sample generations.

One storage URL holds everything, so a dashboard anywhere sees every worker's trials as they run.
Rows are keyed by Optuna's ``trial_id`` (unique across studies in a database) and carry the study
name and trial number for readers. Optuna's tables are untouched, so optuna-dashboard still reads
the database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy
from orjson import loads as json_loads  # decodes the per-update JSON about three times faster
from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text, UniqueConstraint

from tuner.store.database import retry_while_locked

# pandas is imported where rows are read: workers and trials only write them, and importing pandas would add 0.3 s of
# CPU to each worker's start-up.
if TYPE_CHECKING:
    import pandas as pd

METRIC_KEYS = ["trial_id", "trial_number", "update", "episode"]

metadata = MetaData()

def _row_key_columns() -> list[Column[Any]]:
    """The columns that place a row: its study, Optuna's trial (id and number), its update and episode.

    A function, because SQLAlchemy binds each Column object to one table.
    """
    return [
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("study_name", String(512), nullable=False),
        Column("trial_id", Integer, nullable=False),
        Column("trial_number", Integer, nullable=False),
        Column("update", Integer, nullable=False),
        Column("episode", Integer, nullable=False),
    ]


metrics_table = Table(
    "ppo_tune_metrics",
    metadata,
    *_row_key_columns(),
    Column("metrics", Text, nullable=False),  # JSON object: every metric ppo_core reports
    UniqueConstraint("trial_id", "update", name="uq_ppo_tune_metrics_trial_update"),
    Index("ix_ppo_tune_metrics_study", "study_name"),
)

samples_table = Table(
    "ppo_tune_samples",
    metadata,
    *_row_key_columns(),
    Column("prompt_index", Integer, nullable=False),
    Column("prompt", Text, nullable=False),
    Column("response", Text, nullable=False),
    Column("score", Float, nullable=True),
    Column("gold_score", Float, nullable=True),
    UniqueConstraint("trial_id", "update", "prompt_index", name="uq_ppo_tune_samples_trial_update_prompt"),
    Index("ix_ppo_tune_samples_study", "study_name"),
)


def create_tables(engine: sqlalchemy.Engine) -> None:
    """Create the project's tables if they are missing; safe to call from every worker, all at the same moment."""
    retry_while_locked(lambda: metadata.create_all(engine, checkfirst=True))


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _json_safe(metrics: dict[str, float]) -> str:
    # JSON has no NaN or inf; keep them readable as strings so a diverged run's last row is not lost.
    return json.dumps({k: (v if math.isfinite(v) else str(v)) for k, v in metrics.items()})


class TrialStore:
    """Writes one trial's metrics and samples as the trial runs."""

    def __init__(self, engine: sqlalchemy.Engine, study_name: str, trial_id: int, trial_number: int) -> None:
        self.engine = engine
        self.keys = {"study_name": study_name, "trial_id": trial_id, "trial_number": trial_number}

    def write_metrics(self, update: int, metrics: dict[str, float]) -> None:
        row = {**self.keys, "update": update, "episode": int(metrics.get("episode", 0)), "metrics": _json_safe(metrics)}
        with self.engine.begin() as connection:
            connection.execute(metrics_table.insert(), [row])

    def copy_from(self, trial_id: int, last_update: int) -> list[tuple[int, dict[str, float]]]:
        """Copy trial ``trial_id``'s metric and sample rows up to ``last_update`` (none later) to this trial, as a
        retry that continues that trial from its checkpoint at ``last_update`` would have written them; the copied
        metrics, by update, oldest first."""
        rows = []
        with self.engine.begin() as connection:
            for table in (metrics_table, samples_table):
                columns = [c for c in table.c if c.name not in ("id", *self.keys)]
                query = sqlalchemy.select(*columns).where(
                    (table.c.trial_id == trial_id) & (table.c.update <= last_update)).order_by(table.c.update)
                copied = [{**row._asdict(), **self.keys} for row in connection.execute(query)]
                if copied:
                    connection.execute(table.insert(), copied)
                if table is metrics_table:
                    rows = [(row["update"], {k: float(v) for k, v in json_loads(row["metrics"]).items()})
                            for row in copied]
        return rows

    def write_samples(self, samples: Iterable[Any]) -> None:
        rows = [
            {
                **self.keys,
                "update": sample.update,
                "episode": sample.episode,
                "prompt_index": sample.prompt_index,
                "prompt": sample.prompt,
                "response": sample.response,
                "score": _finite_or_none(sample.score),
                "gold_score": _finite_or_none(sample.gold_score),
            }
            for sample in samples
        ]
        if rows:
            with self.engine.begin() as connection:
                connection.execute(samples_table.insert(), rows)


def _study_filter(table: Table, study_name: str, trial_numbers: list[int] | None) -> Any:
    condition = table.c.study_name == study_name
    if trial_numbers is not None:
        condition = condition & table.c.trial_number.in_(trial_numbers)
    return condition


def read_metrics(engine: sqlalchemy.Engine, study_name: str, trial_numbers: list[int] | None = None) -> pd.DataFrame:
    """One row per (trial, update): trial_number, trial_id, update, episode and one column per metric."""
    query = sqlalchemy.select(
        metrics_table.c.trial_id, metrics_table.c.trial_number, metrics_table.c.update,
        metrics_table.c.episode, metrics_table.c.metrics,
    ).where(_study_filter(metrics_table, study_name, trial_numbers)).order_by(
        metrics_table.c.trial_number, metrics_table.c.update
    )
    with engine.connect() as connection:
        return decode_metric_rows(connection.execute(query).all())


def read_stored_metrics(engine: sqlalchemy.Engine, study_name: str,
                        trial_numbers: list[int] | None = None) -> pd.DataFrame:
    """:func:`read_metrics`, or an empty frame from a database without ppo-tune's tables (a study another tool
    made)."""
    if not sqlalchemy.inspect(engine).has_table(metrics_table.name):
        return decode_metric_rows([])
    return read_metrics(engine, study_name, trial_numbers)


def decode_metric_rows(rows: Sequence[Sequence[Any]]) -> pd.DataFrame:
    """Rows of (trial_id, trial_number, update, episode, metrics JSON) as a frame with one column per metric.

    Non-finite values were stored as the strings "nan"/"inf"; they come back as floats.
    """
    import pandas as pd

    if not rows:
        return pd.DataFrame(columns=METRIC_KEYS)
    keys = pd.DataFrame([row[:4] for row in rows], columns=METRIC_KEYS)
    values = pd.DataFrame([json_loads(row[4]) for row in rows])
    values = values.drop(columns=[c for c in ("update", "episode") if c in values.columns])
    for column in values.columns:
        if not pd.api.types.is_numeric_dtype(values[column]):  # "nan"/"inf" strings, or a mixed column
            values[column] = pd.to_numeric(values[column], errors="coerce")
    return pd.concat([keys, values], axis=1)


def read_samples(engine: sqlalchemy.Engine, study_name: str, trial_numbers: list[int] | None = None) -> pd.DataFrame:
    """One row per sample generation, ordered by trial, update and prompt."""
    import pandas as pd

    columns = [c for c in samples_table.c if c.name not in ("id", "study_name")]
    query = sqlalchemy.select(*columns).where(_study_filter(samples_table, study_name, trial_numbers)).order_by(
        samples_table.c.trial_number, samples_table.c.update, samples_table.c.prompt_index
    )
    with engine.connect() as connection:
        return pd.DataFrame(connection.execute(query).all(), columns=[c.name for c in columns])


def count_rows(engine: sqlalchemy.Engine, study_name: str) -> tuple[int, int]:
    """(metric rows, sample rows) stored for a study."""
    with engine.connect() as connection:
        metric_rows = connection.execute(
            sqlalchemy.select(sqlalchemy.func.count()).where(metrics_table.c.study_name == study_name)
        ).scalar_one()
        sample_rows = connection.execute(
            sqlalchemy.select(sqlalchemy.func.count()).where(samples_table.c.study_name == study_name)
        ).scalar_one()
    return int(metric_rows), int(sample_rows)
