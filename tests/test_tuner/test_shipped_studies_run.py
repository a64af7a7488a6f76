"""Every shipped study file runs, shrunk, end to end through ``run`` and ``best``: what a user who copies one gets.

Shrunk means its tiny sibling task (a graph study on ``shortest_path_tiny``, a text study on ``fortunes_tiny``, whose
policy is a tiny GPT-2 in place of SmolLM2), two trials of two updates, an evaluation at each, and a few held-out
prompts. Everything else is the file's own: its trainer, objectives, constraints, KL guard, sampler, seed policy and
search space. A study whose constraint no trial can meet (as TRL trials' held-out KL once read 60-90 nats where the
policy had not moved) leaves ``best`` nothing to name, and fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.studies import shipped_study_files

from ppo_tune.cli import main
from tuner.store.database import create_engine
from tuner.store.records import read_metrics

pytestmark = pytest.mark.heavy  # starts studies: scheduled first

TINY_TASK = {"shortest_path": "shortest_path_tiny"}
"""A graph study's tiny sibling; every text task's is ``fortunes_tiny``."""
UPDATES = 2


def shrunk(study: dict[str, Any], storage: str) -> dict[str, Any]:
    """``study`` at the sizes of a test: the tiny sibling task, 2 trials of ``UPDATES`` updates, each evaluated."""
    base = dict(study["base"])
    base["task"] = TINY_TASK.get(base["task"], "fortunes_tiny")
    base.pop("sft_model_path", None)  # the tiny task's own policy, not SmolLM2
    steps_named = "max_steps" in base  # a TRL study, in GRPOConfig's names: an optimizer step an update
    if steps_named:
        base["max_steps"] = UPDATES
    else:
        base["total_episodes"] = UPDATES * base.get("per_device_train_batch_size", 8)
    base.update(eval_steps=1, num_eval_prompts=4, num_sample_generations=1)
    out = {**study, "n_trials": 2, "storage": storage, "base": base}
    out.pop("timeout", None)
    return out


@pytest.mark.parametrize("study_file", shipped_study_files(), ids=lambda path: path.name)
def test_a_shipped_study_shrunk_runs_and_best_names_a_winner(
        study_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = yaml.safe_load(study_file.read_text())
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    path = tmp_path / study_file.name
    path.write_text(yaml.safe_dump(shrunk(study, storage)))
    assert main(["run", str(path)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    trainer = study.get("trainer")
    formats = ["--format", trainer] if trainer else []  # a TRL study's winner as the flags its trials ran
    assert main(["best", study["name"], "--storage", storage, *formats]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert ("--learning_rate" in printed) if trainer else ("trial" in printed.lower())
    if trainer:  # where the policy has barely moved, the held-out KL says so
        metrics = read_metrics(create_engine(storage), study["name"])
        first = metrics[metrics["update"] == 1]["eval/kl"].dropna()
        assert len(first) and first.abs().lt(1.0).all(), first.tolist()
