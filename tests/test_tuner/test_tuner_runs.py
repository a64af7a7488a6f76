"""Real studies of a few tiny trials: pruning, failures, resuming, killed workers, parallel workers."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from helpers.ctrl_c import default_sigint, ignore_sigint
from helpers.studies import (
    TESTS_DIR,
    Gate,
    SignalWhenHeld,
    check_nothing_lost_or_duplicated,
    descendants,
    load,
    postgres_url,
    still_running,
    wait_for,
    write_study,
)
from optuna.trial import TrialState

from ppo_core.errors import sigterm_as_interrupt
from ppo_tune.cli import main
from tuner.production.validation import fresh_seeds
from tuner.run.worker import run_worker
from tuner.store.attrs import (
    BUDGET_ATTR,
    CPU_THREADS_ATTR,
    FAIL_REASON_ATTR,
    PRUNE_REASON_ATTR,
    PRUNED_AT_ATTR,
    SEED_ATTR,
)
from tuner.store.database import create_engine, open_storage
from tuner.store.records import read_metrics
from tuner.study.reports import trials_frame
from tuner.study.study_file import KLGuard, load_study_spec
from tuner.trial.kl_guard import KLGuardPruner, blowup_reason, forecast_lower_bound

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

# A learning rate and beta that push KL up within a few updates on the letter-counting reward.
BLOW_UP: dict[str, Any] = {
    "search_space": {"learning_rate": {"type": "float", "low": 2e-2, "high": 3e-2, "log": True}},
    "base": {"kl_coef": 0.0001, "total_episodes": 400},
    "kl_guard": {"threshold": 2.0, "predict": False},
    "n_trials": 1,
}


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Worker processes import the test reward functions by name, as users' own modules would be.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def test_blowup_rule_threshold_trend_and_non_finite() -> None:
    guard = KLGuard(threshold=10.0, window=3, min_updates=3, predict_min_fraction=0.5)
    assert blowup_reason([1.0, 2.0, 11.0], 50, guard) is None  # one batch over 10: the level (4.67) is not
    assert blowup_reason([9.0, 12.0, 11.0], 50, guard) is not None  # the level is (10.67)
    assert "passed the threshold" in blowup_reason([11.0], 50, guard)  # type: ignore[operator]
    assert "passed the threshold" in blowup_reason([0.5, 1.0, 40.0], 50, guard)  # type: ignore[operator]
    rising = [3.0, 4.5, 6.0, 7.5, 9.0]  # +1.5/update, exactly: over 10 within 3 updates from update 4 on
    assert "trend" in blowup_reason(rising, 50, guard)  # type: ignore[operator]
    assert blowup_reason(rising[:4], 50, guard) is None  # one forecast over 10 is not two updates running
    assert blowup_reason(rising, 5, guard) is None  # the budget ends before the line crosses
    assert blowup_reason([6.0, 6.5, 7.0, 7.5], 50, guard) is None  # +0.5/update: 9, not 10, in the 3 updates ahead
    assert blowup_reason([0.5, 1.0, 1.5, 2.0], 50, guard) is None  # early growth below half the threshold
    assert blowup_reason([6.0, 5.0, 6.0, 5.0], 50, guard) is None  # flat
    # Rising on average, but too noisy for the forecast's 95% bound; sure enough at 50%.
    noisy = [4.0, 7.0, 6.0, 9.0, 8.0]
    assert blowup_reason(noisy, 50, guard) is None
    assert "trend" in blowup_reason(noisy, 50, dataclasses.replace(guard, confidence=0.5))  # type: ignore[operator]
    assert "nan" in blowup_reason([1.0, float("nan")], 50, guard)  # type: ignore[operator]
    assert blowup_reason([50.0], 50, KLGuard(enabled=False)) is None


def test_forecast_lower_bound_is_the_regression_mean_response_bound_from_the_normal_equations() -> None:
    # The reference: beta = (X'X)^-1 X'y, se(x0' beta) = s sqrt(x0' (X'X)^-1 x0), and Student's t; numpy's algebra
    # rather than the closed form the guard uses.
    from scipy import stats  # type: ignore[import-untyped]

    rng = random.Random(3)
    for _ in range(50):
        n, ahead = rng.randint(3, 12), rng.randint(1, 10)
        values = [rng.gauss(0.2 * x, 1.0) for x in range(n)]
        confidence = rng.choice([0.5, 0.8, 0.95, 0.99])
        design = np.column_stack([np.ones(n), np.arange(n)])
        inverse = np.linalg.inv(design.T @ design)
        beta = inverse @ design.T @ np.array(values)
        noise = float(np.sum((np.array(values) - design @ beta) ** 2) / (n - 2))
        x0 = np.array([1.0, n - 1 + ahead])
        expected = x0 @ beta - stats.t.ppf(confidence, n - 2) * np.sqrt(noise * x0 @ inverse @ x0)
        assert forecast_lower_bound(values, ahead, confidence) == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert forecast_lower_bound([1.0, 3.0], 1, 0.95) == -math.inf  # two points leave nothing to measure noise with


def test_the_guard_does_not_cry_wolf_on_a_noisy_flat_kl_below_its_threshold() -> None:
    # Runs that hold at 3.5 nats with one batch's noise (sd 1): good runs by a threshold of 6, which the guard asks
    # about at each of 96 updates. The old rule (the last value, and the fitted slope to the run's end) stopped most.
    guard = KLGuard(threshold=6.0, window=5, min_updates=3, predict_min_fraction=0.5)
    rng = random.Random(5)
    runs = [[max(0.0, rng.gauss(3.5, 1.0)) for _ in range(96)] for _ in range(200)]
    stopped = sum(any(blowup_reason(kl[:u], 96, guard) for u in range(1, 97)) for kl in runs)
    assert stopped <= 10
    # A run that blows up (KL doubling every 3 updates from 0.5) is still stopped, within a few updates of 6 nats.
    blowing = [0.5 * 2 ** (u / 3) for u in range(40)]
    first = next(u for u in range(1, 41) if blowup_reason(blowing[:u], 96, guard))
    assert blowing[first - 1] < 2 * guard.threshold


def test_kl_guard_composes_with_median_pruner(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'p.db'}")
    pruner = KLGuardPruner(KLGuard(threshold=5.0), inner=optuna.pruners.MedianPruner(n_startup_trials=1))
    study = optuna.create_study(storage=storage, pruner=pruner, direction="maximize")
    good = study.ask()
    for step in range(3):
        good.report(1.0, step)
    study.tell(good, 1.0)
    blown = study.ask()
    blown.set_user_attr("kl_history", [1.0, 12.0])
    blown.report(5.0, 0)  # a good objective does not save a trial whose KL blew up
    assert blown.should_prune()
    weak = study.ask()
    weak.set_user_attr("kl_history", [1.0])
    weak.report(0.0, 0)
    assert weak.should_prune()  # the median pruner still works beside the guard
    fine = study.ask()
    fine.set_user_attr("kl_history", [1.0])
    fine.report(2.0, 0)
    assert not fine.should_prune()


def test_kl_blowup_is_pruned_with_reason_and_keeps_its_metrics(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, **BLOW_UP)
    spec = load_study_spec(path)
    run_worker(spec, n_trials=1, timeout=None, threads=None)
    (trial,) = load(path).get_trials()
    assert trial.state == TrialState.PRUNED
    assert "objective/kl" in trial.user_attrs[PRUNE_REASON_ATTR]
    assert "passed the threshold 2" in trial.user_attrs[PRUNE_REASON_ATTR]
    pruned_at = trial.user_attrs[PRUNED_AT_ATTR]
    assert 1 <= pruned_at < 25  # stopped early: the budget was 25 updates
    metrics = read_metrics(create_engine(spec.storage), spec.name)
    assert metrics["update"].tolist() == list(range(1, pruned_at + 1))
    assert metrics["objective/kl"].iloc[-1] > 2.0
    # What the guard saved, against running the trial to its end, is said where the trials are listed.
    assert main(["show", spec.name, "--storage", spec.storage]) == 0
    budget = trial.user_attrs[BUDGET_ATTR]
    assert f"early stopping saved {budget - pruned_at} of {budget} updates" in capsys.readouterr().out


def test_multi_objective_study_prunes_kl_blowup(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    objectives = [{"metric": "objective/scores", "direction": "maximize"},
                  {"metric": "objective/kl", "direction": "minimize", "reduce": "last"}]
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, objectives=objectives, **BLOW_UP)
    run_worker(load_study_spec(path), n_trials=1, timeout=None, threads=None)
    (trial,) = load(path).get_trials()
    assert trial.state == TrialState.PRUNED and "threshold" in trial.user_attrs[PRUNE_REASON_ATTR]


def test_failing_trials_are_recorded_and_the_study_goes_on(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    rewards = ["reward_functions:wrong_length", "reward_functions:nan_reward", "reward_functions:count_letter_a"]
    path = write_study(
        tmp_path, tiny_lm_dir, prompts_file, n_trials=3, sampler={"name": "grid"},
        search_space={"reward_model_path": {"type": "categorical", "choices": rewards}},
    )
    assert main(["run", str(path)]) == 0
    trials = {t.params["reward_model_path"]: t for t in load(path).get_trials()}
    assert trials[rewards[0]].state == TrialState.FAIL
    assert "returned 1 scores for" in trials[rewards[0]].user_attrs[FAIL_REASON_ATTR]
    assert trials[rewards[1]].state == TrialState.FAIL
    assert "objective/scores is nan at update 1" in trials[rewards[1]].user_attrs[FAIL_REASON_ATTR]
    assert trials[rewards[2]].state == TrialState.COMPLETE


def test_a_study_where_no_trial_completes_exits_1_and_says_why(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every trial failed and the run said nothing and exited 0.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2,
                       base={"reward_model_path": "reward_functions:raises"})
    assert main(["run", str(path)]) == 1
    error = capsys.readouterr().err
    assert "no trial completed" in error
    assert "RewardFunctionError: reward reward_functions:raises raised ValueError: this reward is broken" in error
    # Output that is not a terminal (here captured, as when piped to a file) keeps one line per event: each failed
    # trial's line ends with its reason, never wrapped at 80 columns.
    failed = [line for line in error.splitlines() if line.startswith("trial ") and "FAIL" in line]
    assert failed and all(line.endswith("this reward is broken)") for line in failed), failed


def test_a_dead_worker_is_named_with_how_it_died(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path,
                                                 gate: Gate) -> None:
    # A worker killed under ``ppo-tune run`` made it exit 1 without a word. (Two workers: a single one runs in
    # ppo-tune's own process.)
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, base={"reward_model_path": Gate.REWARD})
    runner = subprocess.Popen([sys.executable, "-m", "ppo_tune", "run", str(path), "--workers", "2"],
                              stderr=subprocess.PIPE, text=True)
    held = gate.held_process()
    worker = next(p for p in held.parents() if "tuner.run.worker" in " ".join(p.cmdline()))
    index = worker.cmdline()[worker.cmdline().index("--worker-index") + 1]
    worker.send_signal(signal.SIGKILL)
    wait_for(lambda: not still_running([held]), 60, "the dead worker's trial process to end")
    gate.open()  # for the other worker's trial, if it started one
    _, error = runner.communicate(timeout=120)
    assert runner.returncode == 1
    assert f"worker {index} was killed by signal SIGKILL" in error, error


# A TRL trial (trainer: trl-grpo) runs GRPO to the tokenizer's EOS, as TRL does.
TRL_GRPO: dict[str, Any] = {"trainer": "trl-grpo",
                            "base": {"advantage_estimator": "grpo", "num_generations": 4, "stop_token": "eos"}}


@pytest.mark.parametrize(("command", "trainer", "sigint"), [("validate", "ppo_core", "default"),
                                                           ("run", "trl-grpo", "ignored")])
def test_sigterm_stops_every_process_requeues_and_rerun_resumes(tmp_path: Path, tiny_lm_dir: Path,
                                                               prompts_file: Path, command: str, trainer: str,
                                                               sigint: str, gate: Gate) -> None:
    # A batch scheduler, timeout or kill stops a job with SIGTERM, to the command alone: it must end its workers and
    # their trials as Ctrl-C does (none outlives it), re-queue the running trial, and exit 143. A validation run, and
    # a trial in TRL's own trainer, are stopped and requeued alike (a ppo_core trial: the SLURM recipe's job that
    # tests/test_tuner/test_scale_out_recipes.py stops). A command started in the background, with SIGINT ignored
    # (inherited by every process it starts: tests/test_tuner/test_sigint_ignored.py), still stops: SIGTERM is what
    # it passes on, and nothing ignores SIGTERM.
    trl: dict[str, Any] = dict(TRL_GRPO) if trainer != "ppo_core" else {"base": {}}
    trl["base"] = {"reward_model_path": Gate.REWARD, **trl["base"]}
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=3, **trl)
    gate.let_pass(1)  # the first trial (or validation run) finishes; the second is held where SIGTERM finds it
    if command == "validate":
        gate.let_pass(2)  # and the study's own trial before them
        spec = load_study_spec(path)
        run_worker(spec, n_trials=1, timeout=None, threads=None)  # the study to validate
        arguments = ["validate", spec.name, "--storage", spec.storage, "--top-k", "1", "--seeds", "3"]
        study_path = None
    else:
        arguments, study_path = ["run", str(path)], path
    process = subprocess.Popen([sys.executable, "-m", "ppo_tune", *arguments], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True,
                               preexec_fn=ignore_sigint if sigint == "ignored" else default_sigint)
    watched = (lambda: load(study_path)) if study_path else (
        lambda: optuna.load_study(study_name=f"{load_study_spec(path).name}:validation",
                                  storage=load_study_spec(path).storage))

    def states() -> list[TrialState]:
        try:
            return [t.state for t in watched().get_trials(deepcopy=False)]
        except KeyError:
            return []

    held = gate.held_process()
    # A validation queues all its runs at once: the rest wait.
    assert [state for state in states() if state != TrialState.WAITING] == [TrialState.COMPLETE, TrialState.RUNNING]
    study_processes = descendants(process.pid)
    assert held in study_processes
    process.send_signal(signal.SIGTERM)  # to the command alone, not its group
    output = process.communicate(timeout=60)[0].decode()
    gate.open()  # for the rerun
    assert process.returncode == 143, output
    assert "rerun the same command to resume" in output
    wait_for(lambda: not still_running(study_processes), 30, "the stopped study's processes to end")
    trials = watched().get_trials()
    interrupted = [t for t in trials if t.state == TrialState.FAIL]
    assert len(interrupted) == 1 and "interrupted" in interrupted[0].user_attrs[FAIL_REASON_ATTR]
    assert [t.state for t in trials if t.user_attrs.get("retry_of") == interrupted[0].number] == \
        [TrialState.WAITING]  # queued again at once
    assert main(arguments) == 0
    finished = [t for t in watched().get_trials() if t.state == TrialState.COMPLETE]
    assert len(finished) == 3
    if command == "validate":  # the interrupted run's retry trained on its seed: the three fresh seeds, each once
        assert sorted(run.user_attrs[SEED_ATTR] for run in finished) == fresh_seeds(set(), 3)


def test_a_cpu_trial_records_its_thread_count_and_show_lists_it(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # On the CPU a run's numbers depend on its thread count (one configuration and seed validated at 0.7239 with 2
    # threads and 0.7154 with 1: benchmarks/README.md), which nothing recorded.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2)
    run_worker(load_study_spec(path), n_trials=1, timeout=None, threads=1)
    run_worker(load_study_spec(path), n_trials=2, timeout=None, threads=2)
    study = load(path)
    assert [t.user_attrs[CPU_THREADS_ATTR] for t in study.get_trials()] == [1, 2]
    assert trials_frame(study)["cpu_threads"].tolist() == [1, 2]
    assert main(["show", study.study_name, "--storage", load_study_spec(path).storage]) == 0
    assert "cpu_threads" in capsys.readouterr().out


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in this process, as in a suite started in the background (a script's ``&``, nohup, a CI runner):
    Python then raises no KeyboardInterrupt. Put back at the end."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def sigint_raises_though_the_suite_ignores_it(sigint_ignored: None, sigint_raises: None) -> None:
    """The tests that interrupt their own process start from SIGINT ignored, then take ``sigint_raises``
    (tests/conftest.py), as they must to hold however the suite was started: without it their signal would be lost
    and the worker would wait on its held trial. (A fixture's own fixtures are set up in the order it names them.)"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_second_interrupt_as_optuna_records_the_first_leaves_the_trial_failed_and_queued_again(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch,
    signum: signal.Signals, sigint_raises_though_the_suite_ignores_it: None,
) -> None:
    # A worker gets Ctrl-C twice: from the terminal and passed on by ppo-tune run (and a scheduler's SIGTERM to the
    # whole job twice likewise). The second, arriving as Optuna recorded the first, cut that short: the trial stayed
    # RUNNING, and a resume failed it for its heartbeat and queued a second retry of it.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, base={"reward_model_path": Gate.REWARD})
    tell = optuna.study._optimize._tell_with_warning

    def tell_as_a_second_signal_arrives(*args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signum)  # its handler runs here, before the tell, unless the signal is ignored
        return tell(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(optuna.study._optimize, "_tell_with_warning", tell_as_a_second_signal_arrives)
    caller_sigterm = signal.getsignal(signal.SIGTERM)
    if signum == signal.SIGTERM:
        sigterm_as_interrupt()  # as the worker's main does; pytest's own handler is put back at the end
    handlers_before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    interrupter = SignalWhenHeld(gate, signum)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):  # ppo_core.errors.Terminated for SIGTERM
            run_worker(load_study_spec(path), n_trials=1, timeout=None, threads=1)
    finally:
        interrupter.check()
        handlers_after = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, caller_sigterm)
    assert handlers_after == handlers_before  # the caller's handlers are back
    trials = load(path).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[0].user_attrs[FAIL_REASON_ATTR].startswith("interrupted")
    assert trials[1].user_attrs["retry_of"] == 0 and trials[1].system_attrs["fixed_params"] == trials[0].params


def test_an_interrupt_taken_by_another_thread_still_ends_the_wait_on_the_trial(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate, sigint_raises_though_the_suite_ignores_it: None
) -> None:
    # A process's signal may land on any of its threads (the heartbeat's, say); Python runs its handler in the main
    # thread only when that thread next runs, and a worker blocked without a bound on its trial's process never did.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, base={"reward_model_path": Gate.REWARD})
    interrupter = SignalWhenHeld(gate, signal.SIGINT, to_this_thread=True)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_worker(load_study_spec(path), n_trials=1, timeout=None, threads=1)
    finally:
        interrupter.check()
    trials = load(path).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[0].user_attrs[FAIL_REASON_ATTR].startswith("interrupted")


def test_three_workers_on_postgresql_lose_and_duplicate_nothing(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    url = postgres_url()
    name = f"pg_{os.getpid()}_{int(time.time())}"
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, name=name, n_trials=6, storage=url)
    assert main(["run", str(path), "--workers", "3"]) == 0
    check_nothing_lost_or_duplicated(path, n_trials=6)
    assert main(["list", "--storage", url]) == 0
