"""Every reward and judge function is handed ``trainer_state``, a ``transformers.TrainerState``, as TRL's GRPOTrainer
hands it (ppo_core.rewards.functions): its global_step the updates completed when the answers were sampled, its
max_steps the run's updates, and a dataset column of that name is not passed besides it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import reward_functions
from transformers import AutoTokenizer, TrainerState

from ppo_core import PPOConfig, PPOTrainer

WORDS = ["a b", "c d e", "f", "g h", "a a", "b c"]


@pytest.fixture
def progress() -> Iterator[dict[str, list[tuple[type, int, int, int]]]]:
    for calls in reward_functions.PROGRESS.values():
        calls.clear()
    yield reward_functions.PROGRESS
    for calls in reward_functions.PROGRESS.values():
        calls.clear()


def prompts_with_a_trainer_state_column(directory: Path) -> Path:
    """train.jsonl and test.jsonl whose rows hold a column named trainer_state beside the prompt."""
    directory.mkdir()
    for split, rows in (("train", 16), ("test", 3)):
        lines = [json.dumps({"prompt": WORDS[i % len(WORDS)], "trainer_state": "a column"}) for i in range(rows)]
        (directory / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return directory


def recording_run(lm_dir: Path, directory: Path, **fields: Any) -> dict[str, Any]:
    """A run of the tiny model on data with a trainer_state column, its reward and judge recording what they are
    handed; ``fields`` set the rest."""
    return dict(task=None, sft_model_path=str(lm_dir),
                dataset_name=str(prompts_with_a_trainer_state_column(directory / "data")),
                reward_funcs=["reward_functions:records_progress"], judge_funcs=["reward_functions:judges_progress"],
                response_length=4, num_ppo_epochs=1, total_episodes=24, num_sample_generations=0,
                num_eval_prompts=3, learning_rate=1e-3, seed=3, **fields)


def test_rewards_and_judges_are_handed_the_updates_completed_when_the_answers_were_sampled(
    tiny_lm_dir: Path, tmp_path: Path, progress: dict[str, list[tuple[type, int, int, int]]],
) -> None:
    # 3 updates of 8 episodes; held-out evaluations of 3 prompts x 2 answers at the start and after updates 2 and 3.
    config = PPOConfig(**recording_run(tiny_lm_dir, tmp_path, per_device_train_batch_size=4,
                                       gradient_accumulation_steps=2, num_eval_samples=2, eval_steps=2,
                                       eval_on_start=True))
    PPOTrainer(config).train()
    # The reward scores update u's rollout (8 rows) after u - 1 updates, and the held-out answers (6 rows) of the
    # evaluation after update u after u; the dataset's column of that name is dropped, not passed twice.
    assert progress["reward"] == [(TrainerState, 0, 3, 6), (TrainerState, 0, 3, 8), (TrainerState, 1, 3, 8),
                                  (TrainerState, 2, 3, 6), (TrainerState, 2, 3, 8), (TrainerState, 3, 3, 6)]
    assert progress["judge"] == [(TrainerState, 0, 3, 6), (TrainerState, 2, 3, 6), (TrainerState, 3, 3, 6)]


def test_a_resumed_run_hands_on_from_its_checkpoints_update(
    tiny_lm_dir: Path, tmp_path: Path, progress: dict[str, list[tuple[type, int, int, int]]],
) -> None:
    values = recording_run(tiny_lm_dir, tmp_path, per_device_train_batch_size=8, num_eval_samples=1, eval_steps=1,
                           save_steps=1, output_dir=str(tmp_path / "run"))
    PPOTrainer(PPOConfig(**values)).train(stop_after=1)
    for calls in progress.values():
        calls.clear()
    PPOTrainer(PPOConfig(**values)).train(resume_from_checkpoint=tmp_path / "run" / "checkpoints" / "checkpoint-1")
    assert [(step, rows) for _, step, _, rows in progress["reward"]] == [(1, 8), (2, 3), (2, 8), (3, 3)]
    assert [step for _, step, _, _ in progress["judge"]] == [2, 3]


def test_trls_grpo_trainer_hands_the_same_function_a_trainer_state(
    tiny_lm_dir: Path, tmp_path: Path, progress: dict[str, list[tuple[type, int, int, int]]],
) -> None:
    # The installed TRL, 2 optimizer steps of 4 completions (2 prompts x 2), each step generating its own.
    import trl
    from datasets import Dataset

    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=4, max_steps=2, use_cpu=True, bf16=False, report_to="none",
                          save_strategy="no", seed=0)
    dataset = Dataset.from_dict({"prompt": WORDS[:4], "trainer_state": ["a column"] * 4})
    trl.GRPOTrainer(model=str(tiny_lm_dir), reward_funcs=[reward_functions.records_progress], args=args,
                    train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(tiny_lm_dir)).train()
    assert progress["reward"] == [(TrainerState, 0, 2, 4), (TrainerState, 1, 2, 4)]
