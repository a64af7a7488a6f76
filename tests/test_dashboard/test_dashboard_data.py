"""The dashboard's plain-Python layers: the study reader, frames, charts, Optuna's views, launch."""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest
import sqlalchemy

from dashboard import charts, frames, optuna_views
from dashboard.app import parse_app_args
from dashboard.serve import STORAGE_ENV, add_dashboard_arguments, streamlit_command
from dashboard.study_reader import (
    StudyRef,
    build_study_view,
    open_reader,
    storage_urls,
)
from ppo_core.run.callbacks import SampleGeneration
from tools.demo_study import DemoSpec, build_demo_study
from tuner.store.attrs import DEFAULT_KL_THRESHOLD
from tuner.store.database import create_engine, read_only_url
from tuner.store.records import TrialStore
from tuner.study.stored_spec import read_stored_spec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('demo') / 'demo.db'}"
    build_demo_study(url, DemoSpec(n_trials=6, n_updates=20, sample_every=5))
    return url


def test_storage_urls_explicit_then_environment_then_studies_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "studies").mkdir()
    for name in ("b", "a"):
        (tmp_path / "studies" / f"{name}.db").touch()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert storage_urls() == [f"sqlite:///{tmp_path / 'studies' / n}.db" for n in ("a", "b")]
    monkeypatch.setenv(STORAGE_ENV, "postgresql://u@h/db")
    assert storage_urls() == ["postgresql://u@h/db"]
    assert storage_urls("sqlite:///x.db") == ["sqlite:///x.db"]
    assert parse_app_args(["--storage", "sqlite:///y.db"]) == "sqlite:///y.db"
    assert parse_app_args(["--stor", "z"]) is None  # no abbreviations: pytest's own flags must not match
    assert parse_app_args([]) is None


def test_sqlite_is_opened_read_only(demo_url: str) -> None:
    url = read_only_url(demo_url)
    assert url.startswith("sqlite:///file:") and url.endswith("?mode=ro&uri=true")
    reader = open_reader(StudyRef(demo_url, "synthetic-demo"))
    with pytest.raises(sqlalchemy.exc.OperationalError, match="readonly"), reader.engine.begin() as connection:
        connection.execute(sqlalchemy.text("DELETE FROM ppo_tune_metrics"))
    assert read_only_url("postgresql://u@h/db") == "postgresql://u@h/db"


def test_reader_reads_only_new_rows_and_the_token_follows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    build_demo_study(url, DemoSpec(name="s", n_trials=2, n_updates=5, running_trials=1, sample_every=5))
    reader = open_reader(StudyRef(url, "s"))
    first, first_metrics = reader.refresh(), reader.metrics()
    assert first_metrics.groupby("trial_number").size().to_dict() == {0: 5, 1: 2}
    assert reader.refresh().token == first.token  # nothing new, nothing changes
    # The running trial reports another update, as its worker would, beside the open reader.
    engine = create_engine(url)
    trial_id = int(first_metrics.loc[first_metrics["trial_number"] == 1, "trial_id"].iloc[0])
    store = TrialStore(engine, "s", trial_id, 1)
    store.write_metrics(3, {"update": 3.0, "episode": 192.0, "objective/kl": math.inf, "objective/scores": 0.5})
    assert reader.refresh().token != first.token  # seen without reading the rows
    store.write_samples([SampleGeneration(3, 192, 0, "p", "an answer", 0.5, None)])
    assert reader.refresh().token != first.token
    second = reader.metrics()
    assert len(second) == len(first_metrics) + 1 and len(first_metrics) == 7  # the earlier frame is intact
    last = second[second["trial_number"] == 1].iloc[-1]
    assert last["update"] == 3 and math.isinf(last["objective/kl"])
    assert "an answer" in set(reader.samples()["response"])


def test_study_view_trial_table_best_and_kl_guard(demo_url: str) -> None:
    reader = open_reader(StudyRef(demo_url, "synthetic-demo"))
    view = build_study_view(reader.ref, reader.refresh())
    assert view.numbers == list(range(6)) and view.kl_guard.threshold == 20.0
    assert {"number", "state", "param:learning_rate", "value_0", "reason", "max_kl", "updates"} <= set(view.trials)
    assert len(view.best) == 1 and view.states()[view.best[0]] == "COMPLETE"
    assert set(view.kl_targets()) == {n for n, c in view.configs.items() if c["kl_target"] is not None}
    assert sum(view.counts.values()) == 6 and all(view.counts.values())
    # The demo study records its guard as studies did before definitions were stored: read from there.
    assert read_stored_spec({}, 1).kl_guard.threshold == DEFAULT_KL_THRESHOLD
    recorded = read_stored_spec({"kl_guard": {"threshold": 7, "metric": "m"}}, 1).kl_guard
    assert (recorded.threshold, recorded.metric) == (7.0, "m")
    assert read_stored_spec({"kl_guard": {"threshold": "bad"}}, 1).kl_guard.threshold == DEFAULT_KL_THRESHOLD


