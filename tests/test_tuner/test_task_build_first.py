"""A study's built-in task is built by ``ppo-tune run`` before its first trial, saying each stage as it goes, so that
no trial's duration holds the build."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import optuna
import pytest
import yaml
from helpers.studies import load

from ppo_core.tasks.registry import task_dir
from ppo_tune.cli import main


def test_run_builds_an_uncached_task_first_and_says_how_far_it_has_got(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    study = {"name": "built_first", "n_trials": 1, "storage": f"sqlite:///{tmp_path / 'study.db'}",
             "sampler": {"name": "random", "seed": 0}, "kl_guard": {"threshold": 1000.0},
             "objectives": [{"metric": "eval/gold_score", "direction": "maximize"}],
             "base": {"task": "fortunes_tiny", "task_cache_dir": str(cache), "total_episodes": 16, "eval_steps": 1,
                      "num_eval_prompts": 4, "num_sample_generations": 0},
             "search_space": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    assert main(["run", str(path)]) == 0
    err = capsys.readouterr().err
    assert "building task 'fortunes_tiny' before the first trial" in err
    assert "task fortunes_tiny: the companion policy's fine-tuning done in" in err  # a stage, as it ended
    assert "built task 'fortunes_tiny' in" in err
    built = (task_dir("fortunes_tiny", str(cache)) / "build_info.json").stat().st_mtime
    (trial,) = load(path).get_trials()
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.datetime_start is not None and datetime.timestamp(trial.datetime_start) >= built
    # Run again: the task is cached, and nothing is said of a build.
    assert main(["run", str(path)]) == 0
    assert "building task" not in capsys.readouterr().err
