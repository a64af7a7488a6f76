"""A study's hacking guard: bounds a held-out signal of hacking may not cross at any evaluation (a study file's
``hacking_guard``); a trial that crosses one stops there, pruned with the reason, and validation runs unguarded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.studies import TESTS_DIR, load, write_study
from optuna.trial import TrialState

from tuner.production.validation import validation_spec
from tuner.run.worker import run_worker
from tuner.store.attrs import PRUNE_REASON_ATTR
from tuner.study.constraints import Constraint
from tuner.study.study_file import StudySpecError, load_study_spec
from tuner.trial.reporter import guard_crossed

pytestmark = pytest.mark.heavy  # starts a study: scheduled first


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def test_a_bound_is_crossed_only_past_its_limit_and_only_where_the_metric_is_reported() -> None:
    bounds = [Constraint("eval/repeated_3grams", "last", 1, max=0.05), Constraint("eval/distinct_2grams", "last", 1,
                                                                                 min=0.6)]
    assert guard_crossed(bounds, {"objective/kl": 3.0}, 4) is None  # a training update: no evaluation to read
    assert guard_crossed(bounds, {"eval/repeated_3grams": 0.05, "eval/distinct_2grams": 0.6}, 8) is None
    assert guard_crossed(bounds, {"eval/repeated_3grams": 0.07, "eval/distinct_2grams": 0.9}, 8) == \
        "hacking guard: eval/repeated_3grams 0.07 above 0.05 at update 8"
    assert guard_crossed(bounds, {"eval/repeated_3grams": 0.0, "eval/distinct_2grams": 0.5}, 12) == \
        "hacking guard: eval/distinct_2grams 0.5 below 0.6 at update 12"


@pytest.mark.parametrize(("guard", "message"), [
    ({"metric": "eval/repeated_3grams"}, r"hacking_guard\[0\]: needs a max or a min"),
    ({"metric": "eval/repeated_3gram", "max": 0.05}, r"hacking_guard\[0\]\.metric: 'eval/repeated_3gram' is not a "
                                                     r"metric this study's runs report \(did you mean"),
    ({"metric": "eval/repeated_3grams", "reduce": "max", "max": 0.05}, r"hacking_guard\[0\]\.reduce: unknown key"),
])
def test_a_bad_guard_is_one_line_naming_it(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path,
                                           guard: dict[str, object], message: str) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, hacking_guard=[guard], base={"eval_steps": 2})
    with pytest.raises(StudySpecError, match=message) as error:
        load_study_spec(path)
    assert "\n" not in str(error.value)


def test_a_trial_that_crosses_the_guard_is_pruned_at_that_evaluation_and_validation_runs_unguarded(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    # No answers' word pairs can all be distinct beyond 1: the first evaluation (update 2 of 8) crosses.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, base={"eval_steps": 2},
                       hacking_guard=[{"metric": "eval/distinct_2grams", "min": 1.01}])
    spec = load_study_spec(path)
    run_worker(spec, n_trials=1, timeout=None, threads=None)
    (trial,) = load(path).get_trials()
    assert trial.state == TrialState.PRUNED
    assert trial.user_attrs[PRUNE_REASON_ATTR].startswith("hacking guard: eval/distinct_2grams ")
    assert trial.user_attrs[PRUNE_REASON_ATTR].endswith(" below 1.01 at update 2")
    assert validation_spec(spec).hacking_guard == []
