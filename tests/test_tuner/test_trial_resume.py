"""A study's trial interrupted after a checkpoint is queued again and continues from that checkpoint: its stored
updates, its intermediate values and its KL history are those of the trial never interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.ctrl_c import default_sigint
from helpers.studies import (
    TESTS_DIR,
    Gate,
    descendants,
    kill_worker_mid_trial,
    load,
    still_running,
    stored_rows,
    wait_for,
    write_study,
)
from optuna.trial import TrialState

from ppo_core.config.io import build_config
from ppo_core.metric_names import run_metrics
from ppo_core.run.checkpoint_files import checkpoints_dir, complete_checkpoints
from ppo_core.run.trainer import PPOTrainer
from ppo_tune.cli import main
from tuner.store.attrs import CONFIG_ATTR, CPU_THREADS_ATTR, FAIL_REASON_ATTR, KL_HISTORY_ATTR, RETRY_OF_ATTR
from tuner.study.spec_record import spec_changes
from tuner.study.study_file import load_study_spec
from tuner.trial.checkpoints import trial_checkpoints

pytestmark = pytest.mark.heavy  # starts processes and studies: scheduled first


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # The trials import the test reward functions by name, as users' own modules would be.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def test_a_sigterm_interrupted_trial_resumes_from_its_checkpoint_as_the_trial_never_interrupted(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate,
) -> None:
    # The held reward holds the trial at its second call: update 2's rollout (no samples or evaluations call it
    # before), after update 1's checkpoint. SIGTERM to ppo-tune run then interrupts the trial there.
    base = {"reward_model_path": Gate.REWARD, "num_sample_generations": 0, "save_steps": 1}
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, base=base)
    spec = load_study_spec(path)
    directory = trial_checkpoints(spec.storage, spec.name, 0)
    process = subprocess.Popen([sys.executable, "-m", "ppo_tune", "run", str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=default_sigint)
    held = gate.held_process()
    study_processes = descendants(process.pid)
    assert held in study_processes
    assert [update for update, _ in complete_checkpoints(checkpoints_dir(directory))] == [1]
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=60)[0].decode()
    gate.open()
    assert process.returncode == 143, output
    wait_for(lambda: not still_running(study_processes), 30, "the stopped study's processes to end")
    assert complete_checkpoints(checkpoints_dir(directory))  # kept for the retry

    assert main(["run", str(path)]) == 0
    interrupted, retry = load(path).get_trials()
    assert interrupted.state == TrialState.FAIL and retry.state == TrialState.COMPLETE
    assert retry.user_attrs[RETRY_OF_ATTR] == interrupted.number
    assert not directory.exists()  # the chain ended for good: its checkpoints are gone

    config = build_config({**retry.user_attrs[CONFIG_ATTR], "output_dir": str(tmp_path / "uninterrupted")})
    threads = torch.get_num_threads()
    torch.set_num_threads(retry.user_attrs[CPU_THREADS_ATTR])  # the sums' order, hence the numbers, depend on it
    try:
        whole = PPOTrainer(config).train().metrics
    finally:
        torch.set_num_threads(threads)
    first, resumed = stored_rows(spec.storage, interrupted.number), stored_rows(spec.storage, retry.number)
    assert [run_metrics(row) for row in resumed] == [run_metrics(row) for row in whole]
    # Update 1 is the interrupted trial's own row, timings and all, copied: the retry did not train it again.
    assert resumed[0] == first[0] and len(first) == 1
    # Optuna's pruner and the KL guard see every update, the copied one too.
    assert retry.intermediate_values == {u: retry.intermediate_values[u] for u in range(1, len(whole) + 1)}
    assert retry.intermediate_values[1] == interrupted.intermediate_values[1]
    assert retry.user_attrs[KL_HISTORY_ATTR] == [m["objective/kl"] for m in whole]


def test_how_often_trials_save_is_no_change_to_the_study() -> None:
    stored = {"base": {"learning_rate": 1e-3}}
    assert spec_changes(stored, {"base": {"learning_rate": 1e-3, "save_steps": 2, "save_total_limit": 2}}) == []
    assert spec_changes(stored, {"base": {"learning_rate": 2e-3, "save_steps": 2}}) == \
        ["base.learning_rate 0.001 -> 0.002"]


def test_a_resume_right_after_a_killed_worker_fails_its_trial_with_a_reason_and_retries_it_from_its_checkpoint(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate,
) -> None:
    # SIGKILL gives no worker a chance to queue its trial again: the run that follows finds it RUNNING with no
    # heartbeat, fails it and queues its retry (tuner.store.database.RetryStaleTrial), which must continue from the
    # checkpoint the dead trial wrote after update 1, not train update 1 again. Rerunning at once once left the dead
    # trial RUNNING and the study stopped one trial short; only a later run failed it, with an empty reason.
    base = {"reward_model_path": Gate.REWARD, "num_sample_generations": 0, "save_steps": 1}
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2, base=base)
    spec = load_study_spec(path)
    kill_worker_mid_trial(path, gate)
    assert [t.state for t in load(path).get_trials()] == [TrialState.RUNNING]  # nobody has noticed yet
    assert [update for update, _ in complete_checkpoints(checkpoints_dir(trial_checkpoints(spec.storage, spec.name,
                                                                                           0)))] == [1]
    assert main(["run", str(path)]) == 0  # at once: within the heartbeat grace period
    trials = load(path).get_trials()
    dead = trials[0]
    assert dead.state == TrialState.FAIL and dead.user_attrs[FAIL_REASON_ATTR] == "worker stopped sending heartbeats"
    [retry] = [t for t in trials if t.user_attrs.get(RETRY_OF_ATTR) == dead.number]
    assert retry.state == TrialState.COMPLETE and retry.params == dead.params
    assert retry.system_attrs["failed_trial"] == dead.number
    assert FAIL_REASON_ATTR not in retry.user_attrs  # the dead trial's reason stays with it
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2  # not one short
    first, resumed = stored_rows(spec.storage, dead.number), stored_rows(spec.storage, retry.number)
    # Update 1 is the dead trial's own row, timings and all, copied: the retry did not train it again.
    assert len(first) == 1 and resumed[0] == first[0] and len(resumed) == retry.user_attrs["budget_updates"]
