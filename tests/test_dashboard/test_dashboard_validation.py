"""Validated results on the Study page (dashboard.validation_view): real Optuna studies, a tuned one and its
``:validation`` study holding runs as ``ppo-tune validate`` queues them (the tuner's attributes on each), read by
the pure frame and shown by the page in Streamlit's AppTest."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Literal

import optuna
import pandas as pd
import pytest
from optuna.distributions import BaseDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial
from streamlit.testing.v1 import AppTest

from dashboard.serve import STORAGE_ENV
from dashboard.validation_view import lengths_frame, validation_caption, validation_figure, validation_frame
from tuner.production.confidence import mean_interval
from tuner.production.validation import validation_study_name
from tuner.store.attrs import CARRIED_BY_ATTR, CONFIG_ATTR, PILOT_ATTR, SEED_ATTR, VALIDATES_ATTR, VALIDATION_OF_ATTR

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
NAME = "tuned"
# Tuning values by trial: trial 2 won the tuning, then trial 4, trial 1, trial 0, trial 3.
LARGER = "/models/larger"
TUNING = [0.50, 0.62, 0.80, 0.40, 0.70]
# Validation runs by source trial (fresh seeds 1000, 1001, ...): trial 4 holds up best, trial 2 falls back.
RUNS = {2: [0.61, 0.66, 0.58], 4: [0.69, 0.72, 0.70], 1: [0.55]}
FAILED = {1: 1}  # trial 1's second seed crashed
PENDING = {1: 1}  # and its third is still queued


def lr_trial(number: int, state: TrialState = TrialState.COMPLETE, value: float | None = None,
             seed: int = 0, validates: int | None = None) -> optuna.trial.FrozenTrial:
    config = {"learning_rate": 1e-5 * (number + 1), "seed": seed}
    attrs = {CONFIG_ATTR: config} if validates is None else {CONFIG_ATTR: config, VALIDATES_ATTR: validates,
                                                             SEED_ATTR: seed}
    params = {"learning_rate": config["learning_rate"]} if validates is None else {}
    distributions: dict[str, BaseDistribution] = (
        {"learning_rate": FloatDistribution(1e-6, 1e-3, log=True)} if validates is None else {})
    return create_trial(state=state, value=value, params=params, distributions=distributions, user_attrs=attrs)


def build(storage: str | optuna.storages.BaseStorage, direction: Literal["minimize", "maximize"] = "maximize",
          runs: dict[int, list[float]] = RUNS) -> tuple[optuna.Study, optuna.Study]:
    """The tuned study and its validation study, with runs as ``ppo-tune validate`` leaves them."""
    study = optuna.create_study(study_name=NAME, storage=storage, direction=direction)
    for number, value in enumerate(TUNING):
        study.add_trial(lr_trial(number, value=value))
    validation = optuna.create_study(study_name=validation_study_name(NAME), storage=storage, direction=direction)
    validation.set_user_attr(VALIDATION_OF_ATTR, NAME)
    for source, values in runs.items():
        for seed, value in enumerate(values, start=1000):
            validation.add_trial(lr_trial(source, value=value, seed=seed, validates=source))
        for offset in range(FAILED.get(source, 0)):
            validation.add_trial(lr_trial(source, TrialState.FAIL, seed=2000 + offset, validates=source))
    for source, count in PENDING.items():
        for offset in range(count):  # queued as validate queues them: a waiting trial with its config
            validation.enqueue_trial({}, user_attrs={CONFIG_ATTR: {"seed": 3000 + offset}, VALIDATES_ATTR: source,
                                                     SEED_ATTR: 3000 + offset})
    return study, validation


def test_each_validated_config_beside_its_tuning_value_with_the_change_of_rank() -> None:
    frame = validation_frame(*build(optuna.storages.InMemoryStorage()))
    assert list(frame["trial"]) == [4, 2, 1]  # by validated mean
    rows = frame.set_index("trial")
    for trial, values in RUNS.items():
        mean, low, high = mean_interval(values)
        assert rows.loc[trial, "mean"] == pytest.approx(statistics.fmean(values))
        assert rows.loc[trial, "tuning_value"] == TUNING[trial]
        if len(values) > 1:
            assert (rows.loc[trial, "ci_low"], rows.loc[trial, "ci_high"]) == pytest.approx((low, high))
            assert low < mean < high
        else:  # one run: a mean, no interval
            assert pd.isna(rows.loc[trial, "ci_low"]) and pd.isna(rows.loc[trial, "ci_high"])
    # The tuning ranks among the validated configurations only (trial 4 was the study's second best).
    assert list(rows["ranking"]) == ["tuning #2 → validated #1", "tuning #1 → validated #2",
                                     "tuning #3 → validated #3"]
    assert (rows.loc[1, "n"], rows.loc[1, "failed"], rows.loc[1, "pending"]) == (1, 1, 1)
    assert (rows.loc[4, "failed"], rows.loc[4, "pending"], rows.loc[4, "feasible_runs"]) == (0, 0, 3)
    caption = validation_caption(frame)
    # Trial 1's three seeds: one completed, one failed, one pending.
    assert caption == ("3 configurations rerun on fresh seeds (3 seeds each): 7 completed runs, 1 failed, 1 pending. "
                       "One completed run gives a mean but no interval.")


def test_minimising_studies_rank_the_lowest_first() -> None:
    frame = validation_frame(*build(optuna.storages.InMemoryStorage(), direction="minimize"))
    assert list(frame["trial"]) == [1, 2, 4]
    # Tuned lowest: trial 1 (0.62), then 4 (0.70), then 2 (0.80).
    assert list(frame["ranking"]) == ["tuning #1 → validated #1", "tuning #3 → validated #2",
                                      "tuning #2 → validated #3"]


def test_a_config_without_a_completed_run_has_no_validated_rank_yet() -> None:
    frame = validation_frame(*build(optuna.storages.InMemoryStorage(), runs={2: [0.6, 0.7], 1: []}))
    assert list(frame["trial"]) == [2, 1]
    assert pd.isna(frame["validated_rank"].iloc[1])
    assert frame["ranking"].iloc[1] == "tuning #2 → no completed run yet"


def test_no_validation_study_is_an_empty_frame() -> None:
    study, _ = build(optuna.storages.InMemoryStorage())
    assert validation_frame(study, None).empty


def test_the_figure_puts_each_tuning_value_beside_its_validated_interval() -> None:
    frame = validation_frame(*build(optuna.storages.InMemoryStorage()))
    tuning, validated = validation_figure(frame, "gold").data
    assert list(tuning.x) == ["#4", "#2", "#1"] and list(tuning.y) == [TUNING[4], TUNING[2], TUNING[1]]
    mean, low, high = mean_interval(RUNS[4])
    assert validated.y[0] == pytest.approx(mean)
    assert (validated.error_y.array[0], validated.error_y.arrayminus[0]) == pytest.approx((high - mean, mean - low))
    # The objective's whole label on the 320 px axis: it was cut off at both ends on one line.
    title = validation_figure(frame, "objective: eval/gold_score, mean of the last 2 values").layout.yaxis.title.text
    assert title == "objective: eval/gold_score,<br>mean of the last 2 values"


@pytest.fixture
def validated_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'validated.db'}"
    build(url)
    optuna.create_study(study_name="never-validated", storage=url).add_trial(lr_trial(0, value=0.5))
    monkeypatch.setenv(STORAGE_ENV, url)
    return url


def open_study_page(study: str) -> AppTest:
    app = AppTest.from_file(str(APP), default_timeout=60)
    app.query_params["study"] = study
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def test_study_page_shows_the_validated_table_and_chart(validated_storage: str) -> None:
    app = open_study_page(NAME)
    assert [s.value for s in app.subheader] == ["Validated on fresh seeds"]
    table = app.dataframe[0].value
    assert list(table["trial"]) == [4, 2, 1] and table["ranking"].iloc[0] == "tuning #2 → validated #1"
    (chart,) = [c for c in app.get("plotly_chart") if c.key == "validation_chart"]
    assert [trace["name"] for trace in json.loads(chart.proto.spec)["data"]] == [
        "tuning value (its seed)", "validated mean, 95% CI"]


@pytest.mark.parametrize("study", ["never-validated", validation_study_name(NAME)])
def test_study_page_without_validation_results_shows_none(validated_storage: str, study: str) -> None:
    # The validation study itself is a study like another (its runs' curves are worth a look); it has no
    # validation of its own.
    app = open_study_page(study)
    assert "Validated on fresh seeds" not in [s.value for s in app.subheader]
    assert not [c for c in app.get("plotly_chart") if c.key == "validation_chart"]


def build_with_lengths(storage: str | optuna.storages.BaseStorage) -> tuple[optuna.Study, optuna.Study]:
    """Trials of 1,536 episodes; trial 4 validated at its own length, at 6,144 (carried by step_mass) and on a
    larger policy at its own length (kl_pilot, after a pilot there), trial 2 only at 6,144 (as tuned)."""
    def config(number: int, seed: int, episodes: int = 1536, policy: str | None = None) -> dict[str, Any]:
        return {"learning_rate": 1e-5 * (number + 1), "seed": seed, "total_episodes": episodes,
                "sft_model_path": policy}

    study = optuna.create_study(study_name=NAME, storage=storage, direction="maximize")
    for number, value in enumerate(TUNING):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=value, user_attrs={CONFIG_ATTR: config(
            number, 0)}, params={"learning_rate": 1e-5 * (number + 1)},
            distributions={"learning_rate": FloatDistribution(1e-6, 1e-3, log=True)}))
    validation = optuna.create_study(study_name=validation_study_name(NAME), storage=storage, direction="maximize")
    validation.set_user_attr(VALIDATION_OF_ATTR, NAME)
    runs = [(4, 1536, None, None, [0.69, 0.72, 0.70]), (4, 6144, None, "step_mass", [0.70, 0.71]),
            (2, 6144, None, "as_tuned", [0.50, 0.55]), (4, 1536, LARGER, "as_tuned", [0.40, 0.42]),
            (4, 1536, LARGER, "kl_pilot", [0.75, 0.77])]
    for source, episodes, policy, rule, values in runs:
        for seed, value in enumerate(values, start=1000):
            attrs = {CONFIG_ATTR: config(source, seed, episodes, policy), VALIDATES_ATTR: source, SEED_ATTR: seed}
            if rule is not None:
                attrs[CARRIED_BY_ATTR] = rule
            if policy is not None and rule == "as_tuned":  # the pilot: no validation of anything
                attrs[PILOT_ATTR] = True
            validation.add_trial(create_trial(state=TrialState.COMPLETE, value=value, user_attrs=attrs))
    return study, validation


def test_a_production_length_is_shown_beside_the_tuned_lengths_value() -> None:
    study, validation = build_with_lengths(optuna.storages.InMemoryStorage())
    own = validation_frame(study, validation)
    assert list(own["trial"]) == [4] and own["n"].iloc[0] == 3  # the production runs are not the tuned length's
    frame = lengths_frame(study, validation)
    # Trial 4 on the larger policy at its own length: its pilot is not a validation, the rescaled runs are.
    larger = frame[frame["policy_model"] == LARGER].set_index("trial")
    assert list(larger.index) == [4] and larger.loc[4, "rule"] == "kl_pilot" and larger.loc[4, "n"] == 2
    assert larger.loc[4, "total_episodes"] == 1536 and larger.loc[4, "mean"] == pytest.approx(0.76)
    assert larger.loc[4, "held"] == "held"
    frame = frame[frame["policy_model"].isna()].set_index("trial")
    assert list(frame.index) == [2, 4] and set(frame["total_episodes"]) == {6144}
    assert frame.loc[4, "rule"] == "step_mass" and frame.loc[2, "rule"] == "as_tuned"
    # Trial 4 against its validated mean at 1,536; trial 2, never validated there, against its tuning value.
    assert frame.loc[4, "own_value"] == pytest.approx(statistics.fmean([0.69, 0.72, 0.70]))
    assert frame.loc[4, "change"] == pytest.approx(0.705 / statistics.fmean([0.69, 0.72, 0.70]) - 1)
    assert frame.loc[4, "held"] == "held" and frame.loc[4, "own_episodes"] == 1536
    assert frame.loc[2, "own_value"] == TUNING[2] and frame.loc[2, "held"] == "did not hold"
    assert frame.loc[2, "change"] == pytest.approx(0.525 / TUNING[2] - 1)
    assert lengths_frame(*build(optuna.storages.InMemoryStorage())).empty  # validated at the tuned length only


def test_study_page_shows_a_production_length(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'lengths.db'}"
    build_with_lengths(url)
    monkeypatch.setenv(STORAGE_ENV, url)
    app = open_study_page(NAME)
    assert [s.value for s in app.subheader] == ["Validated on fresh seeds",
                                                "Validated at a production length or policy"]
    table = app.dataframe[1].value
    assert list(table["trial"]) == [2, 4, 4] and list(table["held"]) == ["did not hold", "held", "held"]
    assert list(table["policy_model"].fillna("")) == ["", LARGER, ""]  # by trial, then length
