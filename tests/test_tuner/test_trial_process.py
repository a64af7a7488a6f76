"""One process per trial: whatever a trial's process does (crash, run out of memory, die by a signal, hang past
``trial_timeout``), that trial fails with its reason and the worker and the study go on. Several processes per
trial run under accelerate launch, on GPUs shared out in groups."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers.studies import TESTS_DIR, load, write_study
from optuna.trial import TrialState

from ppo_tune.cli import main
from tuner.run.commands import GPU_DEVICE_NODES, cpu_threads_per_worker, gpu_driver_present, gpu_groups, worker_commands
from tuner.run.follow import pause_until_a_worker_ends
from tuner.run.worker import run_worker
from tuner.store.attrs import FAIL_REASON_ATTR, PRUNE_REASON_ATTR, PRUNED_AT_ATTR
from tuner.store.database import create_engine
from tuner.store.records import read_metrics
from tuner.study.study_file import StudySpecError, load_study_spec
from tuner.trial.launch import TrialJob, trial_command

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

# Only the study of the trial that never returns has a trial_timeout: a healthy trial is never cut short by a
# loaded machine, so no test here depends on how fast the machine is.
HANG_TIMEOUT = 3

FAULTS = ["reward_functions:exits", "reward_functions:out_of_memory", "reward_functions:killed"]


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Trial processes import the test reward functions by name, as users' own modules would be.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def test_faults_fail_their_trial_with_the_reason_and_the_study_goes_on(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    rewards = [*FAULTS, "reward_functions:count_letter_a"]
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=len(rewards), sampler={"name": "grid"},
                       search_space={"reward_model_path": {"type": "categorical", "choices": rewards}})
    assert main(["run", str(path)]) == 0  # the worker outlived every fault (a dead worker makes this 1)
    trials = {t.params["reward_model_path"]: t for t in load(path).get_trials()}
    assert {reward: t.state for reward, t in trials.items()} == {
        **dict.fromkeys(FAULTS, TrialState.FAIL), "reward_functions:count_letter_a": TrialState.COMPLETE}
    reasons = {reward: t.user_attrs.get(FAIL_REASON_ATTR) for reward, t in trials.items()}
    assert reasons["reward_functions:exits"] == "exit status 1"
    assert reasons["reward_functions:killed"] == "killed by signal SIGKILL"
    # ppo_core names the reward that raised; the MemoryError inside is what makes it "out of memory".
    oom = reasons["reward_functions:out_of_memory"]
    assert oom is not None  # a failed trial records its reason
    assert oom.startswith("out of memory: ") and "the reward needed more memory than there is" in oom, oom


def test_a_trial_that_never_returns_fails_at_its_trial_timeout(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    hanging = {"reward_model_path": {"type": "categorical", "choices": ["reward_functions:hangs"]}}
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, sampler={"name": "grid"},
                       trial_timeout=HANG_TIMEOUT, search_space=hanging)
    main(["run", str(path)])
    (trial,) = load(path).get_trials()
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs.get(FAIL_REASON_ATTR) == f"trial_timeout: exceeded {HANG_TIMEOUT} s"


def test_two_processes_per_trial_stop_together_when_pruned(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    # One trial of two processes (gloo on the CPU) whose wild learning rate blows KL up: the main process alone
    # reports and decides to prune, and both stop there. A completed trial takes the same path as with one process.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, processes_per_trial=2,
                       sampler={"name": "grid"}, kl_guard={"threshold": 2.0, "predict": False},
                       search_space={"learning_rate": {"type": "categorical", "choices": [3e-2]}},
                       base={"kl_coef": 0.0001, "total_episodes": 320})
    spec = load_study_spec(path)
    run_worker(spec, n_trials=1, timeout=None, threads=2)
    (trial,) = load(path).get_trials()
    assert trial.state == TrialState.PRUNED and "passed the threshold 2" in trial.user_attrs[PRUNE_REASON_ATTR]
    pruned_at = trial.user_attrs[PRUNED_AT_ATTR]
    assert pruned_at < 20  # the budget: 320 episodes, 16 an update
    metrics = read_metrics(create_engine(spec.storage), spec.name)
    # Every update stored once, by the main process; each took 8 episodes from each of the 2 processes.
    assert metrics["update"].tolist() == list(range(1, pruned_at + 1))
    assert metrics["episode"].tolist() == [16 * update for update in range(1, pruned_at + 1)]


def test_trial_command_lines() -> None:
    job = TrialJob(storage="sqlite:////studies/s.db", study_name="s", trial_id=7, worker_pid=123,
                   threads=3)
    assert trial_command(job, processes=1) == [sys.executable, "-m", "tuner.trial.process", *job.arguments()]
    command = trial_command(job, processes=2)
    launcher, module = command[:command.index("-m", 3)], command[command.index("-m", 3):]
    assert launcher[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    options = " ".join(launcher[3:])
    # --multi_gpu is what makes accelerate start N processes at all; without a GPU they talk over gloo.
    assert "--multi_gpu" in options and "--num_processes 2" in options
    assert "--main_process_port 0" in options  # a free port each time: two workers' trials cannot collide
    assert module == ["-m", "tuner.trial.process", *job.arguments()]
    assert TrialJob.from_arguments(job.arguments()) == job


@pytest.mark.parametrize(
    ("gpus", "workers", "processes_per_trial", "groups"),
    [
        ([], 2, 1, [[], []]),  # no GPU: CPU threads are shared out instead
        ([], 1, 2, [[]]),  # no GPU and two processes per trial: gloo on the CPU
        (["0", "1"], 2, 1, [["0"], ["1"]]),
        (["0", "1"], 3, 1, [["0"], ["1"], ["0"]]),  # one process per trial: extra workers share GPUs, as before
        (["0", "1", "2", "3"], 2, 2, [["0", "1"], ["2", "3"]]),
        (["0", "1", "2", "3", "4"], 2, 2, [["0", "1"], ["2", "3"]]),  # the odd one out stays idle
        (["3", "5", "6", "7"], 1, 4, [["3", "5", "6", "7"]]),  # ids as CUDA_VISIBLE_DEVICES listed them
    ],
)
def test_workers_get_gpus_in_groups_of_processes_per_trial(
    gpus: list[str], workers: int, processes_per_trial: int, groups: list[list[str]]
) -> None:
    assert gpu_groups(gpus, workers, processes_per_trial) == groups


@pytest.mark.parametrize(
    ("gpus", "workers", "processes_per_trial", "message"),
    [
        (["0"], 1, 2, "processes_per_trial: 2 processes per trial need 2 GPUs, this machine has 1"),
        (["0", "1", "2"], 2, 2, "processes_per_trial: 2 workers x 2 processes need 4 GPUs, this machine has 3 "
                                "(run with --workers 1)"),
    ],
)
def test_too_few_gpus_for_the_trials_is_one_line(
    gpus: list[str], workers: int, processes_per_trial: int, message: str
) -> None:
    with pytest.raises(StudySpecError) as error:
        gpu_groups(gpus, workers, processes_per_trial)
    assert str(error.value) == message


def test_each_worker_gets_its_share_of_the_cores_this_process_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine's core count was split between the workers: on a Slurm or taskset allocation of a few cores of
    # many, every trial ran as many threads as the machine has, on the few cores it may use.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    allowed = os.sched_getaffinity(0)
    assert len(allowed) >= 2  # CI's machines have 2 cores
    try:
        os.sched_setaffinity(0, {min(allowed)})
        assert cpu_threads_per_worker(1) == 1
    finally:
        os.sched_setaffinity(0, allowed)
    assert cpu_threads_per_worker(1) == len(allowed)
    assert cpu_threads_per_worker(2 * len(allowed)) == 1


def test_omp_num_threads_caps_a_workers_threads(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A user's OMP_NUM_THREADS, torch's own default for a process's threads, was overridden with the share of the
    # cores: the test suite's OMP_NUM_THREADS=1 ran every trial with 2 spinning threads.
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file))
    for value, expected in (("1", 1), ("64", len(os.sched_getaffinity(0))), ("", len(os.sched_getaffinity(0))),
                            ("many", len(os.sched_getaffinity(0)))):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        (command, _), = worker_commands(spec, 1, None, 1)
        assert command[command.index("--threads") + 1] == str(expected), value


def test_a_machine_without_a_gpu_driver_counts_no_gpu_without_importing_torch() -> None:
    # Importing torch costs `ppo-tune run` seconds of CPU before its first trial; where no GPU driver exposes a
    # device, torch could count none anyway.
    probe = ("import sys; from tuner.run.commands import visible_gpus; gpus = visible_gpus(); "
             "print(gpus, 'torch' in sys.modules)")
    assert not any(Path("/dev", name).exists() for name in GPU_DEVICE_NODES)  # CI's machines have no GPU
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "False"], done.stdout + done.stderr


@pytest.mark.parametrize("node", GPU_DEVICE_NODES)
def test_any_gpu_driver_s_device_node_means_torch_is_asked(node: str, tmp_path: Path) -> None:
    assert not gpu_driver_present(tmp_path)
    (tmp_path / node).touch()
    assert gpu_driver_present(tmp_path)


def test_the_progress_pause_ends_when_a_worker_ends() -> None:
    # ppo-tune run sat out its whole poll interval after its last worker had ended before it reported the study.
    worker = subprocess.Popen([sys.executable, "-c", "pass"])
    pause = threading.Thread(target=pause_until_a_worker_ends, args=([worker], 3600.0), daemon=True)
    pause.start()
    pause.join(60)  # a safety net only: the pause must end with the worker, long before its hour
    assert not pause.is_alive(), "the pause outlived its worker by a minute"
    assert worker.returncode == 0
