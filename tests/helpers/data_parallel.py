"""One training run from the CLI on one or two CPU processes (two under ``accelerate launch``, gloo), on a tiny Llama
that learns the letter reward, with each rank's reward log (rank_rewards): the data-parallel tests' runs, which the
two-GPU test repeats on GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from rank_rewards import LOG_DIR_ENV

from ppo_tune.cli import main
from tools import tiny_models

ROOT = Path(__file__).resolve().parents[2]
UPDATES = 20
GLOBAL_BATCH = 32


def run(tmp_path: Path, name: str, processes: int, config: Path,
        **overrides: Any) -> tuple[list[dict[str, Any]], dict[int, list[dict]]]:
    """Train from the CLI on ``processes`` CPU processes; the metrics it wrote and each rank's reward log. One process
    trains in this one (its imports are done); two run under ``accelerate launch`` with the GPUs hidden, as on a
    machine without one: two ranks on one GPU stop in NCCL ("Duplicate GPU detected"). Every rank of a launch must
end its process group once before its exit."""
    log_dir = tmp_path / f"{name}_log"
    log_dir.mkdir()
    output = tmp_path / name
    sets = [item for key, value in overrides.items() for item in ("--set", f"{key}={value}")]
    arguments = ["train", str(config), "--output", str(output), "--quiet", *sets]
    if processes == 1:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(LOG_DIR_ENV, str(log_dir))
            assert main([*arguments, "--set", "use_cpu=true"]) == 0
    else:
        # ppo-tune as its own process on each rank, whose view of the process group end_of_launch writes at exit.
        views = tmp_path / f"{name}_views"
        views.mkdir()
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                    str(processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                    "--main_process_port", "0", "-m", "end_of_launch", "--cli", str(views)]
        env = {**os.environ, LOG_DIR_ENV: str(log_dir), "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
               "CUDA_VISIBLE_DEVICES": ""}
        completed = subprocess.run([*launcher, *arguments], cwd=ROOT, env=env, capture_output=True, text=True,
                                   timeout=600)
        assert completed.returncode == 0, completed.stderr[-3000:]
        # Each rank ended its process group once, before its exit, and none aborted at its exit after a run that
        # succeeded (test_data_parallel.py says why; its launch with a tracker checks the same).
        assert "terminate called" not in completed.stderr, completed.stderr[-3000:]
        seen = {path.stem: json.loads(path.read_text()) for path in views.glob("rank*.json")}
        assert seen == {f"rank{rank}": {"initialized": False, "destroyed": 1} for rank in range(processes)}, seen
    metrics = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    logs = {int(path.stem.removeprefix("rank")): [json.loads(line) for line in path.read_text().splitlines()]
            for path in log_dir.glob("rank*.jsonl")}
    return metrics, logs


def write_run_config(root: Path) -> Path:
    """A tiny Llama, 64 prompts with their row number, and a run that learns the letter reward in 20 updates."""
    policy = tiny_models.write_llama(root / "llama", seed=1)
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"row {i}: say words with the letter a:", "row": i}) + "\n"
                               for i in range(64)))  # two batches per epoch: no batch straddles two epochs
    config = root / "run.yaml"
    config.write_text(yaml.safe_dump({
        "task": None, "sft_model_path": str(policy), "dataset_name": str(prompts),
        "reward_funcs": ["rank_rewards:logged_letter_a"], "response_length": 8, "temperature": 1.0,
        "total_episodes": UPDATES * GLOBAL_BATCH, "num_ppo_epochs": 4, "num_mini_batches": 2,
        "per_device_train_batch_size": 8, "learning_rate": 1e-2, "kl_coef": 0.05, "kl_target": 2.0,
        "num_sample_generations": 0, "seed": 1,
    }))
    return config
