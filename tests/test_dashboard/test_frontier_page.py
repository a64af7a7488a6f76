"""The Frontier page and the estimator colouring, in Streamlit's AppTest, on synthetic studies with exact shapes:
one whose trials ran several estimators, and one without a gold score."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.frames import UNRECORDED, config_groups, grouping_options
from dashboard.serve import STORAGE_ENV
from dashboard.study_reader import StudyRef, build_study_view, open_reader
from tools.demo_study import DemoSpec, build_demo_study

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
ESTIMATORS = ("gae", "grpo", "rloo")
MIXED, NO_GOLD, PLAIN = "mixed-estimators", "no-gold", "plain"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('frontier') / 'studies.db'}"
    build_demo_study(url, DemoSpec(name=MIXED, n_trials=9, n_updates=30, sample_every=10, estimators=ESTIMATORS))
    build_demo_study(url, DemoSpec(name=NO_GOLD, n_trials=5, n_updates=20, sample_every=10, gold_score=False))
    build_demo_study(url, DemoSpec(name=PLAIN, n_trials=4, n_updates=40, sample_every=10))
    return url


def open_page(url: str, monkeypatch: pytest.MonkeyPatch, page: str, study: str) -> AppTest:
    monkeypatch.setenv(STORAGE_ENV, url)
    app = AppTest.from_file(str(APP), default_timeout=60)
    app.query_params["study"] = study
    app.run()
    app.switch_page(f"app_pages/{page}.py").run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def figures(app: AppTest) -> dict[str | None, dict[str, Any]]:
    """Each plotly chart's figure JSON by the chart's key (None for a chart given none)."""
    return {chart.key: json.loads(chart.proto.spec) for chart in app.get("plotly_chart")}


def roles(figure: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [t for t in figure["data"] if t.get("meta", {}).get("role") == role]


def test_config_groups_only_when_the_trials_differ(url: str) -> None:
    mixed = build_study_view(StudyRef(url, MIXED), open_reader(StudyRef(url, MIXED)).refresh())
    groups = config_groups(mixed, "advantage_estimator")
    assert groups == {n: ESTIMATORS[n % 3] for n in range(9)}
    assert grouping_options(mixed) == ["advantage_estimator"]
    plain = build_study_view(StudyRef(url, PLAIN), open_reader(StudyRef(url, PLAIN)).refresh())
    # The plain demo records no estimator at all: one shared label, so nothing to colour by.
    assert config_groups(plain, "advantage_estimator") == {} and grouping_options(plain) == []
    assert set(config_groups(plain, "num_ppo_epochs").values()) - {UNRECORDED} != set()


def test_frontier_page_shows_states_front_fit_and_paths(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    app = open_page(url, monkeypatch, "frontier", PLAIN)
    charts = figures(app)
    frontier = charts["chart_frontier"]
    states = {t["meta"]["state"] for t in roles(frontier, "points")}
    assert "COMPLETE" in states
    assert frontier["layout"]["yaxis"]["title"]["text"] == "gold score"
    # The demo's gold is 0.2 + 0.6 (1 - exp(-KL/3)) - 0.006 max(KL - 6, 0)^1.6 plus noise: it peaks near 7.9 nats.
    metrics = {m.label: m.value for m in app.metric}
    (star,) = roles(frontier, "kl_star")
    assert metrics["Gold peaks at"] == f"{star['x'][0]:.3g} nats"
    assert 5.0 < star["x"][0] < 12.0
    assert not app.warning  # gold is recorded and the peak lies inside the data
    # The front table's gold is the last point's (the demo's are training points, no held-out evaluation), told
    # apart from the objective by its label.
    front = json.loads(app.dataframe[-1].proto.columns)
    assert front["y"]["label"] == "gold score at its last update" and "not its objective" in front["y"]["help"]
    paths = charts["chart_trajectories"]
    drawn = {t["meta"]["trial"] for t in paths["data"] if "series" in t.get("meta", {})}
    peaks = {t["meta"]["trial"] for t in roles(paths, "gold_peak")}
    assert drawn and peaks == drawn
    assert not [r for r in app.radio if r.label == "Colour by"]  # one estimator: no grouping offered


def test_frontier_page_colours_by_estimator(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    app = open_page(url, monkeypatch, "frontier", MIXED)
    (picker,) = [r for r in app.radio if r.label == "Colour by"]
    assert picker.value == "advantage_estimator" and list(picker.options) == ["trial", "advantage_estimator"]
    frontier = figures(app)["chart_frontier"]
    assert {t["meta"]["group"] for t in roles(frontier, "points")} <= set(ESTIMATORS)
    fits = [d.value for d in app.dataframe if "group" in d.value.columns]
    assert fits and set(fits[0]["group"]) <= set(ESTIMATORS)
    picker.set_value("trial").run()
    assert not app.exception
    assert all("state" in t["meta"] for t in roles(figures(app)["chart_frontier"], "points"))


def test_curves_group_the_legend_by_estimator(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    app = open_page(url, monkeypatch, "curves", MIXED)
    kl = figures(app)["chart_kl"]
    lines = [t for t in kl["data"] if "trial" in t.get("meta", {}) and "role" not in t["meta"]]
    by_group: dict[str, set[str]] = {}
    for line in lines:
        by_group.setdefault(line["meta"]["group"], set()).add(line["line"]["color"])
    assert set(by_group) == set(ESTIMATORS)
    assert all(len(colors) == 1 for colors in by_group.values())  # one colour per estimator
    assert len({next(iter(c)) for c in by_group.values()}) == len(ESTIMATORS)
    legend = [t["name"] for t in lines if t.get("showlegend", True)]
    assert sorted(legend) == sorted(ESTIMATORS)


def test_frontier_page_without_gold_plots_the_proxy(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    app = open_page(url, monkeypatch, "frontier", NO_GOLD)
    assert any("no gold score" in w.value for w in app.warning)
    frontier = figures(app)["chart_frontier"]
    assert frontier["layout"]["yaxis"]["title"]["text"] == "proxy score"
    assert roles(frontier, "fit") == [] and not [m for m in app.metric if "kl_target" in m.label]
    paths = figures(app)["chart_trajectories"]
    assert {t["meta"]["series"] for t in paths["data"] if "series" in t.get("meta", {})} == {"proxy"}
    assert paths["layout"]["title"]["text"] == "Proxy score against sqrt(KL)" and "yaxis2" not in paths["layout"]
    assert {t["yaxis"] for t in paths["data"] if "series" in t.get("meta", {})} == {"y"}


def test_a_rerun_of_the_frontier_page_reads_the_peak_from_its_cache(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Reading the peak resamples the study (tuner.search.frontier_peak): uncached, it was most of a rerun's time
    # (0.25 s of a 200-trial study's, against the dashboard's 0.3 s budget; benchmarks.dashboard_read). A rerun with
    # nothing new in the study must take it from the cache.
    import tuner.search.frontier_points as frontier_points

    calls: list[int] = []
    real = frontier_points.frontier_peak  # what every reading of a peak runs, looked up in that module at each call

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(frontier_points, "frontier_peak", counting)
    app = open_page(url, monkeypatch, "frontier", MIXED)
    opened = len(calls)
    for _ in range(2):
        app.run()
        assert not app.exception, [e.value for e in app.exception]
    assert "chart_frontier" in figures(app) and len(calls) == opened
