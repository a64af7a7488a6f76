"""``--launcher ray`` on real Ray clusters that the tests start (``ray start``; no mocks: the ``ray`` extra is part of
the test install, scripts/setup.sh). Most tests share one single-node cluster (``ray start --head --num-cpus 4
--num-gpus 4``: Ray's own testing advice, a small local cluster, with logical GPUs so that packing can be seen on a
machine without any): a study of tiny trials runs and validates there and stores what the local launcher stores,
trials of 2 GPUs run two at a time, a trial whose process or Ray worker is killed fails with the reason and is
retried, SIGTERM stops the study and a rerun finishes it. The last tests share a cluster of three nodes on this
machine (a head that runs no task, and two nodes of one CPU, each a raylet of its own, as Ray's own multi-node tests
make them): SQLite is refused there, and a node lost mid-trial (its raylet killed) fails the trial with the reason
and the retry runs on the other node. Each cluster is started once per module: a cluster's start costs seconds of
the 2 cores CI has."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
from helpers.studies import (
    TESTS_DIR,
    Gate,
    descendants,
    load,
    postgres_url,
    still_running,
    wait_for,
    write_study,
)
from optuna.trial import FrozenTrial, TrialState

from ppo_tune.cli import main
from tuner.production.validation import validation_study_name
from tuner.store.attrs import FAIL_REASON_ATTR, RETRY_OF_ATTR, TRAINED_BY_ATTR, VALIDATES_ATTR
from tuner.store.database import create_engine
from tuner.store.records import read_metrics, read_samples
from tuner.study.reports import updates_run
from tuner.study.study_file import load_study_spec
from tuner.trial.ray_launch import RAY_TASK_ATTR, lost_reason, recorded_address_file

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

RAY = str(Path(sys.executable).with_name("ray"))


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Trials import the test reward functions by name; the Ray tasks get PYTHONPATH from the worker that runs them.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def _start_node(*arguments: str, log: Path) -> subprocess.Popen[bytes]:
    """``ray start --block ...``: the node's processes live as long as this one, and SIGTERM to it stops them all
    (never ``ray stop``, which would stop every Ray cluster of the machine's user)."""
    with log.open("wb") as output:
        return subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *arguments], stdout=output,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop_nodes(*nodes: subprocess.Popen[bytes]) -> None:
    for node in nodes:  # all at once: each takes seconds to stop its processes
        node.send_signal(signal.SIGTERM)
    for node in nodes:
        try:
            node.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()


@pytest.fixture(scope="module")
def ray_auth_disabled() -> Iterator[None]:
    """Ray's token authentication off, for the clusters and for ppo-tune's drivers, which inherit it: the clusters
    listen on this machine only, and the tests own them."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        yield
    finally:
        os.environ.pop("RAY_AUTH_MODE", None)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory, ray_auth_disabled: None) -> Iterator[str]:
    """A single-node cluster of 4 logical GPUs and 4 logical CPUs (a trial asks a CPU per process: two trials of two
    processes take 4; each process runs one thread); its address, which it records where ``ray start`` records it,
    for ppo-tune to find."""
    port = _free_port()
    head = _start_node("--head", "--port", str(port), "--num-cpus", "4", "--num-gpus", "4",
                       "--include-dashboard", "false", log=tmp_path_factory.mktemp("ray") / "head.log")
    address_file = recorded_address_file()
    wait_for(lambda: address_file.is_file() and address_file.read_text().strip().endswith(f":{port}")
             and _answers(address_file.read_text().strip()), 120, "the Ray head to start")
    try:
        yield address_file.read_text().strip()
    finally:
        _stop_nodes(head)


@pytest.fixture(scope="module")
def ray_three_nodes(tmp_path_factory: pytest.TempPathFactory, ray_auth_disabled: None) -> Iterator[str]:
    """A cluster of three nodes on this machine: a head that runs no task (no CPU, no GPU; ppo-tune's drivers connect
    to it, as Ray connects a driver to the head of its machine) and two nodes of one CPU, where the trials run; its
    address. Each node has a Ray directory of its own, away from the one ``ray start`` records clusters in."""
    logs = tmp_path_factory.mktemp("ray_three_nodes")
    ray_dirs = [tempfile.mkdtemp(prefix="ray", dir="/tmp") for _ in range(3)]  # short: they hold Unix sockets
    address = f"127.0.0.1:{_free_port()}"
    nodes = [_start_node("--head", "--port", address.rpartition(":")[2], "--num-cpus", "0", "--num-gpus", "0",
                         "--include-dashboard", "false", "--temp-dir", ray_dirs[0], log=logs / "head.log")]
    try:
        wait_for(lambda: _answers(address), 120, "the Ray head to start")
        nodes += [_start_node("--address", address, "--num-cpus", "1", "--num-gpus", "0", "--temp-dir", ray_dir,
                              log=logs / f"node{number}.log") for number, ray_dir in enumerate(ray_dirs[1:], 1)]
        # ray start says so once its node is registered with the cluster.
        wait_for(lambda: all("Ray runtime started" in (logs / f"node{number}.log").read_text(errors="replace")
                             for number in (1, 2)), 120, "both nodes to join")
        yield address
    finally:
        _stop_nodes(*nodes)
        for ray_dir in ray_dirs:
            shutil.rmtree(ray_dir, ignore_errors=True)


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def _trial_processes(storage: str) -> list[psutil.Process]:
    """The study's trial processes, wherever Ray started them (below its raylet, not below ppo-tune)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        if "tuner.trial.process" in command and storage in command:
            found.append(process)
    return found


