"""``--launcher ray`` on a real single-node Ray cluster that the tests start (``ray start --head --num-cpus 4
--num-gpus 4``: Ray's own testing advice, a small local cluster, with logical GPUs so that packing can be seen on a
machine without any): a study of tiny trials stores what the local launcher stores, trials of 2 GPUs run two at a
time, a killed trial's process fails the trial and it is retried, SIGTERM stops the study and a rerun finishes it,
SQLite is refused across two nodes. No mocks: the ``ray`` extra is part of the test install (scripts/setup.sh)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from optuna.trial import FrozenTrial, TrialState

from ppo_tune.cli import main
from studies import (
    TESTS_DIR,
    descendants,
    load,
    running_trial_has_updated,
    still_running,
    wait_for,
    write_study,
)
from tuner.attrs import FAIL_REASON_ATTR, RETRY_OF_ATTR
from tuner.database import create_engine
from tuner.ray_launch import RAY_TASK_ATTR, recorded_address_file
from tuner.reports import updates_run
from tuner.study_config import load_study_spec
from tuner.trial_records import read_metrics, read_samples

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


def _stop_node(node: subprocess.Popen[bytes]) -> None:
    node.send_signal(signal.SIGTERM)
    try:
        node.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait()


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A single-node cluster of 4 logical GPUs and 4 logical CPUs (a trial asks a CPU per process: two trials of two
    processes take 4; each process runs one thread), with token authentication off (it listens on this machine only,
    and the tests own it); its address."""
    os.environ["RAY_AUTH_MODE"] = "disabled"  # for the cluster, and for ppo-tune's drivers, which inherit it
    port = _free_port()
    head = _start_node("--head", "--port", str(port), "--num-cpus", "4", "--num-gpus", "4",
                       "--include-dashboard", "false", log=tmp_path_factory.mktemp("ray") / "head.log")
    address_file = recorded_address_file()
    wait_for(lambda: address_file.is_file() and address_file.read_text().strip().endswith(f":{port}")
             and _answers(address_file.read_text().strip()), 120, "the Ray head to start")
    try:
        yield address_file.read_text().strip()
    finally:
        _stop_node(head)
        os.environ.pop("RAY_AUTH_MODE", None)


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
        if "tuner.trial_process" in command and storage in command:
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


def _user_attr_keys(trials: list[FrozenTrial]) -> set[str]:
    return {key for trial in trials for key in trial.user_attrs}


def test_a_study_runs_on_ray_and_stores_what_the_local_launcher_stores(
    ray_head: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    local = write_study(tmp_path, tiny_lm_dir, prompts_file, name="local", n_trials=2)
    on_ray = write_study(tmp_path, tiny_lm_dir, prompts_file, name="on_ray", n_trials=2)
    assert main(["run", str(local)]) == 0
    # No --ray-address: ppo-tune finds the cluster running on this machine.
    assert main(["run", str(on_ray), "--launcher", "ray", "--workers", "2"]) == 0
    studies = {path.stem: (load(path), load_study_spec(path)) for path in (local, on_ray)}
    local_trials = studies["local"][0].get_trials()
    ray_trials = studies["on_ray"][0].get_trials()
    assert [t.state for t in ray_trials] == [TrialState.COMPLETE] * 2
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
    assert held == [{"GPU": 1.0, "CPU": 1.0}] * 2, held


def test_trials_of_two_gpus_run_two_at_a_time_on_four(
    ray_head: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=3, processes_per_trial=2)
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
    assert tasks[last]["started"] - asked > 1.0, (asked, tasks)


def test_a_killed_trial_process_fails_with_its_reason_and_is_retried(
    ray_head: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2, base={"total_episodes": 400})
    storage = load_study_spec(path).storage
    runner = subprocess.Popen([sys.executable, "-m", "ppo_tune", "run", str(path), "--launcher", "ray",
                               "--ray-address", ray_head, "--workers", "1"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(lambda: running_trial_has_updated(path), 120, "a running trial's first update")
    [victim] = _trial_processes(storage)
    victim.send_signal(signal.SIGKILL)  # as the kernel's OOM killer, or a node's own shutdown, would
    output = runner.communicate(timeout=300)[0].decode()
    assert runner.returncode == 0, output
    trials = load(path).get_trials()
    [killed] = [t for t in trials if t.state == TrialState.FAIL]
    assert killed.user_attrs[FAIL_REASON_ATTR] == "killed by signal SIGKILL"
    [retry] = [t for t in trials if t.user_attrs.get(RETRY_OF_ATTR) == killed.number]
    assert retry.state == TrialState.COMPLETE and retry.params == killed.params
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2


def test_sigterm_stops_the_study_requeues_its_trial_and_a_rerun_finishes_it(
    ray_head: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=3, base={"total_episodes": 160})
    storage = load_study_spec(path).storage
    arguments = ["run", str(path), "--launcher", "ray", "--ray-address", ray_head, "--workers", "1"]
    process = subprocess.Popen([sys.executable, "-m", "ppo_tune", *arguments], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)

    def states() -> list[TrialState]:
        try:
            return [t.state for t in load(path).get_trials(deepcopy=False)]
        except KeyError:
            return []

    wait_for(lambda: TrialState.COMPLETE in states() and running_trial_has_updated(path), 180,
             "one finished and one running trial")
    study_processes = descendants(process.pid) + _trial_processes(storage)
    assert _trial_processes(storage), "the running trial's process"
    process.send_signal(signal.SIGTERM)  # to the command alone, as a scheduler, timeout or kill sends it
    output = process.communicate(timeout=60)[0].decode()
    assert process.returncode == 143, output
    assert "rerun the same command to resume" in output
    wait_for(lambda: not still_running(study_processes) and not _trial_processes(storage), 30,
             "the stopped study's processes to end")
    trials = load(path).get_trials()
    [interrupted] = [t for t in trials if t.state == TrialState.FAIL]
    assert "interrupted" in interrupted.user_attrs[FAIL_REASON_ATTR]
    assert [t.state for t in trials if t.user_attrs.get(RETRY_OF_ATTR) == interrupted.number] == [TrialState.WAITING]

    assert main(arguments) == 0
    trials = load(path).get_trials()
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 3
    # No trial lost: the interrupted one's retry completed, and nothing else failed.
    assert [t.state for t in trials if t.user_attrs.get(RETRY_OF_ATTR) == interrupted.number] == \
        [TrialState.COMPLETE]
    assert [t.number for t in trials if t.state == TrialState.FAIL] == [interrupted.number]


def test_sqlite_on_a_cluster_of_two_nodes_is_refused_in_one_line(
    ray_head: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Last in this file: it adds a second node (a second raylet on this machine, as Ray's own tests make clusters)
    # and removes it.
    node = _start_node("--address", ray_head, "--num-cpus", "1", "--num-gpus", "0", log=tmp_path / "node.log")
    # Until the second node has joined, ppo-tune sees one node, where SQLite is allowed: more GPUs per trial than
    # the head has keeps the study from running meanwhile (exit 2 as well, for that reason).
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, processes_per_trial=5)
    try:
        def refused() -> bool:
            assert main(["run", str(path), "--launcher", "ray", "--ray-address", ray_head]) == 2
            error = capsys.readouterr().err.strip()
            assert "\n" not in error, error
            return "SQLite cannot be shared by the 2 nodes of the Ray cluster" in error

        wait_for(refused, 60, "the second node to join and SQLite to be refused")
    finally:
        _stop_node(node)
    assert not Path(load_study_spec(path).storage.removeprefix("sqlite:///")).exists()