def test_frames_smoothing_samples_and_comparisons() -> None:
    values = pd.Series([0.0, 10.0, 10.0, 10.0])
    assert frames.ema(values, 0.0).tolist() == values.tolist()
    smoothed = frames.ema(values, 0.9)
    assert smoothed.iloc[0] == 0.0 and 0 < smoothed.iloc[-1] < 10
    samples = pd.DataFrame({
        "trial_number": [0, 0, 0, 1, 1], "update": [0, 5, 10, 0, 5], "episode": 0, "prompt_index": 0,
        "prompt": "p", "response": ["a", "b", "c", "d", "e"], "score": 0.0, "gold_score": None,
    })
    assert frames.samples_at(samples, 0, 10)["response"].tolist() == ["c", "e"]  # trial 1 stopped at 5
    assert frames.samples_at(samples, 0, 4)["response"].tolist() == ["a", "d"]
    assert frames.matched_updates(samples, [0, 1]) == [0, 5]
    assert frames.trial_samples(samples, 0, 0)["update"].tolist() == [0, 5, 10]
    table = frames.compare_values({3: {"lr": 1e-5, "beta": None}, 7: {"lr": 1e-5, "beta": 0.1}})
    assert table.set_index("setting")["differs"].to_dict() == {"beta": True, "lr": False}
    assert table.columns.tolist() == ["setting", "#3", "#7", "differs"]


def test_charts_one_line_per_trial_styled_by_state_and_selection(demo_url: str) -> None:
    reader = open_reader(StudyRef(demo_url, "synthetic-demo"))
    view = build_study_view(reader.ref, reader.refresh())
    metrics = reader.metrics()
    states = view.states()
    style = charts.CurveStyle(selected=frozenset({view.best[0]}))
    figure = charts.kl_figure(metrics, states, style, 20.0, view.kl_targets())
    lines = charts.trial_traces(figure)
    assert sorted(t.meta["trial"] for t in lines) == view.numbers
    for trace in lines:
        assert trace.line.dash == charts.STATE_DASH[states[trace.meta["trial"]]]
        chosen = trace.meta["trial"] == view.best[0]
        assert (trace.opacity, trace.line.width) == ((1.0, 3.0) if chosen else (0.18, 1.6))
    assert lines[-1].meta["trial"] == view.best[0]  # drawn on top
    roles = [t.meta.get("role") for t in figure.data if "role" in t.meta]
    assert roles.count("threshold") == 1 and roles.count("target") == len(view.kl_targets())
    threshold = next(t for t in figure.data if t.meta.get("role") == "threshold")
    assert list(threshold.y) == [20.0, 20.0]
    by_episode = charts.curves_figure(metrics, "objective/scores", states, charts.CurveStyle(x="episode"))
    assert max(max(t.x) for t in by_episode.data) == metrics["episode"].max()
    assert charts.curves_figure(metrics, "no/such_metric", states, style).data == ()


def test_analysis_views_and_their_preconditions(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'a.db'}")
    with pytest.raises(optuna_views.NotDrawable, match="at least 1 completed trial"):
        optuna_views.figure(study, "Optimization history")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert optuna_views.figure(study, "Optimization history").data
    with pytest.raises(optuna_views.NotDrawable, match="at least 2 completed"):
        optuna_views.figure(study, "Parameter importances")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=4)
    assert optuna_views.figure(study, "Parameter importances").data
    with pytest.raises(optuna_views.NotDrawable, match="two searched parameters"):
        optuna_views.figure(study, "Contour")
    with pytest.raises(optuna_views.NotDrawable, match="several objectives"):
        optuna_views.figure(study, "Pareto front")
    assert "Pareto front" not in optuna_views.available_views(False)
    two = optuna.create_study(directions=["maximize", "minimize"])
    two.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)), n_trials=6)
    assert optuna_views.figure(two, "Pareto front").data
    assert optuna_views.figure(two, "Slice", objective=1).data


def test_launch_command_binds_localhost_and_keeps_the_url_off_the_command_line() -> None:
    parser = argparse.ArgumentParser()
    add_dashboard_arguments(parser)
    args = parser.parse_args(["--storage", "postgresql://u:secret@h/db", "--port", "8600"])
    command = streamlit_command(args)
    assert command[1:4] == ["-m", "streamlit", "run"] and command[4].endswith("dashboard/app.py")
    assert command[command.index("--server.address") + 1] == "127.0.0.1"
    assert command[command.index("--server.port") + 1] == "8600"
    assert command[command.index("--server.headless") + 1] == "true"
    assert "secret" not in " ".join(command)
    other = parser.parse_args(["--host", "0.0.0.0"])
    assert streamlit_command(other)[streamlit_command(other).index("--server.address") + 1] == "0.0.0.0"
    assert "--server.port" not in streamlit_command(other)


