"""A study that tells the truth about its state: changed definitions, repeated failures, and dead workers' trials."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from helpers.studies import TESTS_DIR, load, write_study
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from ppo_tune.cli import main
from tuner.run.worker import run_worker
from tuner.store.attrs import FAIL_REASON_ATTR, RETRY_OF_ATTR
from tuner.store.database import GRACE_HEARTBEATS, RetryStaleTrial, open_storage
from tuner.study.spec_record import spec_changes
from tuner.study.study_file import load_study_spec
from tuner.trial.trial_function import run_trials

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Worker processes import the test reward functions by name, as users' own modules would be.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def _edit(path: Path, **changes: object) -> None:
    data = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data))


def test_definition_changes_name_the_field() -> None:
    stored = {"base": {"seed": 0, "kl_coef": 0.1}, "objectives": [{"metric": "a"}], "n_trials": 3}
    current = {"base": {"seed": 1, "kl_coef": 0.1}, "objectives": [{"metric": "a"}], "n_trials": 30}
    assert spec_changes(stored, current) == ["base.seed 0 -> 1"]  # n_trials may change freely
    assert spec_changes(stored, {**stored, "objectives": [{"metric": "b"}]}) == \
        ['objectives [{"metric": "a"}] -> [{"metric": "b"}]']
    assert spec_changes({"base": {"lr": 1e-5}}, {"base": {"lr": 0.00001}}) == []


def test_a_changed_definition_exits_2_unless_allowed(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A study file whose objectives or base differ from the stored study "resumed" it, did nothing and exited 0.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1)
    run_worker(load_study_spec(path), n_trials=1, timeout=None, threads=None)  # the stored study
    _edit(path, objectives=[{"metric": "objective/kl", "direction": "minimize"}], n_trials=2)
    assert main(["run", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "objectives" in error and "objective/scores" in error and "--allow-changes" in error
    assert "was created from a different study spec" in error
    assert len(load(path).get_trials()) == 1  # nothing ran

    _edit(path, objectives=[{"metric": "objective/scores"}], base={"seed": 3})
    assert main(["run", str(path)]) == 2
    assert "base.seed unset -> 3" in capsys.readouterr().err  # write_study leaves the seed to PPOConfig


def test_allow_changes_resumes_and_records_the_new_definition(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1)
    run_worker(load_study_spec(path), n_trials=1, timeout=None, threads=None)  # the stored study
    _edit(path, base={"num_ppo_epochs": 2}, n_trials=2)
    assert main(["run", str(path), "--allow-changes"]) == 0
    assert "study spec changed (--allow-changes): base.num_ppo_epochs 1 -> 2" in capsys.readouterr().err
    assert len(load(path).get_trials(states=(TrialState.COMPLETE,))) == 2
    assert main(["run", str(path)]) == 0  # the changed definition is now the study's own


def test_the_same_error_k_times_in_a_row_stops_the_study(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A broken setup failed every one of n_trials trials before the study gave up.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=8,
                       base={"reward_model_path": "reward_functions:raises"})
    assert main(["run", str(path)]) == 1
    trials = load(path).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL] * 3
    error = capsys.readouterr().err
    assert "stopped after 3 trials in a row failed with: RewardFunctionError" in error, error


# A resume right after a killed worker: tests/test_tuner/test_trial_resume.py, with the checkpoint it resumes from.


def test_a_running_trial_that_never_sent_a_heartbeat_is_failed_and_retried_once_past_the_grace(
    tmp_path: Path,
) -> None:
    # A Ctrl-C between Optuna's claim of a trial (RUNNING) and its first heartbeat left a trial no resume could
    # recover: Optuna counts only trials with a heartbeat as stale, so a rerun of validate waited on it forever.
    storage = open_storage(f"sqlite:///{tmp_path / 'x.db'}", heartbeat_interval=1)
    study = optuna.create_study(study_name="x", storage=storage)
    grace = GRACE_HEARTBEATS * 1
    distribution: dict[str, BaseDistribution] = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}

    def running(started: datetime.datetime) -> int:
        """A RUNNING trial started at ``started``, with no heartbeat: as a worker leaves it when stopped between
        Optuna's claim and the heartbeat thread's first beat."""
        return storage.create_new_trial(study._study_id, template_trial=optuna.trial.FrozenTrial(
            number=-1, state=TrialState.RUNNING, value=None, datetime_start=started, datetime_complete=None,
            params={"x": 0.5}, distributions=distribution, user_attrs={}, system_attrs={}, intermediate_values={},
            trial_id=-1))

    now = datetime.datetime.now()
    dead = running(now - datetime.timedelta(seconds=10 * grace))
    fresh = running(now)  # its worker may be about to send its first heartbeat
    optuna.storages.fail_stale_trials(study)
    assert storage.get_trial(dead).state == TrialState.FAIL
    assert storage.get_trial(dead).user_attrs[FAIL_REASON_ATTR] == "worker stopped sending heartbeats"
    assert storage.get_trial(fresh).state == TrialState.RUNNING
    retries = [t for t in study.get_trials() if t.user_attrs.get(RETRY_OF_ATTR) == storage.get_trial(dead).number]
    assert [t.state for t in retries] == [TrialState.WAITING]


@pytest.mark.parametrize("ends", ["with a value", "pruned"])
def test_a_worker_whose_trial_another_failed_as_stale_goes_on_to_the_next_trial(tmp_path: Path, ends: str) -> None:
    # A worker's heartbeats came late on a loaded machine: another worker failed its running trial as stale and
    # queued the retry, and the first worker, telling the trial's end, crashed on Optuna's "Cannot tell a FAIL
    # trial" (or the assertion Optuna raises over it when the trial returned a value), so ppo-tune run exited 1.
    storage = open_storage(f"sqlite:///{tmp_path / 'stale.db'}", heartbeat_interval=1)
    study = optuna.create_study(study_name="stale", storage=storage)
    calls = []

    def trial_function(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        calls.append(trial.number)
        if len(calls) == 1:  # what another worker's fail_stale_trials does to this running trial
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            RetryStaleTrial(1)(study, storage.get_trial(trial._trial_id))
            if ends == "pruned":
                raise optuna.TrialPruned()
        return x

    run_trials(study, trial_function, n_trials=3)
    trials = study.get_trials()
    assert calls == [0, 1, 2]  # the worker went on, and ended as many trials as it was asked to
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    assert trials[1].user_attrs[RETRY_OF_ATTR] == 0 and trials[1].params == trials[0].params  # the retry ran


def test_two_workers_never_claim_the_same_queued_trial_on_sqlite(tmp_path: Path) -> None:
    # Two validation workers both ran queued run 0 (pysqlite reads outside a transaction, so both saw it WAITING
    # and both set it RUNNING): its samples were written twice and the second worker crashed telling a FAIL trial.
    url = f"sqlite:///{tmp_path / 'race.db'}"
    study = optuna.create_study(study_name="race", storage=open_storage(url))
    for index in range(150):
        study.enqueue_trial({}, user_attrs={"index": index}, skip_if_exists=False)
    outputs = [tmp_path / f"claimed{index}.json" for index in range(2)]
    claimers = [subprocess.Popen([sys.executable, str(TESTS_DIR / "claim_queued.py"), url, str(out)],
                                 stderr=subprocess.PIPE, text=True) for out in outputs]
    errors = [claimer.communicate(timeout=300)[1] for claimer in claimers]
    assert [claimer.returncode for claimer in claimers] == [0, 0], errors
    first, second = (set(json.loads(out.read_text())) for out in outputs)
    assert not first & second
    # Each claimer may create one new trial when the other took the last queued one between its look and its ask.
    assert set(range(150)) <= first | second and len(first | second) <= 152


@pytest.mark.parametrize(("changes", "message"), [
    ({"objectives": [{"metric": "objective/gold_scor"}]},
     "objectives[0].metric: 'objective/gold_scor' is not a metric this study's runs report (did you mean"),
    ({"objectives": [{"metric": "eval/score"}]}, "set base.eval_steps"),
    ({"constraints": [{"metric": "objective/klx", "reduce": "max", "max": 5.0}]}, "constraints[0].metric"),
])
def test_a_metric_no_run_reports_exits_2_before_any_trial(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
    changes: dict[str, Any], message: str,
) -> None:
    # A study whose objective metric no run reports failed every trial (5 of them) and exited 0.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2, **changes)
    assert main(["run", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and message in error, error
    assert not list(tmp_path.glob("*.db"))  # no study, no trial
