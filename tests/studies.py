"""Study files for tests: tiny real PPO trials on the conftest models, with a callable reward; and the processes a
study runs, followed through psutil."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
import yaml
from optuna.trial import TrialState

from tuner.attrs import KL_HISTORY_ATTR
from tuner.database import open_storage
from tuner.study_config import load_study_spec

TESTS_DIR = Path(__file__).parent


def write_study(directory: Path, lm_dir: Path, prompts: Path, name: str = "tiny", **overrides: Any) -> Path:
    """A study YAML in ``directory``; ``overrides`` replace top-level keys, ``base`` entries are merged."""
    study: dict[str, Any] = {
        "name": name,
        "n_trials": 4,
        "sampler": {"name": "random", "seed": 0},
        "pruner": {"name": "none"},
        "objectives": [{"metric": "objective/scores", "direction": "maximize", "reduce": "mean_last_k", "k": 2}],
        "kl_guard": {"threshold": 1000.0},
        "heartbeat_interval": 1,
        "base": {
            "task": None,
            "sft_model_path": str(lm_dir),
            "reward_model_path": "reward_functions:count_letter_a",
            "dataset_name": str(prompts),
            "response_length": 5,
            "per_device_train_batch_size": 8,
            "total_episodes": 64,
            "num_ppo_epochs": 1,
            "num_sample_generations": 2,
            "num_eval_prompts": 2,
            "stop_token": None,
        },
        "search_space": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True}},
    }
    base_overrides = overrides.pop("base", {})
    study.update(overrides)
    study["base"].update(base_overrides)
    for searched in study["search_space"]:
        study["base"].pop(searched, None)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def load(path: Path) -> optuna.Study:
    """The study a study file names, loaded from its storage."""
    spec = load_study_spec(path)
    return optuna.load_study(study_name=spec.name, storage=open_storage(spec.storage))


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def postgres_url() -> str:
    """The test PostgreSQL server's URL (``.ci/run`` starts it); a skip locally without one, a failure under CI."""
    url = os.environ.get("PPO_TUNE_POSTGRES_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("PPO_TUNE_POSTGRES_URL is not set: .ci/run must start PostgreSQL for these tests")
        pytest.skip("set PPO_TUNE_POSTGRES_URL to run the PostgreSQL tests")
    return url


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below ``pid`` now: workers, their fork servers and trial processes."""
    return psutil.Process(pid).children(recursive=True)


def still_running(processes: list[psutil.Process]) -> list[str]:
    """The processes of ``processes`` still alive (a zombie has ended; only its parent has not reaped it yet)."""
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{process.pid} {' '.join(process.cmdline())[:200]}")
        except psutil.NoSuchProcess:
            pass
    return alive


def running_trial_has_updated(path: Path) -> bool:
    """Whether a RUNNING trial of the study has reported its first update."""
    try:
        trials = load(path).get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    except KeyError:
        return False
    return any(KL_HISTORY_ATTR in trial.user_attrs for trial in trials)


def kill_worker_mid_trial(path: Path) -> None:
    """Start a worker on the study, SIGKILL it once its trial has reported an update, and wait for that trial's
    processes to end themselves: a dead worker, with its trial left RUNNING."""
    victim = subprocess.Popen([sys.executable, "-m", "tuner.worker", str(path), "--threads", "1"])
    wait_for(lambda: running_trial_has_updated(path), 120, "a running trial's first update")
    trial_processes = descendants(victim.pid)  # its fork server and the trial's own process
    assert trial_processes
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # The trial's process notices its worker's death and ends itself, rather than train on for nobody.
    wait_for(lambda: not still_running(trial_processes), 30, "the killed worker's trial process to end")
