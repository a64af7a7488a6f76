"""The scale-out recipes of docs/scale_out.md: the SLURM and Kubernetes recipes run one worker command, which is read
from the page and run as the SLURM script runs it, two jobs on one PostgreSQL study, one of them stopped
as ``scancel``, a time limit or an eviction stops it (SIGTERM): it ends every process it started, and the other job
runs its trial again; the Ray recipe's command is the one tests/test_tuner/test_ray_launcher.py runs."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.studies import Gate, descendants, load, postgres_url, still_running, wait_for, write_study
from optuna.trial import TrialState

from tuner.store.attrs import FAIL_REASON_ATTR, RETRY_OF_ATTR
from tuner.store.database import create_engine
from tuner.store.records import read_metrics

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs" / "scale_out.md"
RECIPE_STUDY = "studies/quickstart.yaml"
WORKER_COMMAND = ["ppo-tune", "run", RECIPE_STUDY, "--storage", "$PPO_TUNE_STORAGE", "--workers", "1"]
"""What every SLURM array task and every Kubernetes pod runs: one worker on the study's PostgreSQL storage."""


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def _slurm_line(text: str) -> str:
    """The line of the SLURM script that starts the worker."""
    [line] = [line for block in _blocks(text, "bash") for line in block.splitlines()
              if line.startswith("exec ppo-tune run")]
    return line


def _kubernetes_command(text: str) -> list[str]:
    [job] = [document for block in _blocks(text, "yaml") for document in yaml.safe_load_all(block)
             if isinstance(document, dict) and document.get("kind") == "Job"]
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    command: list[str] = container["command"]
    return command


def test_the_slurm_and_kubernetes_recipes_run_the_tested_worker_command() -> None:
    text = DOCS.read_text()
    assert shlex.split(_slurm_line(text).removeprefix("exec "), posix=False) == \
        [word.replace("$PPO_TUNE_STORAGE", '"$PPO_TUNE_STORAGE"') for word in WORKER_COMMAND]
    # Kubernetes expands $(NAME) from the container's env, as the shell expands $NAME.
    assert [word.replace("$(PPO_TUNE_STORAGE)", "$PPO_TUNE_STORAGE") for word in _kubernetes_command(text)] \
        == WORKER_COMMAND


def test_the_ray_recipe_runs_the_command_the_ray_tests_run() -> None:
    # test_ray_launcher.py runs this command (with --workers 1, to keep a test small) on a cluster ray start started,
    # from the machine of its head.
    [command] = [line.split("#")[0].split() for block in _blocks(DOCS.read_text(), "bash")
                 for line in block.splitlines() if line.startswith("ppo-tune run") and "--launcher ray" in line
                 and "--storage postgresql://" in line]
    assert command[:-1] == ["ppo-tune", "run", RECIPE_STUDY, "--launcher", "ray", "--storage"]


def _job(line: str, study: Path, storage: str) -> subprocess.Popen[bytes]:
    """The recipe's line run as the SLURM script runs it (bash, exec), on ``study``, with the job's environment."""
    environment = {**os.environ, "PPO_TUNE_STORAGE": storage,
                   "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    return subprocess.Popen(["bash", "-c", line.replace(RECIPE_STUDY, shlex.quote(str(study)))], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def test_jobs_share_a_study_and_a_stopped_jobs_trial_is_run_by_another(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate
) -> None:
    url = postgres_url()
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, name=f"recipe_{os.getpid()}_{int(time.time())}",
                       n_trials=2, storage=url, base={"reward_model_path": Gate.REWARD})
    line = _slurm_line(DOCS.read_text())
    first = _job(line, path, url)
    held = gate.held_process()  # the first job's trial
    first_processes = [*descendants(first.pid), held]  # its fork server and the trial's process
    second = _job(line, path, url)
    first.send_signal(signal.SIGTERM)  # to the job's process, which exec made ppo-tune itself
    output = first.communicate(timeout=60)[0].decode()
    assert first.returncode == 143, output
    assert "rerun the same command to resume" in output
    wait_for(lambda: not still_running(first_processes), 30, "the stopped job's processes to end")  # none outlives it
    [interrupted] = [t for t in load(path).get_trials() if t.state == TrialState.FAIL]
    assert interrupted.user_attrs[FAIL_REASON_ATTR].startswith("interrupted"), interrupted.user_attrs
    gate.open()
    # The other job runs the stopped job's trial again (as would a requeued job, or the Job's next pod), and ends
    # once the study has its n_trials.
    output = second.communicate(timeout=300)[0].decode()
    assert second.returncode == 0, output
    trials = load(path).get_trials()
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2
    # Nothing lost: the interrupted trial's retry completed, and nothing else failed; nothing stored twice.
    assert [t.state for t in trials if t.user_attrs.get(RETRY_OF_ATTR) == interrupted.number] == \
        [TrialState.COMPLETE]
    assert [t.number for t in trials if t.state == TrialState.FAIL] == [interrupted.number]
    metrics = read_metrics(create_engine(url), load(path).study_name)
    assert not metrics.duplicated(["trial_id", "update"]).any()


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # The jobs' trials import the test reward functions by name.
    tests_dir = str(Path(__file__).parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
