"""Every dashboard page in Streamlit's AppTest, on real tuner studies: what a user sees on each page.

Most tests read ``dash`` (tiny trials of known shapes: pruned, adaptive, fixed, failed); those about gold scores,
validation and estimators read tools.real_studies' studies on the built-in task; the multi-objective views read the
synthetic ``pareto`` study, the one two-objective study there is.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
import pytest
from helpers.dashboard_fixtures import (
    ADAPTIVE_TARGET,
    KL_THRESHOLD,
    PARETO,
    REAL,
    DashboardStudies,
    real_studies_url,
    shared_studies,
)
from optuna.distributions import FloatDistribution
from streamlit.testing.v1 import AppTest

from dashboard.frames import MISSING, PARTIAL, partial_column
from dashboard.frames import number as shown_number
from dashboard.optuna_views import available_views
from dashboard.serve import STORAGE_ENV
from dashboard.session import selection_from_table
from tools.real_studies import CUSTOM_REWARD, ESTIMATORS, HELDOUT, VALIDATION_SEEDS
from tuner.production.validation import load_validation, validation_results
from tuner.search.frontier_aim import aim_words, start_aim
from tuner.search.frontier_sampler import AIM_ATTR
from tuner.store.attrs import KL_HISTORY_ATTR, PRUNED_AT_ATTR, SPEC_ATTR
from tuner.store.database import create_engine
from tuner.store.records import read_metrics, read_samples
from tuner.study.spec import KLGuard
from tuner.trial.kl_guard import kl_level

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory, tiny_lm_dir: Path, prompts_file: Path) -> DashboardStudies:
    return shared_studies(tmp_path_factory, tiny_lm_dir, prompts_file)


@pytest.fixture
def open_page(studies: DashboardStudies, monkeypatch: pytest.MonkeyPatch) -> Any:
    return page_opener(studies.url, REAL, monkeypatch)


@pytest.fixture
def open_real_page(monkeypatch: pytest.MonkeyPatch) -> Any:
    return page_opener(real_studies_url(), HELDOUT, monkeypatch)


def page_opener(url: str, default_study: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``open_(page, study, selected)``: the app on ``url``, switched to ``page``, with no exception shown."""
    monkeypatch.setenv(STORAGE_ENV, url)

    def open_(page: str = "study", study: str = default_study, selected: list[int] | None = None) -> AppTest:
        app = AppTest.from_file(str(APP), default_timeout=60)
        app.query_params["study"] = study
        if selected is not None:
            app.session_state["selected_trials"] = selected
        app.run()
        if page != "study":
            app.switch_page(f"app_pages/{page}.py").run()
        assert_clean(app)
        return app

    return open_


def assert_clean(app: AppTest) -> None:
    assert not app.exception, [e.value for e in app.exception]


def figures(app: AppTest) -> dict[str | None, dict[str, Any]]:
    """Each plotly chart's figure JSON by the chart's key (None for a chart given none)."""
    return {chart.key: json.loads(chart.proto.spec) for chart in app.get("plotly_chart")}


def objective_name(url: str) -> str:
    """The real study's first objective, by the name the tuner gave it."""
    names = optuna.load_study(study_name=REAL, storage=url).metric_names
    assert names is not None  # the tuner names a study's objectives on its first run
    return names[0]


