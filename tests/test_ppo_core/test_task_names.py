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
from ppo_core.models.paths import task_model_problem
from ppo_core.tasks.cache_dirs import task_dir
from ppo_core.tasks.fortunes.extra import TEXT_EXTRA_MISSING
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.variants import ALIASES, TASK_NAMES, VARIANTS, task_params, task_params_of, task_problem

ROOT = Path(__file__).resolve().parents[2]


def test_an_unknown_task_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"^task: unknown task 'shortest_paths' \(did you mean 'shortest_path'\?\); "
                                          r"valid tasks: shortest_path, [^\n]*smollm2_text$"):
        build_config({"task": "shortest_paths"})
    with pytest.raises(ConfigError, match=r"^task: unknown task 'smollm2_txt' \(did you mean 'smollm2_text'\?\); "):
        build_config({"task": "smollm2_txt"})
    with pytest.raises(ValueError, match=r"^unknown task 'atari'; valid tasks: [^\n]*$"):
        task_params("atari")
    # The text extra is installed for the tests.
    assert all(task_problem(name) is None for name in TASK_NAMES)  # a pair policy is asked for where a run starts
    assert {"shortest_path", "fortunes", "fortunes_tiny", "smollm2_text"} <= set(TASK_NAMES)


@pytest.mark.parametrize(("alias", "variant"), ALIASES.items())
def test_a_plain_name_is_its_variant_with_one_build(alias: str, variant: str, tmp_path: Path) -> None:
    assert alias in TASK_NAMES and variant in VARIANTS and alias not in VARIANTS
    assert task_params(alias) == task_params(variant) and task_params(alias, 3) == task_params(variant, 3)
    # One cache directory, under the variant's name: a build made under either name serves both.
    assert task_dir(alias, tmp_path) == task_dir(variant, tmp_path)
    assert task_dir(alias, tmp_path).name.startswith(f"{variant}-")
    assert task_dir(alias, tmp_path, 3) == task_dir(variant, tmp_path, 3)
    assert task_problem(alias) == task_problem(variant)
    # The same packaged model asked for, each message naming the task as its config does (on a machine without the
    # model's package the two say so alike; with it, neither says anything).
    problems = task_model_problem(alias), task_model_problem(variant)
    assert (problems[0] is None) == (problems[1] is None)
    if problems[0] is not None and problems[1] is not None:
        assert problems[0].replace(repr(alias), repr(variant)) == problems[1]
    # A config keeps the name its user wrote.
    assert build_config({"task": alias}).task == alias


def test_the_shipped_text_task_is_the_seventh_text_task() -> None:
    # What studies/text.yaml trains on now: SmolLM2 with the probe proxy (version 3) and gold version 5.
    shipped = task_params_of(TextTaskParams, "smollm2_text")
    assert shipped == task_params("fortunes_v7_smollm2")
    assert (shipped.pair_policy, shipped.gold_version, shipped.proxy_version) == ("smollm2-135m-instruct", 5, 3)
    assert yaml.safe_load((ROOT / "studies" / "text.yaml").read_text())["base"]["task"] == "smollm2_text"


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
