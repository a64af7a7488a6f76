"""A damaged model is bad input, not a crash: a built-in task whose cached build no longer reads back, and a model
directory whose weights' bytes are damaged, each give one line naming the file and exit 2, and nothing is deleted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from helpers.built_tasks import task_cache as built_task_cache

from ppo_core.config.checks import ConfigError
from ppo_core.models.loading import LoadOptions, load_causal_lm
from ppo_core.rewards.models import SequenceClassifierReward
from ppo_core.tasks import get_task
from ppo_core.tasks.build import REWARD_MODEL_DIR
from ppo_core.tasks.cache_dirs import BUILD_INFO
from ppo_core.tasks.registry import task_dir
from ppo_tune.cli import main
from tools import tiny_models

TINY = "shortest_path_tiny"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache holding a copy of the tiny graph task's build (the suite's own, built once), for the test to damage."""
    built = task_dir(TINY, built_task_cache(TINY))
    copy = tmp_path / "cache"
    shutil.copytree(built, task_dir(TINY, copy))
    return copy


def truncate(path: Path, keep: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@pytest.mark.parametrize("damaged", [f"{REWARD_MODEL_DIR}/model.safetensors", f"{REWARD_MODEL_DIR}/config.json",
                                     BUILD_INFO])
def test_a_damaged_cached_task_names_the_file_and_the_remedy(cache: Path, damaged: str) -> None:
    target = task_dir(TINY, cache)
    truncate(target / damaged)
    before = sorted(p.relative_to(target) for p in target.rglob("*"))
    with pytest.raises(ValueError, match="cached build is damaged") as raised:
        get_task(TINY, cache_dir=str(cache))
    message = str(raised.value)
    assert damaged in message and f"delete {target}" in message and "\n" not in message
    # Nothing is deleted: the remedy is the user's to take.
    assert sorted(p.relative_to(target) for p in target.rglob("*")) == before


def test_ppo_tune_train_on_a_damaged_task_is_one_line_and_exit_2(cache: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    truncate(task_dir(TINY, cache) / REWARD_MODEL_DIR / "model.safetensors")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"task": TINY, "task_cache_dir": str(cache), "total_episodes": 8,
                                      "per_device_train_batch_size": 4}))
    capsys.readouterr()
    # In this process: the refusal comes as the run's parts load, and a new process would spend seconds importing.
    assert main(["train", str(config), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    error = capsys.readouterr().err
    lines = error.strip().splitlines()
    assert len(lines) == 1 and "cached build is damaged" in lines[0], error[-2000:]
    assert not (tmp_path / "out").exists()


def test_damaged_weights_are_a_config_error_not_a_crash(tmp_path: Path) -> None:
    # safetensors raises its own error for a damaged header, which is neither OSError nor ValueError: before, it
    # left the loaders as an unexpected error (exit 1 with a traceback file).
    policy = tiny_models.write_llama(tmp_path / "llama", seed=0)
    reward = tiny_models.write_reward_model(tmp_path / "reward", seed=1)
    truncate(policy / "model.safetensors")
    truncate(reward / "model.safetensors")
    with pytest.raises(ConfigError, match=r"sft_model_path: cannot load a causal LM from .*deserializ"):
        load_causal_lm(str(policy))
    with pytest.raises(ConfigError, match=r"reward_model_path: cannot load a reward model from .*deserializ"):
        SequenceClassifierReward(str(reward), LoadOptions(), 4, None, name="reward")  # type: ignore[arg-type]