def trial_lines(figure: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {t["meta"]["trial"]: t for t in figure["data"] if "trial" in t.get("meta", {}) and "role" not in t["meta"]}


def array(values: Any) -> np.ndarray:
    """A trace's x or y: plotly writes numpy arrays as base64 typed arrays."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"])
    return np.asarray(values, dtype=float)


def same(left: Any, right: Any) -> bool:
    missing = pd.isna(left) and pd.isna(right)
    return bool(missing or left == right or (isinstance(left, float) and math.isclose(left, right)))


def test_study_page_counts_best_trial_and_table(open_page: Any, studies: DashboardStudies) -> None:
    app = open_page()
    assert [t.value for t in app.title] == ["Study"]
    assert {m.label: m.value for m in app.metric} == {"Trials": "4", "Complete": "2", "Pruned": "1", "Failed": "1"}
    assert any(m.value.startswith("**Best trial #") for m in app.markdown)
    shown = app.dataframe[0].value
    # The trial, its state, its objective, feasibility and KL first; the parameters after: at 1440 px they are what the
    # table is read for.
    objective = optuna.load_study(study_name=REAL, storage=studies.url).metric_names or ["value_0"]
    partials = [partial_column(name) for name in objective]  # the pruned trial's partial value, apart
    assert list(shown.columns)[:7] == ["number", "state", *objective, *partials, "feasible", "max_kl", "last_kl"]
    assert list(shown.columns)[-1].startswith("param:")
    assert shown.set_index("number").loc[studies.adaptive, "feasible"] in (True, False)  # judged once complete
    table = shown.set_index("number")
    # The pruned trial stopped before its planned end: the page says what that saved.
    counted = table[table["state"].isin(["COMPLETE", "PRUNED"])]
    saved = int((counted["budget_updates"] - counted["updates"]).sum())
    assert saved > 0 and any(m.value.startswith(f"**Early stopping**: saved {saved} of ") for m in app.markdown)
    assert table["state"].to_dict() == {studies.pruned: "PRUNED", studies.adaptive: "COMPLETE",
                                        studies.fixed: "COMPLETE", studies.failed: "FAIL"}
    assert f"passed the threshold {KL_THRESHOLD:g}" in table.loc[studies.pruned, "reason"]
    assert "objective/scores is nan" in table.loc[studies.failed, "reason"]
    assert table.loc[studies.adaptive, "updates"] == 8
    # Where the blow-up comes is the trainer's doing; the table must show the update the KL guard stopped at.
    pruned = optuna.load_study(study_name=REAL, storage=studies.url).trials[studies.pruned].user_attrs
    history = pruned[KL_HISTORY_ATTR]
    assert table.loc[studies.pruned, "updates"] == pruned[PRUNED_AT_ATTR] == len(history) > 1
    # The guard holds the threshold against KL's level, the mean of its last `window` updates.
    window = KLGuard().window
    assert max(kl_level(history[:update], window) for update in range(1, len(history))) <= KL_THRESHOLD \
        < kl_level(history, window)
    assert {"param:learning_rate", "objective/scores", "duration_s", "max_kl"} <= set(table.columns)
    assert app.sidebar.selectbox(key="study").options == sorted([PARETO, REAL])

    app.multiselect(key="study_state_filter").set_value(["PRUNED"]).run()
    assert app.dataframe[0].value["number"].tolist() == [studies.pruned]
    assert_clean(app)


def test_the_study_table_pins_the_scores_and_shares_one_number_format(open_page: Any,
                                                                     studies: DashboardStudies) -> None:
    # At 1440 px the parameters alone fill the width, so the score and KL columns are pinned, not left off to the
    # right. Numbers read one way on every page: not 0.00002929 in the table and 2.929e-05 elsewhere.
    app = open_page()
    name = objective_name(studies.url)
    config = json.loads(app.dataframe[0].proto.columns)
    pinned = {column for column, settings in config.items() if settings.get("pinned")}
    assert {"number", "state", name, partial_column(name), "feasible", "max_kl", "last_kl"} <= pinned
    assert not any(column.startswith("param:") for column in pinned)
    numeric = (name, partial_column(name), "param:learning_rate")
    assert {config[column]["type_config"]["format"] for column in numeric} == {"%.4g"}
    assert shown_number(2.929e-05) == f"{2.929e-05:.4g}"  # Compare's text: the same format


def test_study_page_shows_ranges_whose_best_trials_crowd_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ten trials of a study whose definition is stored; the best three sit at the top of the learning-rate range.
    url = f"sqlite:///{tmp_path / 'edge.db'}"
    study = optuna.create_study(storage=url, study_name="edge", direction="maximize")
    raw = {"type": "float", "low": 1e-6, "high": 5e-5, "log": True}
    study.set_user_attr(SPEC_ATTR, {"name": "edge", "search_space": {"learning_rate": raw}})
    for value in range(10):
        study.add_trial(optuna.trial.create_trial(
            value=float(value), params={"learning_rate": 4.5e-5 if value >= 7 else 7e-6},
            distributions={"learning_rate": FloatDistribution(1e-6, 5e-5, log=True)}))
    app = page_opener(url, "edge", monkeypatch)()
    assert [w.value.replace("\\", "") for w in app.warning] == [
        "**Edge of the search space**: learning_rate: the best 3 of 10 trials lie within 10% of the upper bound "
        "5e-05; widen the range above it"]


@pytest.mark.parametrize(("target", "shown"), [
    ("verl", "**Target trainer**: verl 0.9.1. Every trial computed what it computes, so `ppo-tune best --format "
             "verl` exports the winner exactly"),
    (None, "**Target trainer**: none named."),
])
def test_study_page_shows_the_target_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str | None,
                                              shown: str) -> None:
    url = f"sqlite:///{tmp_path / 'target.db'}"
    study = optuna.create_study(storage=url, study_name="target", direction="maximize")
    definition: dict[str, Any] = {"name": "target"}
    if target is not None:
        definition["target"] = target
    study.set_user_attr(SPEC_ATTR, definition)
    study.add_trial(optuna.trial.create_trial(value=1.0, params={"learning_rate": 1e-5},
                                              distributions={"learning_rate": FloatDistribution(1e-6, 5e-5)}))
    app = page_opener(url, "target", monkeypatch)()
    assert sum(m.value.startswith(shown) for m in app.markdown) == 1, [m.value for m in app.markdown]


def test_selection_is_shared_by_the_sidebar_table_and_charts(open_page: Any, studies: DashboardStudies) -> None:
    app = open_page()
    app.sidebar.multiselect(key="selected_trials").set_value([studies.adaptive]).run()
    # The table shows the shared selection as its own selected rows.
    assert app.session_state["trial_table"]["selection"]["rows"] == [studies.adaptive]
    app.switch_page("app_pages/curves.py").run()
    lines = trial_lines(figures(app)["chart_kl"])
    assert (lines[studies.adaptive]["opacity"], lines[studies.adaptive]["line"]["width"]) == (1.0, 3.0)
    assert {lines[n]["opacity"] for n in lines if n != studies.adaptive} == {0.18}
    app.toggle(key="curves_only_selected").set_value(True).run()
    assert set(trial_lines(figures(app)["chart_kl"])) == {studies.adaptive}
    assert_clean(app)
    # Selecting rows in the table replaces the selection of the rows shown; filtered-out trials keep theirs.
    assert selection_from_table([0, 2], [5, 6, 7], before=[1, 6]) == [1, 5, 7]


def test_curves_page_kl_beta_and_rewards(open_page: Any, studies: DashboardStudies) -> None:
    app = open_page("curves")
    assert [s.value for s in app.subheader] == ["KL", "Reward", "More metrics"]
    charts = figures(app)
    kl = charts["chart_kl"]
    lines = trial_lines(kl)
    assert set(lines) == {studies.pruned, studies.adaptive, studies.fixed, studies.failed}
    assert lines[studies.pruned]["line"]["dash"] == "dash" and lines[studies.failed]["line"]["dash"] == "dashdot"
    assert lines[studies.fixed]["line"]["dash"] == "solid"
    assert array(lines[studies.pruned]["y"]).max() > KL_THRESHOLD  # the blow-up that pruned it is on the chart
    roles = {t["meta"]["role"]: t for t in kl["data"] if "role" in t["meta"]}
    assert roles["threshold"]["y"] == [KL_THRESHOLD, KL_THRESHOLD]
    assert roles["target"]["y"] == [ADAPTIVE_TARGET, ADAPTIVE_TARGET]
    assert roles["target"]["meta"]["trial"] == studies.adaptive
    assert len(kl["data"]) == 6  # 4 trials, 1 KL target, 1 threshold
    assert set(trial_lines(charts["chart_beta"])) == {studies.adaptive}
    # The failed trial's score was NaN: it has no proxy curve.
    assert set(trial_lines(charts["chart_proxy"])) == {studies.pruned, studies.adaptive, studies.fixed}
    assert "chart_gold" not in charts and any("No gold score" in i.value for i in app.info)

    raw = array(lines[studies.fixed]["y"])
    app.slider(key="curves_smoothing").set_value(0.9).run()
    app.radio(key="curves_x").set_value("episode").run()
    smoothed = trial_lines(figures(app)["chart_kl"])[studies.fixed]
    assert array(smoothed["y"])[0] == raw[0] and array(smoothed["y"])[-1] != raw[-1]
    assert array(smoothed["x"])[-1] == 64  # 8 updates of 8 episodes
    app.multiselect(key="curves_more").set_value(["loss/value_avg"]).run()
    assert len(trial_lines(figures(app)["chart_loss/value_avg"])) >= 3
    assert_clean(app)


@pytest.mark.parametrize("name", [HELDOUT, CUSTOM_REWARD])
def test_curves_show_gold_scores_when_the_study_has_them(open_real_page: Any, name: str) -> None:
    # A built-in task's runs report a gold score every update; a reward function's runs have none to show.
    app = open_real_page("curves", study=name)
    charts = figures(app)
    stored = read_metrics(create_engine(real_studies_url()), name)
    assert set(trial_lines(charts["chart_proxy"])) == set(stored["trial_number"])
    if name == CUSTOM_REWARD:
        assert "objective/gold_score" not in stored or stored["objective/gold_score"].isna().all()
        assert "chart_gold" not in charts and any("No gold score" in i.value for i in app.info)
        return
    gold = trial_lines(charts["chart_gold"])
    assert set(gold) == set(stored["trial_number"]) and not app.info
    for number, line in gold.items():
        own = stored[stored["trial_number"] == number].sort_values("update")
        np.testing.assert_allclose(array(line["y"]), own["objective/gold_score"].to_numpy())


def test_study_page_shows_the_validated_configurations(open_real_page: Any) -> None:
    app = open_real_page()
    study = optuna.load_study(study_name=HELDOUT, storage=real_studies_url())
    results = validation_results(study, load_validation(HELDOUT, real_studies_url()))
    assert len(results) == 2 and all(r.n == VALIDATION_SEEDS for r in results)
    assert "Validated on fresh seeds" in [s.value for s in app.subheader]
    # Drawn above the trial table: each validated configuration, best validated mean first, with its runs' mean.
    validated = app.dataframe[0].value
    assert validated["trial"].tolist() == [r.trial for r in results]
    assert validated["n"].tolist() == [VALIDATION_SEEDS] * 2
    np.testing.assert_allclose(validated["mean"].to_numpy(), [r.interval[0] for r in results])
    assert set(app.dataframe[1].value["number"]) == {t.number for t in study.trials}
    # A study never validated has no such section.
    app = open_real_page(study=ESTIMATORS)
    assert "Validated on fresh seeds" not in [s.value for s in app.subheader]


def test_curves_colour_trials_by_their_estimator(open_real_page: Any) -> None:
    app = open_real_page("curves", study=ESTIMATORS)
    estimators = {t.number: t.params["advantage_estimator"]
                  for t in optuna.load_study(study_name=ESTIMATORS, storage=real_studies_url()).trials}
    assert len(set(estimators.values())) == 4
    colours = {n: line["line"]["color"] for n, line in trial_lines(figures(app)["chart_kl"]).items()}
    assert set(colours) == set(estimators)
    # One colour per estimator: trials that share one share it, and no two estimators share one.
    by_estimator = {e: {colours[n] for n in colours if estimators[n] == e} for e in set(estimators.values())}
    assert all(len(c) == 1 for c in by_estimator.values()) and len(set.union(*by_estimator.values())) == 4
    app.radio(key="curves_color_by").set_value("trial").run()
    assert len({line["line"]["color"] for line in trial_lines(figures(app)["chart_kl"]).values()}) == len(estimators)
    assert_clean(app)
    # Trials that all ran one estimator get no choice.
    assert not [r for r in open_real_page("curves").radio if r.key == "curves_color_by"]


def test_samples_page_shows_the_stored_generations(open_page: Any, studies: DashboardStudies) -> None:
    stored = read_samples(create_engine(studies.url), REAL)
    app = open_page("samples")
    assert [s.value for s in app.subheader] == ["Side by side over the run", "Every trial's answer at update 8"]
    assert len(app.selectbox(key="samples_prompt").options) == stored["prompt_index"].nunique() == 2
    table = app.dataframe[0].value.set_index("trial_number")
    assert set(table.index) == set(stored["trial_number"])
    for number, row in table.iterrows():
        expected = stored[(stored["trial_number"] == number) & (stored["prompt_index"] == 0)].iloc[-1]
        assert row["update"] == expected["update"] and row["response"] == expected["response"]
        assert same(row["score"], expected["score"])
    # The grid: a column per trial, a row per sampling point, every stored answer to the prompt in its cell.
    for prompt in (0, 1):
        app.selectbox(key="samples_prompt").set_value(prompt).run()
        columns = app.multiselect(key="samples_columns").value
        assert len(columns) >= 2
        grid = app.get("html")[0].proto.body
        own = stored[stored["trial_number"].isin(columns) & (stored["prompt_index"] == prompt)]
        cells = re.findall(r'<div style="white-space[^"]*">(.*?)</div>', grid)
        assert sorted(html.unescape(re.sub(r"</?mark[^>]*>", "", c)) for c in cells) == \
            sorted(r or "(empty response)" for r in own["response"])
    assert_clean(app)


def test_compare_page_side_by_side(open_page: Any, studies: DashboardStudies) -> None:
    stored = read_samples(create_engine(studies.url), REAL)
    app = open_page("compare")
    pair = [studies.fixed, studies.adaptive]
    app.multiselect(key="compare_trials").set_value(pair).run()
    assert [s.value for s in app.subheader] == ["Parameters", "Curves", "Final metrics", "Generations"]
    params = app.dataframe[0].value.set_index("setting")
    assert params.columns.tolist() == [f"#{n}" for n in pair] + ["differs"] and params.loc["learning_rate", "differs"]
    configs = app.dataframe[1].value.set_index("setting")
    assert configs.loc["kl_target", f"#{studies.adaptive}"] == f"{ADAPTIVE_TARGET:g}"
    assert configs.loc["kl_target", f"#{studies.fixed}"] == "—" and configs["differs"].all()
    final = app.dataframe[2].value
    assert final.loc["state"].tolist() == ["COMPLETE", "COMPLETE"] and "objective/kl" in final.index
    # The objective is labelled as the reduction it is, apart from the raw metrics beside it.
    objectives = [label for label in final.index if str(label).startswith("objective: ")]
    assert len(objectives) == 1 and objectives[0].endswith(", mean of the last 2 values"), final.index.tolist()
    charts = figures(app)
    assert set(trial_lines(charts["chart_compare_metric_left"])) == set(pair)
    assert set(trial_lines(charts["chart_compare_metric_right"])) == set(pair)
    # Generations at the last update both trials sampled, prompt by prompt, one column per trial.
    expected = [stored[(stored["trial_number"] == n) & (stored["prompt_index"] == p) & (stored["update"] == 8)]
                ["response"].item() for p in (0, 1) for n in pair]
    assert [c.value for c in app.code] == expected

    app.multiselect(key="compare_trials").set_value([studies.fixed]).run()
    assert any("at least two" in i.value for i in app.info) and not app.code
    assert_clean(app)


def test_a_setting_a_trial_does_not_use_reads_the_same_on_every_page(open_page: Any) -> None:
    # An adaptive-KL trial's kl_coef (None) reads the same in the Study table as on Compare ("—"), never "None".
    study = open_page(study=PARETO)
    table = study.dataframe[0].value.set_index("number")
    adaptive = int(table.index[table["param:kl_control"] == "adaptive"][0])
    fixed = int(table.index[table["param:kl_control"] == "fixed"][0])
    assert pd.isna(table.loc[adaptive, "param:kl_coef"])
    assert study.dataframe[0].proto.placeholder == MISSING  # what the browser draws for the missing cell
    compare = open_page("compare", study=PARETO)
    compare.multiselect(key="compare_trials").set_value([adaptive, fixed]).run()
    params = compare.dataframe[0].value.set_index("setting")
    assert params.loc["kl_coef", f"#{adaptive}"] == MISSING and params.loc["kl_target", f"#{fixed}"] == MISSING
    assert all(frame.proto.placeholder == MISSING for frame in [*study.dataframe, *compare.dataframe])


def test_a_pruned_trials_partial_value_is_marked_and_sorted_apart(open_page: Any, studies: DashboardStudies) -> None:
    # Optuna stores a pruned trial's last intermediate value as its value; in the objective's column it would outrank
    # every complete trial (here 0.8125 against 0.1875) and sorting would mix them.
    name = objective_name(studies.url)
    partial = optuna.load_study(study_name=REAL, storage=studies.url).trials[studies.pruned].value
    assert partial is not None
    app = open_page()
    table = app.dataframe[0].value.set_index("number")
    assert table[name].dropna().index.tolist() == [studies.adaptive, studies.fixed]  # complete trials only
    assert table[partial_column(name)].dropna().to_dict() == {studies.pruned: partial}
    columns = list(app.dataframe[0].value.columns)
    assert columns.index(partial_column(name)) == columns.index(name) + 1
    compare = open_page("compare")
    compare.multiselect(key="compare_trials").set_value([studies.fixed, studies.pruned]).run()
    final = compare.dataframe[2].value
    objective = next(label for label in final.index if str(label).startswith("objective: "))
    assert final.loc[objective, f"#{studies.pruned}"] == f"{partial:.4g} ({PARTIAL})"
    assert not final.loc[objective, f"#{studies.fixed}"].endswith(f"({PARTIAL})")
    assert any("(partial)" in c.value for c in compare.caption)
    assert_clean(compare)


def test_a_copied_link_opens_the_same_view(studies: DashboardStudies, monkeypatch: pytest.MonkeyPatch) -> None:
    # Smoothing, the x-axis, the chosen metrics, the Analysis view and the Compare set live in the URL with the study
    # and the selected trials, so a copied link opens the same view.
    monkeypatch.setenv(STORAGE_ENV, studies.url)

    def opened(page: str, **params: str) -> AppTest:
        app = AppTest.from_file(str(APP), default_timeout=60)
        app.query_params.update({"study": REAL, **params})
        app.run()
        app.switch_page(f"app_pages/{page}.py").run()
        assert_clean(app)
        return app

    curves = opened("curves", curves_x="episode", curves_smoothing="0.5", curves_more="objective/entropy")
    assert curves.radio(key="curves_x").value == "episode" and curves.slider(key="curves_smoothing").value == 0.5
    assert curves.multiselect(key="curves_more").value == ["objective/entropy"]
    curves.slider(key="curves_smoothing").set_value(0.3).run()
    assert curves.query_params["curves_smoothing"] in ("0.3", ["0.3"])  # written back: a copied link keeps it
    pair = [studies.fixed, studies.pruned]
    compare = opened("compare", compare_trials=",".join(map(str, pair)))
    assert compare.multiselect(key="compare_trials").value == pair
    analysis = opened("analysis", analysis_view="Timeline")
    assert analysis.segmented_control[0].value == "Timeline"
    # A hand-edited value the page cannot take falls back to its default, with no error.
    assert opened("curves", curves_x="fortnight", curves_smoothing="lots").radio(key="curves_x").value == "update"


def test_compare_slider_reaches_each_trials_own_last_update(open_page: Any, studies: DashboardStudies) -> None:
    # With a pruned trial in the set, the slider must not stop at the pruned trial's last update: the finished
    # trial's final generations are shown too.
    stored = read_samples(create_engine(studies.url), REAL)
    app = open_page("compare")
    pair = [studies.fixed, studies.pruned]
    app.multiselect(key="compare_trials").set_value(pair).run()
    last = {n: int(stored.loc[stored["trial_number"] == n, "update"].max()) for n in pair}
    assert last[studies.pruned] < last[studies.fixed]
    slider = app.select_slider[0]
    assert max(slider.options, key=int) == str(last[studies.fixed]) and slider.value == last[studies.fixed]
    # At the end: the finished trial's final generation beside the pruned trial's last one, said to be its last.
    expected = [stored[(stored["trial_number"] == n) & (stored["prompt_index"] == 0) & (stored["update"] == last[n])]
                ["response"].item() for n in pair]
    assert [c.value for c in app.code][:2] == expected
    assert any(f"update {last[studies.pruned]} (its last)" in c.value for c in app.caption)
    assert_clean(app)


@pytest.mark.parametrize("study", [REAL, PARETO])
def test_analysis_page_draws_every_optuna_view_or_says_why_not(open_page: Any, study: str) -> None:
    app = open_page("analysis", study=study, selected=[0, 2] if study == PARETO else [1, 2])
    views = available_views(multi_objective=study == PARETO)
    selected_marks = {}
    assert ("Pareto front" in views) == (study == PARETO)
    outcomes, objective_choices = {}, {}
    for view in views:
        app.session_state["analysis_view"] = view
        app.run()
        assert_clean(app)
        charts = figures(app)
        outcomes[view] = "chart" if charts else app.info[0].value
        objective_choices[view] = [len(r.options) for r in app.radio if r.key == "analysis_objective"]
        if charts:
            assert charts["chart_analysis"]["data"], view
            selected_marks[view] = any((t.get("meta") or {}).get("role") == "selected"
                                       for t in charts["chart_analysis"]["data"])
    # The selected (complete) trials are marked on the views that show trials one by one.
    assert selected_marks["Optimization history"] and selected_marks["Slice"] and not \
        selected_marks.get("Parameter importances")
    assert outcomes["Optimization history"] == outcomes["Timeline"] == outcomes["Slice"] == "chart"
    if study == REAL:  # one searched parameter
        assert "two searched parameters" in outcomes["Contour"]
    else:
        assert outcomes["Pareto front"] == outcomes["Contour"] == "chart"
        assert objective_choices["Slice"] == [2] and objective_choices["Pareto front"] == []


def test_health_page_names_the_signs_and_the_advice(open_page: Any, studies: DashboardStudies) -> None:
    app = open_page("health")
    assert {m.label: m.value for m in app.metric}["Critical"] == "2"
    table = app.dataframe[0].value.set_index("trial")
    assert set(table.index) == {studies.pruned, studies.failed}
    assert table.loc[studies.pruned, "signs"] == "KL above the blow-up threshold"
    assert "objective/scores became non-finite" in table.loc[studies.failed, "signs"]
    errors = [e.value for e in app.error]
    blow_up = next(e for e in errors if e.startswith("**KL above the blow-up threshold**"))
    assert f"(threshold {KL_THRESHOLD:g}" in blow_up and "Lower the learning rate or raise β" in blow_up
    assert any("check that the reward never returns NaN" in e for e in errors)

    app.radio(key="health_show").set_value("All trials").run()
    assert len(app.dataframe[0].value) == 4
    assert len(app.success) == 2  # the two complete trials: no warning signs
    assert_clean(app)


def test_auto_refresh_runs_the_page_body_as_a_fragment(open_page: Any) -> None:
    app = open_page("curves")
    app.sidebar.toggle(key="auto_refresh").set_value(True).run()
    assert_clean(app)
    assert "chart_kl" in figures(app)


def test_pages_without_studies_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no studies/ here
    app = AppTest.from_file(str(APP), default_timeout=60).run()
    assert_clean(app)
    assert "No study databases" in app.sidebar.warning[0].value
    assert "No study to show" in app.info[0].value
    monkeypatch.setenv(STORAGE_ENV, f"sqlite:///{tmp_path / 'missing.db'}")
    app = AppTest.from_file(str(APP), default_timeout=60).run()
    assert_clean(app)
    assert "no study database at" in app.sidebar.error[0].value
    assert not (tmp_path / "missing.db").exists()  # reading never creates a database


def test_table_columns_are_plain_values(open_page: Any) -> None:
    # The table's frame is what st.dataframe sorts and filters: every cell a plain value, no objects.
    frame = open_page().dataframe[0].value
    assert all(pd.api.types.is_scalar(v) for v in frame.to_numpy().ravel())


def test_study_page_says_where_a_frontier_guided_search_aims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'aim.db'}"
    study = optuna.create_study(storage=url, study_name="aim", direction="maximize")
    study.set_user_attr(SPEC_ATTR, {"name": "aim"})
    aims = [{**start_aim(0).to_dict(), "predicted_ln_kl": None, "predicted_sd": None, "trials_measured": 0},
            {"kind": "peak", "center": math.log(1.5), "spread": 0.2, "target": math.log(1.6),
             "reason": "the objective peaks at 1.5 nats (1.3 to 1.7 in 80% of resampled studies; 6 trials' 24 "
                       "evaluations)", "predicted_ln_kl": math.log(1.55), "predicted_sd": 0.3, "trials_measured": 6}]
    for number, aim in enumerate(aims):
        study.add_trial(optuna.trial.create_trial(
            value=float(number), params={"learning_rate": 1e-5}, user_attrs={AIM_ATTR: aim},
            distributions={"learning_rate": FloatDistribution(1e-6, 5e-5, log=True)}))
    app = page_opener(url, "aim", monkeypatch)()
    shown = [m.value.replace("\\", "") for m in app.markdown if m.value.startswith("**Frontier-guided search**")]
    assert shown == [f"**Frontier-guided search**: {aim_words(aims[1], 1)}."]
    assert "trial 1 aimed at 1.6 nats of held-out KL: the objective peaks at 1.5 nats" in shown[0]
