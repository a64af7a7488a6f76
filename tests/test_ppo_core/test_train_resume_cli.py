"""``ppo-tune train`` run again after an interruption continues from its last checkpoint: a real process killed part
way (SIGKILL, or SIGTERM as a scheduler sends it), then the same command again, gives the run that was never
interrupted: the same metrics (but the machine's timings), samples, config and model. What cannot be resumed (a
checkpoint of another config, a damaged one) is refused in one line with exit 2, and a full disk while a checkpoint
is written fails in one line with exit 1, leaving no half checkpoint. The runs are a tiny GPT-2 (tests/conftest.py)
trained for 5 updates with a checkpoint every 2, against a reward written into the test's directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from helpers.train_cli import one_line, private_mount, snapshot, write_module

from ppo_core.metric_names import run_metrics
from ppo_tune.cli import main

pytestmark = pytest.mark.heavy  # starts processes: scheduled first

ROOT = Path(__file__).resolve().parents[2]
KILL_ENV = "PPO_TUNE_TEST_KILL_AT_CALL"

# The reward is called once per training rollout, once per held-out evaluation (eval_steps 2, and before training)
# and once per sample recording that no evaluation answered (the SFT policy's). Call 7 is update 4's rollout: the
# run has written the metrics of updates 0 (the evaluation before training) to 3 and the checkpoint of update 2.
KILLED_AT_CALL = 7
REWARDS = f'''
import os
import signal

CALLS = 0


def count_a(prompts, completions, **kwargs):
    """Scores that differ between responses; at the call ${KILL_ENV} names, the signal it names (or Ctrl-C)."""
    global CALLS
    CALLS += 1
    at, _, how = os.environ.get("{KILL_ENV}", "0:").partition(":")
    if CALLS == int(at):
        if how == "interrupt":
            raise KeyboardInterrupt()
        os.kill(os.getpid(), getattr(signal, how))
    return [float(text.split().count("a")) + 0.1 * len(text) for text in completions]
'''
BASE: dict[str, Any] = {
    "task": None, "response_length": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
    "total_episodes": 40, "num_ppo_epochs": 1, "num_sample_generations": 2, "num_eval_prompts": 2,
    "eval_steps": 2, "eval_on_start": True, "learning_rate": 1e-2, "stop_token": "eos", "save_steps": 2,
}


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_lm_dir: Path, prompts_file: Path) -> Path:
    """A working directory holding a reward module and ``run.yaml``, a config on the tiny GPT-2 that uses it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    reward = write_module(tmp_path, REWARDS)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({
        **BASE, "sft_model_path": str(tiny_lm_dir), "dataset_name": str(prompts_file),
        "reward_funcs": [f"{reward}:count_a"]}))
    return tmp_path


