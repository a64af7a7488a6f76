"""Study files for tests: tiny real PPO trials on the conftest models, with a callable reward; and the processes a
study runs, followed through psutil."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
import sqlalchemy
import yaml
from optuna.trial import TrialState
from reward_functions import GATE_ENV
from sqlalchemy.engine import make_url

from ppo_core.errors import first_line
from tuner.store.attrs import RACE_OF_ATTR
from tuner.store.database import create_engine, open_storage
from tuner.store.records import count_rows, metrics_table, read_metrics, read_samples
from tuner.study.reports import updates_run
from tuner.study.study_file import load_study_spec

TESTS_DIR = Path(__file__).parent.parent  # tests/: the reward modules' directory, for the trials' path
SHIPPED_DIR = TESTS_DIR.parent / "studies"


def shipped_study_files() -> list[Path]:
    """The shipped study files (``ppo-tune run``): every studies/*.yaml with a search space, the rule
    tools/cli_surface.py reads them by; the others are run configs (``ppo-tune train``)."""
    return [path for path in sorted(SHIPPED_DIR.glob("*.yaml")) if "search_space" in yaml.safe_load(path.read_text())]


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


def stored_rows(storage: str, trial_number: int) -> list[dict[str, float]]:
    """The metrics a trial of the study in ``storage`` stored, update by update, as written."""
    query = sqlalchemy.select(metrics_table.c.metrics).where(metrics_table.c.trial_number == trial_number) \
        .order_by(metrics_table.c.update)
    with create_engine(storage).connect() as connection:
        return [json.loads(row) for row in connection.scalars(query)]


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
    """The URL of this test process's own PostgreSQL database: under pytest-xdist, one per worker, made anew (from
    the server and role that ``$PPO_TUNE_POSTGRES_URL`` names, which ``.ci/run`` starts) the first time a worker asks,
    so that two workers never share a study's tables; the named database itself in a single process. A skip locally
    without the variable; under CI a failure, as is a server or role that cannot be reached, named in one line."""
    url = os.environ.get("PPO_TUNE_POSTGRES_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("PPO_TUNE_POSTGRES_URL is not set: .ci/run must start PostgreSQL for these tests")
        pytest.skip("set PPO_TUNE_POSTGRES_URL to run the PostgreSQL tests")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return url
    if worker not in _worker_databases:
        try:
            _worker_databases[worker] = _fresh_database(url, worker)
        except Exception as error:  # psycopg's OperationalError and the like: a missing role, a server not running
            shown = make_url(url).render_as_string(hide_password=True)
            message = f"PostgreSQL at {shown} cannot make worker {worker}'s database: {first_line(error)}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    return _worker_databases[worker]


_worker_databases: dict[str, str] = {}


def _fresh_database(url: str, worker: str) -> str:
    """An empty database ``<database>_<worker>`` on the server of ``url``, made by its role (CREATEDB); its URL."""
    import psycopg

    base = make_url(url)
    name = f"{base.database}_{worker}"
    with psycopg.connect(base.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True, connect_timeout=10) as connection:
        # FORCE: a previous run's connections, should one have been left, do not keep its database alive.
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    return base.set(database=name).render_as_string(hide_password=False)


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
    reaches it, however fast or loaded the machine; a race the test means to provoke then happens on every run.

    ``passing`` trial processes (the first to reach their reward) go through unheld: a test that needs a finished
    trial before the held one lets one pass."""

    REWARD = "reward_functions:held"
    # Long enough for a trial to start on two loaded cores (seconds), short enough that a gate nothing reaches fails
    # its test well inside pytest's timeout, saying so.
    DEADLINE_S = 60.0

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory = directory
        self._returned: set[int] = set()
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "shut").touch()
        monkeypatch.setenv(GATE_ENV, str(directory))  # the study's processes inherit it; Ray's trials are given it

    def let_pass(self, trials: int) -> None:
        """Let the first ``trials`` trial processes run unheld."""
        (self.directory / "pass").write_text(str(trials))

    def held_process(self, timeout: float = DEADLINE_S) -> psutil.Process:
        """The process of a trial held now, one this gate has not returned before; an AssertionError saying what was
        seen when none is held within ``timeout`` seconds."""
        held: list[psutil.Process] = []

        def look() -> bool:
            for marker in self.directory.glob("held-*"):
                pid = int(marker.name.removeprefix("held-"))
                if pid in self._returned:
                    continue
                try:
                    held.append(psutil.Process(pid))
                except psutil.NoSuchProcess:  # held, then gone: killed by someone else, or the gate was opened
                    continue
                return True
            return False

        try:
            wait_for(look, timeout, "a trial held at the gate")
        except AssertionError:
            tickets = len(list(self.directory.glob("ticket-*")))
            raise AssertionError(f"no trial was held at the gate {self.directory} within {timeout:g} s: {tickets} "
                                 f"trial process(es) reached its reward, {len(self._returned)} held before") from None
        self._returned.add(held[0].pid)
        return held[0]

    def open(self) -> None:
        """Let every held trial, and every later one, go on."""
        (self.directory / "shut").unlink(missing_ok=True)


class SignalWhenHeld(threading.Thread):
    """Sends ``signum`` to this process once ``gate`` holds a trial, from a thread of its own (the main thread is
    busy in the worker that waits on the trial); ``to_this_thread``, to that thread alone. Should no trial be held,
    or the signal not end the wait, within the gate's deadline, it opens the gate, so that the trial ends and the
    main thread with it, and :meth:`check` raises what went wrong: never a test that hangs until pytest's timeout."""

    def __init__(self, gate: Gate, signum: signal.Signals, to_this_thread: bool = False) -> None:
        super().__init__(name="signal-when-held", daemon=True)
        self.gate, self.signum, self.to_this_thread = gate, signum, to_this_thread
        self.answered = threading.Event()  # the test sets it once the signal has ended the worker's wait
        self.error: str | None = None

    def run(self) -> None:
        try:
            self.gate.held_process()
        except AssertionError as error:
            self.error = str(error)
            self.gate.open()
            return
        if self.to_this_thread:  # as the kernel may deliver a process's signal to any thread that does not block it
            signal.pthread_kill(threading.get_ident(), self.signum)
        else:
            os.kill(os.getpid(), self.signum)
        if not self.answered.wait(Gate.DEADLINE_S):
            self.error = f"{self.signum.name} was sent while a trial was held, and the wait went on for " \
                         f"{Gate.DEADLINE_S:g} s: the signal never ended it"
            self.gate.open()

    def check(self) -> None:
        """Join the thread; an AssertionError with what went wrong, if anything did."""
        self.answered.set()
        self.join()
        if self.error is not None:
            raise AssertionError(self.error)


def check_nothing_lost_or_duplicated(path: Path, n_trials: int) -> None:
    """The study of ``path``, run by several workers or commands at once, finished at least ``n_trials`` trials,
    failed none, and stored every update of every trial, and its samples, exactly once."""
    spec = load_study_spec(path)
    trials = load(path).get_trials()
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) >= n_trials
    assert all(t.state != TrialState.FAIL for t in trials), [t.user_attrs for t in trials]
    # A racing re-run queued as the last trials ended stays queued for a later run (one of two runs of a parallel
    # study left one): it never started and has nothing stored. Nothing else may be left waiting.
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    assert all(RACE_OF_ATTR in t.user_attrs for t in waiting), [t.user_attrs for t in waiting]
    trials = [t for t in trials if t.state != TrialState.WAITING]
    engine = create_engine(spec.storage)
    metrics = read_metrics(engine, spec.name)
    # Every update of every trial is stored exactly once, and every trial's samples are there.
    assert metrics.groupby("trial_number").size().to_dict() == {t.number: updates_run(t) for t in trials}
    assert not metrics.duplicated(["trial_id", "update"]).any()
    samples = read_samples(engine, spec.name)
    assert set(samples["trial_number"]) == {t.number for t in trials}
    metric_rows, sample_rows = count_rows(engine, spec.name)
    assert metric_rows == len(metrics) and sample_rows == len(samples)


def kill_worker_mid_trial(path: Path, gate: Gate) -> None:
    """Start a worker on the study (whose reward is ``Gate.REWARD``), SIGKILL it while ``gate`` holds its trial, and
    wait for that trial's processes to end themselves: a dead worker, with its trial left RUNNING. The gate is open
    after."""
    victim = subprocess.Popen([sys.executable, "-m", "tuner.run.worker", str(path), "--threads", "1"])
    held = gate.held_process()
    trial_processes = descendants(victim.pid)  # its fork server and the trial's own process
    assert held in trial_processes, (held, trial_processes)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # The trial's process notices its worker's death and ends itself, rather than train on for nobody.
    wait_for(lambda: not still_running(trial_processes), 30, "the killed worker's trial process to end")
    gate.open()
