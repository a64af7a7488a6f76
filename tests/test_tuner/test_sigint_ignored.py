"""Ctrl-C reaching ``ppo-tune run`` from below a parent that ignores SIGINT, as a test runner started with ``&`` does.

A shell without job control starts a background command with SIGINT ignored (``ppo-tune run study.yaml &`` in a
script), so that the Ctrl-C meant for the foreground command, which reaches every process of the terminal's group,
leaves it alone. Python keeps a SIGINT that was ignored at its start ignored, raising no KeyboardInterrupt, and
``ppo-tune`` keeps to that convention: its workers and trials inherit the ignored SIGINT, and the study runs to its
end. A command given SIGINT's default action back (``helpers.ctrl_c.start_in_terminal``, as the interrupt tests start
theirs) stops cleanly at Ctrl-C, whatever ignores SIGINT above it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.ctrl_c import ctrl_c, ignore_sigint
from helpers.studies import TESTS_DIR, Gate, descendants, load, still_running, wait_for, write_study
from optuna.trial import TrialState

from tuner.store.attrs import FAIL_REASON_ATTR

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

# The parent: a process started with SIGINT ignored that starts the command in its own process group, either as it
# is (the command inherits the ignored SIGINT) or with SIGINT's default action back, as the interrupt tests do.
PARENT = """
import subprocess, sys
from helpers.ctrl_c import default_sigint
restore, command = sys.argv[1] == "restore", sys.argv[2:]
sys.exit(subprocess.call(command, preexec_fn=default_sigint if restore else None))
"""


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Worker processes import the test reward functions by name, and the parent imports helpers.ctrl_c.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.parametrize("restore", [True, False], ids=["sigint-restored", "sigint-inherited"])
def test_ctrl_c_below_a_parent_that_ignores_sigint(
    restore: bool, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2, base={"reward_model_path": Gate.REWARD})
    command = [sys.executable, "-m", "ppo_tune", "run", str(path)]
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "restore" if restore else "inherit", *command],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                              preexec_fn=ignore_sigint)
    gate.held_process()
    [running] = [t.number for t in load(path).get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    study_processes = descendants(parent.pid)  # ppo-tune, its worker, the fork server and the trial's process
    ctrl_c(parent)  # the parent ignores it; ppo-tune and everything below it get it too
    if not restore:
        gate.open()  # for the trials to end, as they should, SIGINT changing nothing
    output = parent.communicate(timeout=300)[0].decode()
    wait_for(lambda: not still_running(study_processes), 30, "the study's processes to end")
    trials = {t.number: t for t in load(path).get_trials()}

    if restore:
        assert parent.returncode == 130, output
        assert "rerun the same command to resume" in output
        assert trials[running].state == TrialState.FAIL
        assert "interrupted" in trials[running].user_attrs[FAIL_REASON_ATTR]
    else:
        # The SIGINT arrived mid-trial and changed nothing: that trial, and the study, went on to their end.
        assert parent.returncode == 0, output
        assert [trial.state for trial in trials.values()] == [TrialState.COMPLETE] * 2


def test_sigterm_stops_a_study_whose_workers_ignore_sigint(tmp_path: Path, tiny_lm_dir: Path,
                                                           prompts_file: Path, gate: Gate) -> None:
    # Started in the background (SIGINT ignored, inherited by every worker), ppo-tune run still stops everything at
    # SIGTERM: it passes SIGTERM on, which nothing ignores.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2, base={"reward_model_path": Gate.REWARD})
    command = [sys.executable, "-m", "ppo_tune", "run", str(path)]
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "inherit", *command], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=ignore_sigint)
    gate.held_process()
    study_processes = descendants(parent.pid)
    ppo_tune = next(process for process in study_processes if process.ppid() == parent.pid)
    ppo_tune.terminate()  # SIGTERM to the command alone
    output = parent.communicate(timeout=120)[0].decode()
    assert parent.returncode == 143, output
    wait_for(lambda: not still_running(study_processes), 30, "the study's processes to end")
    states = [t.state for t in load(path).get_trials()]
    assert TrialState.RUNNING not in states and TrialState.WAITING in states  # the running trial is queued again


# The tests that send SIGINT to the test process itself, while a worker in it waits on a held trial.
IN_PROCESS_SIGINT_TESTS = [
    "tests/test_tuner/test_tuner_runs.py::test_a_second_interrupt_as_optuna_records_the_first_leaves_the_trial_failed_and_queued_"
    "again[sigint]",
    "tests/test_tuner/test_tuner_runs.py::test_an_interrupt_taken_by_another_thread_still_ends_the_wait_on_the_trial",
]


def test_the_in_process_sigint_tests_hold_when_the_suite_starts_with_sigint_ignored(tmp_path: Path) -> None:
    # pytest started in the background by a script (or nohup, or a CI runner that does so) ignores SIGINT, and
    # Python then raises no KeyboardInterrupt: a test that interrupts its own process must give SIGINT Python's
    # handler itself, or its signal is lost and the worker waits on the held trial.
    root = TESTS_DIR.parent
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         f"--basetemp={tmp_path / 'inner'}", *IN_PROCESS_SIGINT_TESTS],
        cwd=root, preexec_fn=ignore_sigint, capture_output=True, text=True, timeout=400)
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "2 passed" in completed.stdout, completed.stdout[-3000:]
