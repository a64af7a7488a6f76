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
from reward_functions import GATE_ENV

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


class Gate:
    """Holds trials mid-run for as long as a test takes to act on them: a trial whose reward is :attr:`REWARD` waits
    in it, from its second call, while the gate is shut. A trial seen held cannot end before the test's signal
    reaches it, however fast or loaded the machine. (Seen by its first update instead, a 20-update trial ran to its
    end before the kill in a fresh-clone CI run of 0cb86ab, and completed where it was to fail.)"""

    REWARD = "reward_functions:held"

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory = directory
        self._returned: set[int] = set()
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "shut").touch()
        monkeypatch.setenv(GATE_ENV, str(directory))  # the study's processes inherit it; Ray's trials are given it

    def held_process(self, timeout: float = 120) -> psutil.Process:
        """The process of a trial held now, one this gate has not returned before."""
        held: list[psutil.Process] = []

        def look() -> bool:
            for marker in self.directory.glob("held-*"):
                pid = int(marker.name.removeprefix("held-"))
                if pid not in self._returned and psutil.pid_exists(pid):
                    held.append(psutil.Process(pid))
                    return True
            return False

        wait_for(look, timeout, "a trial held at the gate")
        self._returned.add(held[0].pid)
        return held[0]

    def open(self) -> None:
        """Let every held trial, and every later one, go on."""
        (self.directory / "shut").unlink(missing_ok=True)


def kill_worker_mid_trial(path: Path, gate: Gate) -> None:
    """Start a worker on the study (whose reward is ``Gate.REWARD``), SIGKILL it while ``gate`` holds its trial, and
    wait for that trial's processes to end themselves: a dead worker, with its trial left RUNNING. The gate is open
    after."""
    victim = subprocess.Popen([sys.executable, "-m", "tuner.worker", str(path), "--threads", "1"])
    held = gate.held_process()
    trial_processes = descendants(victim.pid)  # its fork server and the trial's own process
    assert held in trial_processes, (held, trial_processes)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # The trial's process notices its worker's death and ends itself, rather than train on for nobody.
    wait_for(lambda: not still_running(trial_processes), 30, "the killed worker's trial process to end")
    gate.open()
