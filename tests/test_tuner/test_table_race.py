"""Workers that start on a new PostgreSQL database at the same moment each create ppo-tune's tables: one finds a
table missing, another creates it before the first's CREATE runs. PostgreSQL refuses that CREATE with DuplicateTable,
a ProgrammingError, which the set-up did not retry: one of three workers on a fresh database failed, and with it
``ppo-tune run``. The race is made to happen here every time, on the real server: the table is created by another
connection between the check and the CREATE."""

from __future__ import annotations

import pytest
import sqlalchemy
from helpers.studies import postgres_url

from tuner.store.database import create_engine
from tuner.store.records import create_tables, metrics_table, samples_table

pytestmark = pytest.mark.heavy  # a PostgreSQL database: scheduled first


def test_a_table_another_worker_created_between_the_check_and_the_create_is_not_an_error() -> None:
    engine = create_engine(postgres_url())
    other = create_engine(postgres_url())
    with engine.begin() as connection:  # this worker's database as a new one: none of ppo-tune's tables
        connection.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {metrics_table.name}, {samples_table.name}"))
    raced: list[bool] = []

    def another_worker_first(target: sqlalchemy.Table, connection: sqlalchemy.Connection, **_: object) -> None:
        if not raced:  # once: the retry must find the table there and leave it
            raced.append(True)
            target.create(other)

    sqlalchemy.event.listen(metrics_table, "before_create", another_worker_first)
    try:
        create_tables(engine)
    finally:
        sqlalchemy.event.remove(metrics_table, "before_create", another_worker_first)
        other.dispose()
    assert raced == [True]
    assert {metrics_table.name, samples_table.name} <= set(sqlalchemy.inspect(engine).get_table_names())
