"""``sampler: {name: frontier}`` in a study file: refused in one line when the runs cannot report what it reads, and
a real study on the tiny built-in task, with its KL guard, constraint and racing, aimed trial by trial."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from helpers.built_tasks import task_cache as built_task_cache
from helpers.studies import TESTS_DIR, write_study
from optuna.trial import TrialState

from ppo_tune.cli import main
from tuner.search.frontier_sampler import AIM_ATTR
from tuner.store.attrs import RACE_OF_ATTR

pytestmark = pytest.mark.heavy  # runs studies


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


@pytest.mark.parametrize(("base", "missing"), [
    ({}, "sampler.name frontier: 'eval/kl' is reported only by runs that evaluate on held-out prompts; set "
         "base.eval_steps"),
    ({"eval_steps": 0.5}, "sampler.name frontier: 'eval/judge_score' is not a metric this study's runs report"),
])
def test_a_frontier_study_whose_runs_lack_what_it_reads_exits_2_naming_it_and_creates_nothing(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
        base: dict[str, Any], missing: str) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, sampler={"name": "frontier", "seed": 0}, base=base)
    database = tmp_path / "x.db"
    assert main(["run", str(path), "--storage", f"sqlite:///{database}"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and missing in error, error
    assert not database.exists()


@pytest.fixture(scope="module")
def task_cache() -> Path:
    return built_task_cache("shortest_path_tiny")


def gold_study(tmp_path: Path, task_cache: Path, **sampler: Any) -> Path:
    """A frontier study of the tiny built-in task (held-out KL and gold), its sampler's options on top."""
    study_file = tmp_path / "frontier.yaml"
    study_file.write_text(yaml.safe_dump({
        "name": "frontier", "n_trials": 6,
        "sampler": {"name": "frontier", "seed": 0, "n_startup_trials": 2, **sampler},
        "objectives": [{"metric": "eval/gold_score", "direction": "maximize", "reduce": "mean_last_k", "k": 2}],
        "constraints": [{"metric": "eval/kl", "reduce": "last", "max": 50.0}],
        "kl_guard": {"threshold": 60.0},
        "seed_policy": {"name": "racing", "seeds": 2, "top_k": 1, "start": 0.6},
        "base": {"task": "shortest_path_tiny", "task_cache_dir": str(task_cache), "per_device_train_batch_size": 8,
                 "total_episodes": 48, "num_sample_generations": 0, "num_eval_prompts": 4,
                 "num_eval_samples": 2, "eval_steps": 0.5, "seed": 0},
        "search_space": {"learning_rate": {"type": "float", "low": 2e-4, "high": 3e-3, "log": True},
                         "num_ppo_epochs": {"type": "int", "low": 1, "high": 4}},
    }))
    return study_file


@pytest.mark.parametrize(("options", "message"), [
    ({"candidates": 0}, "sampler: candidates: must be at least 1, got 0"),
    ({"n_startup_trials": -1}, "sampler: n_startup_trials: must be at least 0, got -1"),
    ({"candidates": "many"}, "sampler.candidates: expected a whole number, got 'many'"),
])
def test_a_frontier_option_out_of_range_exits_2_naming_it_and_creates_nothing(
        tmp_path: Path, task_cache: Path, capsys: pytest.CaptureFixture[str], options: dict[str, Any],
        message: str) -> None:
    path = gold_study(tmp_path, task_cache, **options)
    database = tmp_path / "x.db"
    assert main(["run", str(path), "--storage", f"sqlite:///{database}"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and error.endswith(message), error
    assert not database.exists()


def test_a_frontier_study_on_a_gold_task_aims_its_trials_and_keeps_the_guard_constraint_and_racing(
        tmp_path: Path, task_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study_file = gold_study(tmp_path, task_cache)
    assert main(["run", str(study_file), "--storage", f"sqlite:///{tmp_path / 'frontier.db'}"]) == 0
    study = optuna.load_study(study_name="frontier", storage=f"sqlite:///{tmp_path / 'frontier.db'}")
    trials = study.get_trials()
    assert len([t for t in trials if t.state == TrialState.COMPLETE]) >= 6
    proposed = [t for t in trials if RACE_OF_ATTR not in t.user_attrs]
    raced = [t for t in trials if RACE_OF_ATTR in t.user_attrs]
    assert raced and all(AIM_ATTR not in t.user_attrs for t in raced)  # a racing re-run keeps its configuration
    kinds = [t.user_attrs[AIM_ATTR]["kind"] for t in proposed]
    assert kinds[:2] == ["start"] * 2 and all(kind != "start" for kind in kinds[2:]), kinds
    assert all(t.user_attrs[AIM_ATTR]["predicted_ln_kl"] is not None for t in proposed[2:])
    assert all(list(t.constraints) == ["eval/kl (last) <= 50"] for t in trials if t.state == TrialState.COMPLETE)
    # Validation reruns the winner on a fresh seed as with any sampler: its runs are queued, so none is aimed.
    url = f"sqlite:///{tmp_path / 'frontier.db'}"
    assert main(["validate", "frontier", "--storage", url, "--top-k", "1", "--seeds", "1"]) == 0
    capsys.readouterr()
    # `show` says where the latest proposal aimed, from what, and what the KL model predicted.
    assert main(["show", "frontier", "--storage", f"sqlite:///{tmp_path / 'frontier.db'}"]) == 0
    out = capsys.readouterr().out
    assert f"trial {proposed[-1].number} " in out and "the KL model (" in out and "nats" in out, out
