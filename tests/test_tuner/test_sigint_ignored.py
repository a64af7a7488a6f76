"""Ctrl-C reaching ``ppo-tune run`` from below a parent that ignores SIGINT, as a test runner started with ``&`` does.

A shell without job control starts a background command with SIGINT ignored (``ppo-tune run study.yaml &`` in a
script), so that the Ctrl-C meant for the foreground command, which reaches every process of the terminal's group,
leaves it alone. Python keeps a SIGINT that was ignored at its start ignored, raising no KeyboardInterrupt, and
``ppo-tune`` keeps to that convention: its workers and trials inherit the ignored SIGINT, and the study runs to its
end. A command given SIGINT's default action back (``helpers.ctrl_c.default_sigint``, as an interactive shell gives
every command it starts) stops cleanly at Ctrl-C, whatever ignores SIGINT above it, and a rerun resumes the study.
(SIGTERM, which nothing ignores, stops a study started with SIGINT ignored: tests/test_tuner/test_tuner_runs.py starts
its SIGTERM test's ``ppo-tune run`` so, and its tests that interrupt their own process start from SIGINT ignored.)
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

from ppo_tune.cli import main
from tuner.store.attrs import FAIL_REASON_ATTR, RETRY_OF_ATTR

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


def _run_below_a_parent_ignoring_sigint(path: Path, restore: bool) -> subprocess.Popen[bytes]:
    """``ppo-tune run <path> --workers 1`` started by :data:`PARENT`, which ignores SIGINT and leads the process group
    a Ctrl-C reaches; the parent's exit status is the command's."""
    command = [sys.executable, "-m", "ppo_tune", "run", str(path), "--workers", "1"]
    return subprocess.Popen([sys.executable, "-c", PARENT, "restore" if restore else "inherit", *command],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=ignore_sigint)


def _running(path: Path) -> int:
    [running] = [t.number for t in load(path).get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    return running


def test_ctrl_c_ends_cleanly_whatever_ignores_sigint_above_and_a_rerun_resumes(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=3, base={"reward_model_path": Gate.REWARD})
    gate.let_pass(1)  # the first trial finishes; the second is held mid-run, where the Ctrl-C finds it
    parent = _run_below_a_parent_ignoring_sigint(path, restore=True)
    held = gate.held_process()
    assert [t.state for t in load(path).get_trials()] == [TrialState.COMPLETE, TrialState.RUNNING]
    running = _running(path)
    finished_before = {t.number: t.values for t in load(path).get_trials() if t.state == TrialState.COMPLETE}
    study_processes = descendants(parent.pid)  # ppo-tune, its fork server and the running trial's process
    assert held in study_processes
    ctrl_c(parent)  # the parent ignores it; ppo-tune, which passes it on to its workers, and its trial get it too
    output = parent.communicate(timeout=60)[0].decode()
    gate.open()  # for the rerun
    assert parent.returncode == 130, output
    assert "rerun the same command to resume" in output
    wait_for(lambda: not still_running(study_processes), 30, "the interrupted study's processes to end")
    interrupted = [t for t in load(path).get_trials() if t.state == TrialState.FAIL]
    assert [t.number for t in interrupted] == [running]
    assert "interrupted" in interrupted[0].user_attrs[FAIL_REASON_ATTR]

    assert main(["run", str(path)]) == 0
    trials = load(path).get_trials()
    completed = {t.number: t.values for t in trials if t.state == TrialState.COMPLETE}
    assert len(completed) == 3
    assert all(completed[number] == values for number, values in finished_before.items())
    retried = [t for t in trials if t.user_attrs.get(RETRY_OF_ATTR) == running]
    assert retried and retried[0].params == interrupted[0].params


def test_a_study_started_with_sigint_ignored_runs_on_through_ctrl_c_its_worker_in_ppo_tune_s_own_process(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2, base={"reward_model_path": Gate.REWARD})
    parent = _run_below_a_parent_ignoring_sigint(path, restore=False)
    held = gate.held_process()
    study_processes = descendants(parent.pid)  # ppo-tune, its fork server and the trial's process
    ppo_tune = next(process for process in study_processes if process.ppid() == parent.pid)
    # One worker has no process of its own (it paid its imports and a fork server a second time): its trials are
    # forked from ppo-tune's fork server. (Two have a process each: tests/test_tuner/test_tuner_runs.py kills one.)
    ancestors = held.parents()
    assert ppo_tune.pid in [p.pid for p in ancestors]
    assert not [p for p in ancestors if "tuner.run.worker" in " ".join(p.cmdline())], [p.cmdline() for p in ancestors]
    ctrl_c(parent)  # the parent ignores it, and so, inheriting the ignored SIGINT, does everything below it
    gate.open()  # for the trials to end, as they should, SIGINT changing nothing
    output = parent.communicate(timeout=300)[0].decode()
    wait_for(lambda: not still_running(study_processes), 30, "the study's processes to end")
    # The SIGINT arrived mid-trial and changed nothing: that trial, and the study, went on to their end.
    assert parent.returncode == 0, output
    assert [trial.state for trial in load(path).get_trials()] == [TrialState.COMPLETE] * 2
    assert "trial   0 COMPLETE" in output, output