def test_the_dashboard_does_not_import_torch() -> None:
    # Every support module, found on disk, so a new one cannot slip past this test (the pages import these).
    support = sorted(p.stem for p in (REPO / "dashboard").glob("*.py") if p.stem != "__init__")
    assert {"app", "study_reader", "session", "frontier_reading"} <= set(support)
    modules = [f"dashboard.{name}" for name in support] + ["tuner.study.reports", "tuner.store.attrs"]
    code = "import json, sys; import {}; print(json.dumps(sorted(m for m in sys.modules " \
           "if m.split('.')[0] in ('torch', 'transformers', 'ppo_core'))))"

    def loaded(imports: list[str]) -> list[str]:
        output = subprocess.run([sys.executable, "-c", code.format(", ".join(imports))], capture_output=True,
                                text=True, cwd=REPO, check=True)
        return list(json.loads(output.stdout))

    dashboard = loaded(modules)
    assert [m for m in dashboard if m.split(".")[0] in ("torch", "transformers")] == []
    # From ppo_core only the shared metric names, with what their package loads eagerly (never the trainer).
    light = loaded(["ppo_core.metric_names"])
    assert set(dashboard) <= set(light), sorted(set(dashboard) - set(light))
    assert [m for m in light if m.split(".")[0] in ("torch", "transformers")] == []


def test_demo_study_is_shaped_like_a_tuner_study(demo_url: str) -> None:
    study = optuna.load_study(study_name="synthetic-demo", storage=demo_url)
    trials = study.get_trials()
    assert {"config", "kl_history", "budget_updates"} <= set(trials[0].user_attrs)
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert all("passed the threshold 20" in t.user_attrs["prune_reason"] for t in pruned)
    with sqlite3.connect(demo_url.removeprefix("sqlite:///")) as connection:
        (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"


def test_compare_shades_only_rows_that_set_trials_apart() -> None:
    # Shading every row because every trial differs says nothing; values equal at the shown precision are equal.
    every = frames.compare_values({0: {"a": 1.0, "b": 2.0}, 1: {"a": 1.5, "b": 3.0}})
    assert every["differs"].all() and not frames.shading_says_something(every)
    styles = frames.highlight_differences(every)._compute().ctx
    assert not any(value for value in styles.values())
    some = frames.compare_values({0: {"a": 1.0, "b": 0.123456}, 1: {"a": 1.5, "b": 0.1234561}})
    assert some["differs"].tolist() == [True, False]  # 0.1235 either way, as displayed
    assert frames.shading_says_something(some)
    styles = frames.highlight_differences(some)._compute().ctx
    assert {row for (row, _), value in styles.items() if value} == {0}


def test_past_twelve_trials_the_selected_and_best_trials_keep_their_legend(tmp_path: Path) -> None:
    # Past 12 trials the legend stays for the selected and best trials, and the best trial is never drawn grey.
    rows = [{"trial_number": n, "update": u, "episode": 8 * u, "objective/kl": 0.1 * n * u}
            for n in range(20) for u in range(1, 4)]
    metrics = pd.DataFrame(rows)
    states = {n: "COMPLETE" for n in range(20)}
    style = charts.CurveStyle(selected=frozenset({2, 5, 9, 11}), best=frozenset({16}))
    figure = charts.curves_figure(metrics, "objective/kl", states, style)
    assert figure.layout.showlegend is True
    named = {t.meta["trial"]: t.name for t in charts.trial_traces(figure) if t.showlegend}
    assert named == {2: "#2 complete", 5: "#5 complete", 9: "#9 complete", 11: "#11 complete",
                     16: "#16 complete (best)"}
    best = next(t for t in charts.trial_traces(figure) if t.meta["trial"] == 16)
    assert (best.opacity, best.line.width) == (1.0, 3.0) and best.line.color != "#7F7F7F"
    small = charts.curves_figure(metrics[metrics["trial_number"] < 6], "objective/kl",
                                 {n: "COMPLETE" for n in range(6)}, charts.CurveStyle())
    assert all(t.showlegend for t in charts.trial_traces(small))  # a small study names every trial


def test_kl_chart_names_its_kl_and_explains_values_below_zero() -> None:
    # A chart titled as KL that shows negative values says why.
    metrics = pd.DataFrame([{"trial_number": 0, "update": u, "episode": u, "objective/kl": kl}
                            for u, kl in enumerate([0.0, -0.17, 0.4], start=1)])
    figure = charts.kl_figure(metrics, {0: "COMPLETE"}, charts.CurveStyle(), 6.0, {})
    assert figure.layout.title.text.startswith("Training KL to the reference policy (objective/kl")
    assert any("k1 estimate" in a.text for a in figure.layout.annotations)
    positive = metrics.assign(**{"objective/kl": [0.0, 0.1, 0.4]})
    assert not charts.kl_figure(positive, {0: "COMPLETE"}, charts.CurveStyle(), 6.0, {}).layout.annotations
