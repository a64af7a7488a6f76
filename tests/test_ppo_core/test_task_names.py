"""What a config may name as its task is checked before anything is built or stored: an unknown task, or a text task
whose packages are missing, is one line and exit 2, with no study and no run directory made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.missing_packages import blocking

from ppo_core.config.checks import ConfigError
from ppo_core.config.io import build_config
from ppo_core.tasks.fortunes.extra import TEXT_EXTRA_MISSING
from ppo_core.tasks.variants import TASK_NAMES, task_problem

ROOT = Path(__file__).resolve().parents[2]


def test_an_unknown_task_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"^task: unknown task 'shortest_paths'; valid tasks: shortest_path, "):
        build_config({"task": "shortest_paths"})
    # The text extra is installed for the tests.
    assert all(task_problem(name) is None for name in TASK_NAMES)  # a pair policy is asked for where a run starts
    assert {"shortest_path", "fortunes", "fortunes_tiny"} <= set(TASK_NAMES)


def ppo_tune(tmp_path: Path, env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ppo_tune", *arguments], cwd=tmp_path,
                          env={**os.environ, **env, "PPO_TUNE_CACHE": str(tmp_path / "cache")}, text=True,
                          capture_output=True, timeout=300, check=False)


@pytest.mark.heavy
def test_a_text_task_without_the_text_extra_is_one_line_and_exit_2_with_nothing_made(tmp_path: Path) -> None:
    without_vader = blocking(tmp_path / "site", "vaderSentiment")
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({"task": "fortunes_tiny", "total_episodes": 16}))
    done = ppo_tune(tmp_path, without_vader, "train", str(config), "--output", str(tmp_path / "run"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].endswith(f"task: {TEXT_EXTRA_MISSING}")
    study = tmp_path / "text.yaml"
    study.write_text(yaml.safe_dump({
        "name": "text", "storage": f"sqlite:///{tmp_path / 'text.db'}", "n_trials": 2,
        "objectives": [{"metric": "eval/gold_score", "direction": "maximize"}],
        "base": {"task": "fortunes_tiny", "total_episodes": 16, "eval_steps": 0.5},
        "search_space": {"learning_rate": {"type": "float", "low": 1e-6, "high": 1e-4, "log": True}}}))
    done = ppo_tune(tmp_path, without_vader, "run", str(study))
    assert done.returncode == 2, done.stderr[-2000:]
    assert TEXT_EXTRA_MISSING in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists() and not (tmp_path / "text.db").exists()
    assert not (tmp_path / "cache").exists()  # no task build began