def test_without_ray_the_launcher_exits_2_saying_what_to_install(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file)
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does where the extra is not installed
    assert main(["run", str(path), "--launcher", "ray"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "Ray is not installed" in error and "pip install -e '.[ray]'" in error, error
    assert not Path(load_study_spec(path).storage.removeprefix("sqlite:///")).exists()  # nothing was created
    assert main(["run", str(path), "--ray-address", "127.0.0.1:1"]) == 2
    assert "--ray-address: only with --launcher ray" in capsys.readouterr().err


NODE_DIED = ("Task failed because the node it was running on is dead or unavailable. Node IP: 10.0.0.7, node ID: "
             "2ff8511a1a79cf9e8adfe5d0aa2c3b6bc5fc4ac6e997da65afe1f1f4. This can happen if the node was preempted, "
             "had a hardware failure, or its raylet crashed unexpectedly.")  # Ray 2.60's own message


@pytest.mark.parametrize(("error", "reason"), [
    (lambda ray: ray.exceptions.NodeDiedError(NODE_DIED),
     "Ray task lost: the node running it died (NodeDiedError, node 2ff8511a1a79 at 10.0.0.7)"),
    (lambda ray: ray.exceptions.WorkerCrashedError(),
     "Ray task lost: the Ray worker running it died (WorkerCrashedError)"),
    (lambda ray: ray.exceptions.OutOfMemoryError("Task was killed due to the node running low on memory."),
     "Ray task lost: Ray killed its worker, its node being short of memory (OutOfMemoryError)"),
    (lambda ray: ray.exceptions.OwnerDiedError("ab" * 14, None, ""),  # a kind of ObjectLostError
     "Ray task lost: Ray lost its result (OwnerDiedError)"),
    (lambda ray: ray.exceptions.RaySystemError("the GCS went away"),  # none named: Ray's own first line
     "Ray task lost: System error: the GCS went away (RaySystemError)"),
])
def test_a_lost_task_s_reason_says_what_ray_said_happened(error: Callable[[Any], Exception], reason: str) -> None:
    import ray

    assert lost_reason(error(ray)) == reason


def _user_attr_keys(trials: list[FrozenTrial]) -> set[str]:
    return {key for trial in trials for key in trial.user_attrs}


def test_a_study_runs_and_validates_on_ray_and_stores_what_the_local_launcher_stores(
    ray_head: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    local = write_study(tmp_path, tiny_lm_dir, prompts_file, name="local", n_trials=1)
    on_ray = write_study(tmp_path, tiny_lm_dir, prompts_file, name="on_ray", n_trials=1)
    assert main(["run", str(local)]) == 0
    # The Ray recipe's command (docs/scale_out.md): no --ray-address, ppo-tune finds the cluster ray start recorded
    # on this machine.
    on_ray_storage = load_study_spec(on_ray).storage
    assert main(["run", str(on_ray), "--launcher", "ray", "--storage", on_ray_storage, "--workers", "1"]) == 0
    studies = {path.stem: (load(path), load_study_spec(path)) for path in (local, on_ray)}
    local_trials = studies["local"][0].get_trials()
    ray_trials = studies["on_ray"][0].get_trials()
    assert [t.state for t in ray_trials] == [TrialState.COMPLETE]
    assert _user_attr_keys(ray_trials) == _user_attr_keys(local_trials)
    tables = {}
    for name, (study, spec) in studies.items():
        engine = create_engine(spec.storage)
        metrics, samples = read_metrics(engine, spec.name), read_samples(engine, spec.name)
        trials = study.get_trials()
        assert metrics.groupby("trial_number").size().to_dict() == {t.number: updates_run(t) for t in trials}
        assert set(samples["trial_number"]) == {t.number for t in trials}
        tables[name] = (set(metrics.columns), set(samples.columns))
    assert tables["on_ray"] == tables["local"]
    # Ray ran each trial's task with one of its (logical) GPUs and one CPU.
    held = [t.system_attrs[RAY_TASK_ATTR]["resources"] for t in ray_trials]
    assert held == [{"GPU": 1.0, "CPU": 1.0}], held

    # validate takes the same launcher: its runs are Ray tasks too, recorded as the local launcher records them.
    assert main(["validate", "on_ray", "--storage", on_ray_storage, "--top-k", "1", "--seeds", "1",
                 "--launcher", "ray", "--ray-address", ray_head, "--workers", "1"]) == 0
    [run] = optuna.load_study(study_name=validation_study_name("on_ray"), storage=on_ray_storage).get_trials()
    assert run.state == TrialState.COMPLETE and run.user_attrs[VALIDATES_ATTR] == ray_trials[0].number
    assert run.system_attrs[RAY_TASK_ATTR]["resources"] == {"GPU": 1.0, "CPU": 1.0}


def test_a_trial_in_trls_own_trainer_runs_on_ray(
    ray_head: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    # trainer: trl-grpo under --launcher ray: the Ray task runs TRL's GRPOTrainer and stores what a local one does.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, name="trl_on_ray", n_trials=1, trainer="trl-grpo",
                       base={"advantage_estimator": "grpo", "num_generations": 4, "stop_token": "eos"})
    spec = load_study_spec(path)
    assert main(["run", str(path), "--launcher", "ray", "--ray-address", ray_head, "--workers", "1"]) == 0
    [trial] = load(path).get_trials()
    assert trial.state == TrialState.COMPLETE and trial.user_attrs[TRAINED_BY_ATTR].endswith(" GRPOTrainer")
    assert trial.system_attrs[RAY_TASK_ATTR]["resources"] == {"GPU": 1.0, "CPU": 1.0}
    metrics = read_metrics(create_engine(spec.storage), spec.name)
    assert len(metrics) == updates_run(trial) and metrics["trl/reward"].notna().all()


def test_trials_of_two_gpus_run_two_at_a_time_on_four(
    ray_head: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    # Heartbeats every 10 s, not the helper's 1 s: four trial processes and Ray on 2 cores delayed a worker's beats
    # past the 1 s helper's 4 s grace, and another worker failed its running trial as stale (a full suite in CI).
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=3, processes_per_trial=2, heartbeat_interval=10)
    # Three workers ask Optuna for three trials at once: Ray must queue the third until two GPUs are free.
    assert main(["run", str(path), "--launcher", "ray", "--ray-address", ray_head, "--workers", "3"]) == 0
    trials = load(path).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    tasks = {t.number: t.system_attrs[RAY_TASK_ATTR] for t in trials}
    assert all(task["resources"]["GPU"] == 2.0 and len(task["gpu_ids"]) == 2 for task in tasks.values()), tasks
    # At every task's start, the tasks running then (itself included): at most two, holding different GPUs.
    for task in tasks.values():
        running = [other for other in tasks.values() if other["started"] <= task["started"] < other["ended"]]
        assert len(running) <= 2, tasks
        held = [gpu for other in running for gpu in other["gpu_ids"]]
        assert len(held) == len(set(held)), tasks
    assert max(sum(other["started"] <= task["started"] < other["ended"] for other in tasks.values())
               for task in tasks.values()) == 2, tasks  # two did run together
    # The trial Ray held back started its task only once another had ended, well after Optuna gave it out.
    last = max(tasks, key=lambda number: tasks[number]["started"])
    asked = trials[last].datetime_start.timestamp()  # type: ignore[union-attr]
    assert tasks[last]["started"] >= min(task["ended"] for number, task in tasks.items() if number != last) - 0.5
    # After Optuna gave it out, by however little: a margin in seconds failed on a fast run (0.94 s, CI).
    assert tasks[last]["started"] > asked, (asked, tasks)


def test_a_killed_trial_process_or_ray_worker_fails_its_trial_with_the_reason_and_sigterm_requeues_the_retry(
    ray_head: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate
) -> None:
    # Three faults in one study, one chain of retries: the trial's own process is killed, then its retry's Ray worker
    # (the task's process, the trial process's parent), each as the kernel's OOM killer or a node's shutdown would;
    # then the command itself is stopped with SIGTERM while the second retry runs, and a rerun finishes the study.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, base={"reward_model_path": Gate.REWARD})
    storage = load_study_spec(path).storage
    arguments = ["run", str(path), "--launcher", "ray", "--ray-address", ray_head, "--workers", "1"]
    runner = subprocess.Popen([sys.executable, "-m", "ppo_tune", *arguments], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)
    killed = []
    for victim in ("trial process", "Ray worker"):
        trial_process = gate.held_process()
        ray_worker = trial_process.parent()
        assert ray_worker is not None, trial_process
        assert ray_worker.name().startswith("ray::"), ray_worker  # Ray names its workers by the task they run
        (trial_process if victim == "trial process" else ray_worker).send_signal(signal.SIGKILL)
        killed.append(trial_process)
        wait_for(lambda: len(load(path).get_trials(states=(TrialState.FAIL,))) == len(killed), 60,
                 f"the trial whose {victim} was killed to fail")
    trial_process = gate.held_process()  # the second retry, run by the same command after both faults
    study_processes = [*descendants(runner.pid), trial_process]
    runner.send_signal(signal.SIGTERM)  # to the command alone, as a scheduler, timeout or kill sends it
    output = runner.communicate(timeout=60)[0].decode()
    assert runner.returncode == 143, output
    assert "rerun the same command to resume" in output
    wait_for(lambda: not still_running(study_processes) and not _trial_processes(storage), 30,
             "the stopped study's processes to end")
    assert not still_running(killed)  # a Ray worker's death ends its trial's process
    trials = load(path).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL, TrialState.FAIL, TrialState.WAITING]
    assert [t.user_attrs[FAIL_REASON_ATTR] for t in trials[:2]] == [
        "killed by signal SIGKILL", "Ray task lost: the Ray worker running it died (WorkerCrashedError)"]
    assert "interrupted" in trials[2].user_attrs[FAIL_REASON_ATTR]
    assert [t.user_attrs.get(RETRY_OF_ATTR) for t in trials] == [None, 0, 1, 2]  # each the retry of the one before

    gate.open()
    assert main(arguments) == 0
    trials = load(path).get_trials()
    # No trial lost: the interrupted one's retry completed, and nothing else failed.
    assert [t.state for t in trials] == [TrialState.FAIL] * 3 + [TrialState.COMPLETE]
    assert all(t.params == trials[0].params for t in trials)


def _check_failed_then_retried(trials: list[FrozenTrial], reason: str) -> FrozenTrial:
    """One trial failed with ``reason``, and its retry, with the same parameters, completed the study; the retry."""
    [failed] = [t for t in trials if t.state == TrialState.FAIL]
    assert failed.user_attrs[FAIL_REASON_ATTR].startswith(reason), failed.user_attrs[FAIL_REASON_ATTR]
    [retry] = [t for t in trials if t.user_attrs.get(RETRY_OF_ATTR) == failed.number]
    assert retry.state == TrialState.COMPLETE and retry.params == failed.params
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]  # nothing else ran, nothing lost
    return retry


def test_sqlite_on_a_cluster_of_several_nodes_is_refused_in_one_line(
    ray_three_nodes: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file)
    assert main(["run", str(path), "--launcher", "ray", "--ray-address", ray_three_nodes]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "SQLite cannot be shared by the 3 nodes of the Ray cluster" in error, error
    assert not Path(load_study_spec(path).storage.removeprefix("sqlite:///")).exists()


def test_a_node_lost_mid_trial_fails_the_trial_with_the_reason_and_the_retry_runs_on_another(
    ray_three_nodes: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate
) -> None:
    # Several nodes need a shared storage: PostgreSQL, as on a real cluster.
    name = f"ray_node_lost_{os.getpid()}_{int(time.time())}"
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, name=name, n_trials=1, storage=postgres_url(),
                       base={"reward_model_path": Gate.REWARD})
    runner = subprocess.Popen([sys.executable, "-m", "ppo_tune", "run", str(path), "--launcher", "ray",
                               "--ray-address", ray_three_nodes, "--workers", "1"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)
    trial_process = gate.held_process()  # mid-trial, however long what follows takes on a loaded machine
    # The node is its raylet: killed, as a node's crash or preemption would end it, its Ray workers end (and the
    # trial's process with them), and the cluster takes the node for dead.
    raylet = next(process for process in trial_process.parents() if process.name() == "raylet")
    [lost_node] = [argument.partition("=")[2] for argument in raylet.cmdline() if argument.startswith("--node_id=")]
    raylet.send_signal(signal.SIGKILL)
    wait_for(lambda: not still_running([trial_process]), 60, "the lost node's trial process to end")
    gate.open()  # for the retry
    output = runner.communicate(timeout=300)[0].decode()
    assert runner.returncode == 0, output
    assert not still_running([trial_process])  # nothing of the lost node's trial trains on unseen
    # The reason names the node that died; the retry ran on the other one.
    retry = _check_failed_then_retried(
        load(path).get_trials(), f"Ray task lost: the node running it died (NodeDiedError, node {lost_node[:12]} at ")
    assert retry.system_attrs[RAY_TASK_ATTR]["node_id"] != lost_node
