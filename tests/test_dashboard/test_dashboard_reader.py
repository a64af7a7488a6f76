"""The dashboard's direct-SQL reader of Optuna's tables (dashboard.optuna_tables, used by dashboard.study_reader)
against Optuna's own ``load_study``, on SQLite and on PostgreSQL (``PPO_TUNE_POSTGRES_URL``, as the tuner's tests);
and the session's figure cache."""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import plotly.io as pio
import pytest
import sqlalchemy
from helpers.studies import postgres_url
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from dashboard import session
from dashboard.charts import CurveStyle, curves_figure
from dashboard.optuna_tables import SnapshotStorage, read_study
from dashboard.study_reader import StudyRef, build_study_view, open_reader, study_names
from tools.demo_study import DemoSpec, build_demo_study
from tuner.store.attrs import KL_GUARD_ATTR
from tuner.store.database import create_engine, open_read_only_engine, open_storage
from tuner.store.records import metrics_table, samples_table
from tuner.study.reports import trials_frame
from tuner.study.winner import best_trials


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty place for studies; on PostgreSQL the studies named by the test are deleted afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'studies.db'}"
        return
    url = postgres_url()
    before = set(optuna.get_all_study_names(open_storage(url)))
    yield url
    storage = open_storage(url)
    engine = create_engine(url)
    for name in set(optuna.get_all_study_names(storage)) - before:
        optuna.delete_study(study_name=name, storage=storage)
        with engine.begin() as connection:
            for table in (metrics_table, samples_table):
                if sqlalchemy.inspect(connection).has_table(table.name):
                    connection.execute(table.delete().where(table.c.study_name == name))
    engine.dispose()


def _unique(name: str) -> str:
    # PostgreSQL's test database is shared by every run: names must not collide.
    return f"{name}_{os.getpid()}_{time.time_ns()}"


def _odd_trials(url: str, name: str) -> None:
    """Trials with every kind of value Optuna stores specially: infinite values, NaN and infinite intermediate
    values, NaN in a JSON attribute, the three distributions, system attributes, a failed and a waiting trial."""
    study = optuna.create_study(study_name=name, storage=open_storage(url), directions=["maximize", "minimize"])
    study.set_metric_names(["score", "kl"])
    study.set_user_attr("space", {"lr": [1e-6, 1e-4]})
    distributions = {"lr": FloatDistribution(1e-6, 1e-4, log=True), "epochs": IntDistribution(1, 8),
                     "control": CategoricalDistribution(("fixed", "adaptive", None))}
    for number, (state, values) in enumerate([
        (TrialState.COMPLETE, [1.5, 2.0]), (TrialState.COMPLETE, [math.inf, -math.inf]),
        (TrialState.PRUNED, None), (TrialState.FAIL, None),
    ]):
        study.add_trial(optuna.trial.create_trial(
            state=state, values=values, distributions=distributions,
            params={"lr": 1e-5 * (number + 1), "epochs": number + 1,
                    "control": ("fixed", "adaptive", None)[number % 3]},
            user_attrs={"history": [0.5, math.nan, math.inf], "config": {"kl_target": None, "n": number}},
            system_attrs={"worker": f"w{number}"},
            intermediate_values={1: 0.25, 2: math.nan, 3: math.inf, 4: -math.inf} if number != 3 else {},
        ))
    study.enqueue_trial({"lr": 3e-5})  # a WAITING trial, its params in a system attribute


def _fields(trial: FrozenTrial) -> dict[str, Any]:
    # repr() so that NaN compares equal to NaN; dicts sorted, since Optuna reads rows in no set order.
    def shown(value: Any) -> str:
        return repr(sorted(value.items(), key=lambda item: str(item[0])) if isinstance(value, dict) else value)

    return {name: shown(getattr(trial, name)) for name in (
        "number", "state", "values", "datetime_start", "datetime_complete", "params", "distributions",
        "user_attrs", "system_attrs", "intermediate_values", "_trial_id")}


def _same_as_optuna(url: str, name: str) -> None:
    reference = optuna.load_study(study_name=name, storage=url)
    snapshot = open_reader(StudyRef(url, name)).refresh()
    assert [_fields(t) for t in snapshot.trials] == [_fields(t) for t in reference.get_trials()]
    study = snapshot.study
    assert study.directions == reference.directions and study.metric_names == reference.metric_names
    assert study.user_attrs == reference.user_attrs
    assert snapshot.system_attrs == open_storage(url).get_study_system_attrs(reference._study_id)
    # What the dashboard derives from the study comes out the same.
    assert [t.number for t in best_trials(study)] == [t.number for t in best_trials(reference)]
    assert trials_frame(study).equals(trials_frame(reference))


def test_direct_read_matches_optuna_on_every_kind_of_value(storage_url: str) -> None:
    name = _unique("odd")
    _odd_trials(storage_url, name)
    _same_as_optuna(storage_url, name)


def test_direct_read_matches_optuna_on_a_demo_study(storage_url: str) -> None:
    name = _unique("demo")
    build_demo_study(storage_url, DemoSpec(name=name, n_trials=6, n_updates=8, running_trials=2, sample_every=4))
    _same_as_optuna(storage_url, name)
    assert name in study_names(open_read_only_engine(storage_url))


