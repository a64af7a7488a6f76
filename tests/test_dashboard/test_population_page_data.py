"""The Population page's data (dashboard.population_frames) and figures (dashboard.population_charts), read from a
population study written as the tuner writes one (population_study), and the page itself in Streamlit's AppTest."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
from helpers.population_trials import segment_trial
from population_study import JUDGE, NAME, SEGMENTS, WINNER, build_population_study, lineage_value
from streamlit.testing.v1 import AppTest

from dashboard.population_charts import BACKTRACK_SHIFT, lineage_figure, schedule_figure, stitched_figure
from dashboard.population_frames import (
    copy_edges,
    final_segments,
    kl_field,
    lineage_rows,
    schedule_frame,
    segments_frame,
    stitched_curves,
)
from dashboard.serve import STORAGE_ENV
from tuner.store.database import create_engine
from tuner.store.records import read_metrics
from tuner.store.segments import Segment
from tuner.study.winner import read_winner

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_population_study(tmp_path_factory.mktemp("population") / "pbt.db")


@pytest.fixture(scope="module")
def study(url: str) -> optuna.Study:
    return optuna.load_study(study_name=NAME, storage=url)


@pytest.fixture(scope="module")
def segments(study: optuna.Study) -> pd.DataFrame:
    return segments_frame(study.get_trials())


def test_each_slot_counts_its_latest_attempt(segments: pd.DataFrame) -> None:
    # Trial 3 failed and was retried as trial 9: the retry is member 0's segment of generation 1.
    assert [(r.generation, r.member, r.trial) for r in segments.itertuples()] == [
        (0, 0, 0), (0, 1, 1), (0, 2, 2), (1, 0, 9), (1, 1, 4), (1, 2, 5), (2, 0, 6), (2, 1, 7), (2, 2, 8)]
    rows = segments.set_index("trial")
    assert rows.loc[5, "mutated"] == "learning_rate 0.0002 → 0.00025" and rows.loc[4, "mutated"] == ""
    # Only a complete segment has a value; the pruned and the failed have none.
    assert rows.loc[6, "value"] == 0.99 and math.isnan(rows.loc[2, "value"]) and math.isnan(rows.loc[7, "value"])
    assert (rows.loc[2, "state"], rows.loc[7, "state"], rows.loc[0, "parent"]) == ("PRUNED", "FAIL", -1)


def test_a_copy_is_an_edge_from_its_parents_end_to_its_start(segments: pd.DataFrame) -> None:
    edges = copy_edges(segments)
    assert edges.to_dict("records") == [
        {"trial": 5, "parent": 1, "origin": "exploit", "x0": 2, "y0": 1, "x1": 2, "y1": 2},
        {"trial": 6, "parent": 5, "origin": "exploit", "x0": 4, "y0": 2, "x1": 4, "y1": 0}]


def test_a_backtrack_is_an_edge_from_the_earlier_point_it_went_back_to() -> None:
    # Member 1 of generation 2 went back to trial 0's end at update 2 and trains updates 3-6; it is drawn a little
    # below its row, over its own line's earlier segments, with a dashed edge from trial 0's end.
    config = {"learning_rate": 1e-4, "kl_coef": 0.1}
    trials = [segment_trial(0, Segment(0, 0, 0, 2), 0.9, config), segment_trial(1, Segment(1, 0, 0, 2), 0.5, config),
              segment_trial(2, Segment(0, 1, 2, 4, "continue", 0), 0.6, config),
              segment_trial(3, Segment(1, 1, 2, 4, "continue", 1), 0.4, config),
              segment_trial(4, Segment(0, 2, 4, 6, "continue", 2), 0.5, config),
              segment_trial(5, Segment(1, 2, 2, 6, "backtrack", 0, {"learning_rate": (1e-4, 8e-5)}), 0.95, config)]
    segments = segments_frame(trials)
    edges = copy_edges(segments)
    assert edges.to_dict("records") == [{"trial": 5, "parent": 0, "origin": "backtrack", "x0": 2, "y0": 0, "x1": 2,
                                         "y1": 1}]
    chain = lineage_rows(segments, 5)
    assert list(chain["trial"]) == [0, 5]
    tree = lineage_figure(segments, edges, JUDGE, chain)
    (edge,) = [t for t in tree.data if t.meta["role"] == "backtrack"]
    assert list(edge.x) == [2, 2] and list(edge.y) == [0, 1 + BACKTRACK_SHIFT] and edge.line.dash == "dash"
    (line,) = [t for t in tree.data if t.meta == {"role": "segment", "trial": 5}]
    assert list(line.x) == [2, 6] and list(line.y) == [1 + BACKTRACK_SHIFT] * 2
    hover = next(t for t in tree.data if t.meta["role"] == "hover").hovertext
    assert "went back to #0 at update 2: learning_rate 0.0001 → 8e-05" in hover[5]


def test_the_winners_lineage_runs_through_its_copies(study: optuna.Study, segments: pd.DataFrame) -> None:
    assert [t.number for t in read_winner(study).trials] == [WINNER]
    chain = lineage_rows(segments, WINNER)
    assert list(chain["trial"]) == [1, 5, 6] and list(chain["origin"]) == ["start", "exploit", "exploit"]
    assert list(chain["member"]) == [1, 2, 0]  # it moved between slots at each copy
    assert lineage_rows(segments, 123).empty
    assert final_segments(segments) == [6, 7, 8]


def test_the_schedule_steps_where_the_copies_mutated() -> None:
    config = dict(SEGMENTS[WINNER][4])
    steps = schedule_frame(config, 6)
    assert list(steps["update"]) == [1, 2, 3, 4, 5, 6]
    assert list(steps["learning_rate"]) == [2e-4, 2e-4, 2.5e-4, 2.5e-4, 2.5e-4, 2.5e-4]
    assert list(steps["kl"]) == [0.1, 0.1, 0.1, 0.1, 0.08, 0.08]
    # The KL coefficient in force: kl_coef where the penalty is in the reward (gae's default), beta in the loss.
    assert kl_field(config) == "kl_coef"
    in_loss = {"advantage_estimator": "grpo", "beta": 0.02, "kl_coef_schedule": [[3, 0.03]]}
    assert kl_field(in_loss) == "beta" and list(schedule_frame(in_loss, 4)["kl"]) == [0.02, 0.02, 0.03, 0.03]
    assert kl_field({"advantage_estimator": "grpo", "kl_in_reward": True}) == "kl_coef"
    # A config that left a field to ppo_core's defaults still draws (an old study's, say).
    assert len(schedule_frame({}, 3)) == 3


def test_the_stitched_curve_is_the_final_segments_own_rows(url: str) -> None:
    metrics = read_metrics(create_engine(url), NAME)
    curves = stitched_curves(metrics, WINNER, JUDGE)
    assert set(curves["metric"]) == {JUDGE, "objective/scores", "eval/kl", "objective/kl"}
    judge = curves[curves["metric"] == JUDGE].set_index("update")["value"]
    # Updates 1-2 came from trial 1, 3-4 from trial 5, 5-6 from trial 6 itself; evaluations at even updates only.
    parents, starts = {6: 5, 5: 1}, {6: 4, 5: 2, 1: 0}
    assert list(judge.index) == [2, 4, 6]
    assert list(judge) == [pytest.approx(lineage_value(WINNER, u, parents, starts)) for u in (2, 4, 6)]
    assert list(curves.loc[curves["metric"] == "objective/kl", "update"]) == [1, 2, 3, 4, 5, 6]
    assert stitched_curves(metrics.iloc[0:0], WINNER, JUDGE).empty


def roles(figure: Any) -> list[dict[str, Any]]:
    return [trace.meta for trace in figure.data]


def test_the_figures_draw_every_segment_copy_and_end(segments: pd.DataFrame, url: str) -> None:
    chain = lineage_rows(segments, WINNER)
    tree = lineage_figure(segments, copy_edges(segments), JUDGE, chain)
    metas = roles(tree)
    assert [m["trial"] for m in metas if m["role"] == "segment"] == list(segments["trial"])
    assert [m["trial"] for m in metas if m["role"] == "copy"] == [5, 6]
    assert [m["trial"] for m in metas if m["role"] == "chosen"] == [1, 5, 6]
    assert {m["role"] for m in metas} >= {"end_pruned", "end_fail", "hover", "scale"}
    hover = next(t for t in tree.data if t.meta["role"] == "hover").hovertext
    assert "trial #5" in hover[5] and "copied #1: learning_rate 0.0002 → 0.00025" in hover[5]
    assert f"{JUDGE}: 0.99" in hover[6] and "none (pruned)" in hover[2]
    steps = schedule_figure(schedule_frame(dict(SEGMENTS[WINNER][4]), 6), "β (kl_coef)", [2, 4])
    assert [m["role"] for m in roles(steps)] == ["learning_rate", "kl"]
    assert all(trace.line.shape == "hv" for trace in steps.data)
    curves = stitched_curves(read_metrics(create_engine(url), NAME), WINNER, JUDGE)
    stitched = stitched_figure(curves, JUDGE, "gold", [2, 4])
    assert {m["role"] for m in roles(stitched)} == {JUDGE, "objective/scores", "eval/kl", "objective/kl"}
    assert json.loads(stitched.to_json())  # serialisable, as st.plotly_chart sends it


def test_a_study_with_no_population_has_no_segments(study: optuna.Study) -> None:
    plain = optuna.create_study()
    plain.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    assert segments_frame(plain.get_trials()).empty


def test_the_page_draws_its_three_figures(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORAGE_ENV, url)
    app = AppTest.from_file(str(APP), default_timeout=60)
    app.query_params["study"] = NAME
    app.run()
    app.switch_page("app_pages/population.py").run()
    assert not app.exception, [e.value for e in app.exception]
    assert [chart.key for chart in app.get("plotly_chart")] == ["chart_lineage", "chart_schedule", "chart_stitched"]
    assert app.selectbox(key="population_lineage").value == WINNER
    # Another member's run: its own lineage, schedule and rows.
    app.selectbox(key="population_lineage").set_value(8).run()
    assert not app.exception
    tree = json.loads(app.get("plotly_chart")[0].proto.spec)
    assert [t["meta"]["trial"] for t in tree["data"] if t["meta"]["role"] == "chosen"] == [1, 5, 8]