def train(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    status = main(["train", "run.yaml", "--quiet", *arguments])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def killed(run_dir: Path, output: str, how: str) -> subprocess.CompletedProcess[str]:
    """``ppo-tune train run.yaml --output OUTPUT`` in a process of its own, which the reward kills with ``how``;
    with the torch threads of this process, so that it computes what this process computes."""
    environment = {**os.environ, KILL_ENV: f"{KILLED_AT_CALL}:{how}", "OMP_NUM_THREADS": str(torch.get_num_threads()),
                   "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "ppo_tune", "train", "run.yaml", "--output", output, "--quiet"],
                          cwd=run_dir, env=environment, capture_output=True, text=True, timeout=600)


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_killed_run_run_again_is_the_run_never_interrupted(run_dir: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    status, _, error = train(capsys, "--output", "whole")
    assert status == 0, error
    whole = snapshot(run_dir / "whole")
    whole_metrics = rows(run_dir / "whole" / "metrics.jsonl")
    assert [m["update"] for m in whole_metrics] == [0, 1, 2, 3, 4, 5]
    for how, left in (("SIGKILL", ".resumed.*.partial"), ("SIGTERM", "resumed.incomplete")):
        done = killed(run_dir, "resumed", how)
        assert done.returncode == (-signal.SIGKILL if how == "SIGKILL" else 143), done.stderr
        interrupted = list(run_dir.glob(left))
        assert len(interrupted) == 1 and not (run_dir / "resumed").exists()
        # What the killed run left: metrics past its checkpoint, which the resumed run makes again.
        assert [m["update"] for m in rows(interrupted[0] / "metrics.jsonl")] == [0, 1, 2, 3]
        assert sorted(os.listdir(interrupted[0] / "checkpoints")) == ["checkpoint-2"]

        status, out, error = train(capsys, "--output", "resumed")
        assert status == 0, error
        assert json.loads(out)["resumed_at_update"] == 2 and json.loads(out)["updates"] == 5
        resumed = snapshot(run_dir / "resumed")
        assert [run_metrics(m) for m in rows(run_dir / "resumed" / "metrics.jsonl")] == \
            [run_metrics(m) for m in whole_metrics]
        assert resumed["config.yaml"] == whole["config.yaml"].replace(b"output_dir: whole", b"output_dir: resumed")
        # The same samples, weights, and state at the end (Adam's moments, the random streams, the data order).
        last = [f"checkpoints/checkpoint-5/{part}" for part in ("policy.pt", "value.pt", "optimizers.pt", "state.pt")]
        for name in ("samples.jsonl", "model/model.safetensors", *last):
            assert resumed[name] == whole[name], name
        assert sorted(os.listdir(run_dir / "resumed" / "checkpoints")) == ["checkpoint-5"]
        assert not list(run_dir.glob(".resumed.*")) and not (run_dir / "resumed.incomplete").exists()
        (run_dir / "resumed").rename(run_dir / f"resumed-{how}")


def test_a_checkpoint_that_cannot_be_resumed_exits_2_and_is_kept(run_dir: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KILL_ENV, f"{KILLED_AT_CALL}:interrupt")
    assert train(capsys, "--output", "out")[0] == 130  # Ctrl-C: the run is kept in out.incomplete
    monkeypatch.delenv(KILL_ENV)
    incomplete = run_dir / "out.incomplete"
    kept = snapshot(incomplete)

    status, _, error = train(capsys, "--output", "out", "--set", "learning_rate=0.02")
    assert status == 2
    line = one_line(error)
    assert line.startswith("ppo-tune train: error: checkpoint ") and "checkpoint-2' was made by another config: " \
        "learning_rate is 0.01 there, 0.02 here; resume it with the config that made it; it is 'out''s interrupted " \
        "run: pass --no-resume to start afresh" in line, line
    assert snapshot(incomplete) == kept and not (run_dir / "out").exists()

    state = incomplete / "checkpoints" / "checkpoint-2" / "state.pt"
    state.write_bytes(state.read_bytes()[:-10])
    status, _, error = train(capsys, "--output", "out")
    assert status == 2
    assert "checkpoint-2' is damaged (state.pt: " in one_line(error), error

    status, out, error = train(capsys, "--output", "out", "--no-resume")
    assert status == 0, error
    assert "resumed_at_update" not in json.loads(out)
    assert sorted(name for name in os.listdir(run_dir) if name.startswith((".out", "out"))) == ["out"]


def test_a_full_disk_while_a_checkpoint_is_written_exits_1_leaving_no_half_checkpoint(run_dir: Path) -> None:
    (run_dir / "disk").mkdir()
    # A 1 MiB tmpfs filled up but for 160 KiB: room for the run's config, metrics and samples, not for its first
    # checkpoint (about 770 KB: the policy, the value network and their Adam moments).
    script = """
        set -e
        mount -t tmpfs -o size=1m tmpfs disk
        "$1" -c 'import os
fd = os.open("disk/filler", os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(fd, bytes(4096))
except OSError:
    os.ftruncate(fd, os.fstat(fd).st_size - 160 * 1024)'
        set +e
        "$1" -m ppo_tune train run.yaml --output disk/out --quiet 2> stderr.txt
        echo $? > status.txt
        ls -A disk > listing.txt
        cp -a disk/out.incomplete after
    """
    done = private_mount(script, sys.executable, cwd=run_dir)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "status.txt").read_text().strip() == "1"
    line = one_line((run_dir / "stderr.txt").read_text())
    assert line.startswith("ppo-tune train: failed: cannot write checkpoint ") and \
        "checkpoint-2' (No space left on device)" in line, line
    assert (run_dir / "listing.txt").read_text().split() == ["filler", "out.incomplete"]
    assert os.listdir(run_dir / "after" / "checkpoints") == []  # neither the checkpoint nor its temporary directory
    assert [m["update"] for m in rows(run_dir / "after" / "metrics.jsonl")] == [0, 1, 2]


def launched(run_dir: Path, output: str, kill: str | None = None) -> subprocess.CompletedProcess[str]:
    """``ppo-tune train run.yaml --output OUTPUT`` on two CPU processes under ``accelerate launch`` (gloo), the GPUs
    hidden; with ``kill``, the reward kills each process at that call."""
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
                "-m", "ppo_tune", "train", "run.yaml", "--output", output, "--quiet"]
    environment = {**{key: value for key, value in os.environ.items() if key != KILL_ENV},
                   "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
                   "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", **({KILL_ENV: kill} if kill else {})}
    return subprocess.run(launcher, cwd=run_dir, env=environment, capture_output=True, text=True, timeout=600)


def test_a_killed_data_parallel_run_resumes_on_every_rank(run_dir: Path) -> None:
    # Each rank's random streams differ (it samples its own share): the checkpoint holds every rank's.
    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    (run_dir / "run.yaml").write_text(yaml.safe_dump({**config, "total_episodes": 80}))  # 5 updates of 16
    done = launched(run_dir, "whole")
    assert done.returncode == 0, done.stderr[-3000:]
    done = launched(run_dir, "resumed", kill=f"{KILLED_AT_CALL}:SIGKILL")
    assert done.returncode != 0 and not (run_dir / "resumed").exists()
    done = launched(run_dir, "resumed")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["resumed_at_update"] == 2
    assert [run_metrics(m) for m in rows(run_dir / "resumed" / "metrics.jsonl")] == \
        [run_metrics(m) for m in rows(run_dir / "whole" / "metrics.jsonl")]