def test_refresh_rereads_only_new_and_unfinished_trials(storage_url: str) -> None:
    name = _unique("live")
    study = optuna.create_study(study_name=name, storage=open_storage(storage_url))
    study.tell(study.ask({"x": FloatDistribution(0, 1)}), 1.0)
    running = study.ask({"x": FloatDistribution(0, 1)})
    reader = open_reader(StudyRef(storage_url, name))
    first = reader.refresh()
    assert [t.state for t in first.trials] == [TrialState.COMPLETE, TrialState.RUNNING]
    assert reader.refresh() is first  # nothing changed (the running trial neither): the same snapshot and token

    running.report(0.5, step=1)  # a running trial's intermediate values grow without a change of state
    second = reader.refresh()
    assert second.trials[1].intermediate_values == {1: 0.5}
    assert second.token != first.token  # so the pages' cached views are drawn again
    assert second.trials[0] is first.trials[0]  # a finished trial is never read again

    study.tell(running, 0.25)
    new = study.ask()
    third = reader.refresh()
    assert [t.state for t in third.trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.RUNNING]
    assert third.trials[1].value == 0.25 and third.trials[2].number == new.number == 2
    assert third.token != second.token
    assert [t.number for t in best_trials(third.study)] == [1]
    assert [t.number for t in first.study.get_trials()] == [0, 1]  # an earlier snapshot does not change
    assert gc.isenabled()  # the reads turn the cyclic collector off only while they decode
    _same_as_optuna(storage_url, name)


def test_a_study_attribute_set_later_changes_the_token(storage_url: str) -> None:
    name = _unique("attrs")
    study = optuna.create_study(study_name=name, storage=open_storage(storage_url))
    study.tell(study.ask({"x": FloatDistribution(0, 1)}), 1.0)
    reader = open_reader(StudyRef(storage_url, name))
    first = reader.refresh()
    study.set_user_attr(KL_GUARD_ATTR, {"threshold": 7.0})  # no trial changes: only the study's attributes
    second = reader.refresh()
    assert second.token != first.token  # so the cached study view is built again
    assert build_study_view(reader.ref, second).kl_guard.threshold == 7.0


def test_the_reader_cannot_write(storage_url: str) -> None:
    name = _unique("ro")
    build_demo_study(storage_url, DemoSpec(name=name, n_trials=2, n_updates=3, sample_every=3))
    reader = open_reader(StudyRef(storage_url, name))
    snapshot = reader.refresh()
    # SQLite opened with mode=ro ("attempt to write a readonly database"); PostgreSQL read-only transactions.
    with pytest.raises(sqlalchemy.exc.DBAPIError, match=r"(?i)read-?only"), reader.engine.begin() as connection:
        connection.execute(sqlalchemy.text("UPDATE trials SET number = number + 100"))
    with pytest.raises(NotImplementedError, match="never writes"):
        snapshot.study.set_user_attr("x", 1)
    with pytest.raises(NotImplementedError):
        snapshot.study.ask()
    assert [t.number for t in reader.refresh().trials] == [0, 1]


def test_missing_studies_and_databases_are_refused(storage_url: str, tmp_path: Path) -> None:
    name = _unique("here")
    build_demo_study(storage_url, DemoSpec(name=name, n_trials=1, n_updates=2, sample_every=2))
    with pytest.raises(KeyError, match="no study named"):
        open_reader(StudyRef(storage_url, name + "_gone"))
    with pytest.raises(FileNotFoundError, match="no study database"):
        open_read_only_engine(f"sqlite:///{tmp_path / 'missing.db'}")
    with open_read_only_engine(storage_url).connect() as connection:
        record = read_study(connection, name)
    storage = SnapshotStorage(record, [])
    with pytest.raises(KeyError):
        storage.get_study_directions(record.study_id + 1)


def test_study_view_from_the_direct_read(storage_url: str) -> None:
    name = _unique("view")
    build_demo_study(storage_url, DemoSpec(name=name, n_trials=6, n_updates=10, sample_every=5))
    reader = open_reader(StudyRef(storage_url, name))
    view = build_study_view(reader.ref, reader.refresh())
    reference = optuna.load_study(study_name=name, storage=storage_url)
    assert view.numbers == list(range(6))
    assert view.best == tuple(t.number for t in best_trials(reference))
    assert view.configs == {t.number: t.user_attrs["config"] for t in reference.get_trials()}


def test_page_figures_are_drawn_once_per_change_token_and_sent_unchanged(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'figures.db'}"
    build_demo_study(url, DemoSpec(name="f", n_trials=3, n_updates=6, sample_every=3))
    ref = StudyRef(url, "f")
    token = session.refresh(ref)
    states = session.study_view(url, "f", token).states()
    drawn: list[str] = []

    def draw(metrics: Any, metric: str) -> Any:
        drawn.append(metric)
        return curves_figure(metrics, metric, states, CurveStyle())

    first = session.figure(ref, token, draw, "objective/kl")
    assert session.figure(ref, token, draw, "objective/kl") is first and drawn == ["objective/kl"]
    session.figure(ref, token, draw, "objective/scores")
    session.figure(ref, token + "-changed", draw, "objective/kl")  # the study changed: drawn again
    assert drawn == ["objective/kl", "objective/scores", "objective/kl"]
    # The cached figure holds its arrays encoded, and Streamlit is sent exactly the chart drawn directly.
    direct = curves_figure(session.metrics(url, "f", token), "objective/kl", states, CurveStyle())
    assert pio.to_json(first.to_dict(), validate=False) == pio.to_json(direct.to_dict(), validate=False)
