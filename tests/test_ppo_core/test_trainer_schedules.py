"""Schedules in a run, on tiny real models on a CPU: the learning rate and KL coefficient in force at each update, a
run that stops after a given update as a segment of the whole, and the whole run with a schedule split at update k
into a run without the schedule's later pairs and a run with them, resumed from the first's checkpoint: population-
based training's exploit-and-perturb in miniature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ppo_core import PPOConfig, PPOTrainer, TrainerCallback
from ppo_core.metric_names import run_metrics
from ppo_core.run.checkpoint_files import CheckpointError, complete_checkpoints

UPDATES = 4


def run_config(lm: Path, prompts: Path, output: Path, **overrides: Any) -> PPOConfig:
    values: dict[str, Any] = dict(
        task=None, sft_model_path=str(lm), reward_model_path="reward_functions:count_letter_a",
        dataset_name=str(prompts), response_length=6, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, num_mini_batches=2, num_ppo_epochs=2, total_episodes=8 * UPDATES,
        num_sample_generations=0, num_eval_prompts=3, learning_rate=3e-3, stop_token="eos", output_dir=str(output),
    )
    values.update(overrides)
    return PPOConfig(**values)


def linear_multiplier(update: int) -> float:
    """transformers' linear schedule without warmup, during update u of UPDATES (stepped once per update)."""
    return max(0.0, float(UPDATES - (update - 1)) / float(UPDATES))


def test_the_rates_and_coefficient_in_force_follow_the_schedules(tiny_lm_dir: Path, prompts_file: Path,
                                                                 tmp_path: Path) -> None:
    config = run_config(tiny_lm_dir, prompts_file, tmp_path, learning_rate_schedule=[[2, 1e-3], [4, 5e-4]],
                        kl_coef_schedule=[[3, 0.2]])
    metrics = PPOTrainer(config).train().metrics
    peaks = [3e-3, 1e-3, 1e-3, 5e-4]  # learning_rate before the first pair
    expected = [peak * linear_multiplier(update) for update, peak in enumerate(peaks, 1)]
    assert [m["lr"] for m in metrics] == pytest.approx(expected, rel=1e-12)
    assert [m["lr_value"] for m in metrics] == pytest.approx(expected, rel=1e-12)  # tied: value_learning_rate null
    assert [m["objective/kl_coef"] for m in metrics] == [0.05, 0.05, 0.2, 0.2]


def test_a_value_learning_rate_of_its_own_stays_and_beta_follows_in_the_loss(tiny_lm_dir: Path, prompts_file: Path,
                                                                            tmp_path: Path) -> None:
    config = run_config(tiny_lm_dir, prompts_file, tmp_path, lr_scheduler_type="constant", value_learning_rate=1e-3,
                        learning_rate_schedule=[[3, 1e-4]], kl_in_reward=False, kl_coef_schedule=[[2, 0.0]])
    metrics = PPOTrainer(config).train().metrics
    assert [m["lr"] for m in metrics] == [3e-3, 3e-3, 1e-4, 1e-4]
    assert [m["lr_value"] for m in metrics] == [1e-3] * UPDATES
    assert [m["objective/kl_coef"] for m in metrics] == [0.04, 0.0, 0.0, 0.0]  # beta, in the loss


class Ends(TrainerCallback):
    def __init__(self) -> None:
        self.ended: list[tuple[int, str | None]] = []

    def on_train_end(self, num_updates: int, stop_reason: str | None) -> None:
        self.ended.append((num_updates, stop_reason))


def test_stop_after_ends_a_segment_with_a_checkpoint_and_its_samples(tiny_lm_dir: Path, prompts_file: Path,
                                                                     tmp_path: Path) -> None:
    config = run_config(tiny_lm_dir, prompts_file, tmp_path, save_steps=2, num_sample_generations=2)
    ends = Ends()
    trainer = PPOTrainer(config, [ends])
    result = trainer.train(stop_after=3)  # not a multiple of save_steps: a checkpoint all the same
    assert [m["update"] for m in result.metrics] == [1.0, 2.0, 3.0]
    assert result.num_updates == 3 and result.stop_reason is None and ends.ended == [(3, None)]
    assert [update for update, _ in complete_checkpoints(tmp_path / "checkpoints")] == [3]  # save_total_limit 1
    assert sorted({sample.update for sample in result.samples}) == [0, 2, 3]  # every 2 of 4 updates, and the stop
    for wrong in (0, UPDATES + 1):
        with pytest.raises(ValueError, match=rf"^stop_after: must be in \[1, {UPDATES}\]"):
            trainer.train(stop_after=wrong)
    with pytest.raises(ValueError, match=r"^stop_after: must be past the checkpoint's update 3, got 2$"):
        PPOTrainer(config).train(tmp_path / "checkpoints" / "checkpoint-3", stop_after=2)


def trained_weights(trainer: PPOTrainer) -> dict[str, torch.Tensor]:
    models = trainer.optimisation.models
    return {f"{index}.{name}": parameter.detach().clone() for index, model in enumerate(models)
            for name, parameter in model.named_parameters() if parameter.requires_grad}


SPLIT_AT = 2
CASES: dict[str, dict[str, Any]] = {
    # The policy's and the value network's rates, and the KL coefficient in the reward, each changed after update 2.
    "gae": {"learning_rate_schedule": [[2, 2e-3], [3, 1e-3]], "kl_coef_schedule": [[4, 0.2]]},
    # beta in the loss, and no value network.
    "grpo": {"advantage_estimator": "grpo", "num_generations": 4, "learning_rate_schedule": [[3, 1e-3]],
             "kl_coef_schedule": [[1, 0.1], [3, 0.0]]},
}


def before_split(schedule: list[list[float]] | None) -> list[list[float]] | None:
    """The pairs that start by update SPLIT_AT: what the parent ran with."""
    kept = [pair for pair in schedule or [] if pair[0] <= SPLIT_AT]
    return kept or None


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_with_a_schedule_equals_a_parent_stopped_at_k_and_a_child_continuing_it_with_the_later_pairs(
    tiny_lm_dir: Path, prompts_file: Path, tmp_path: Path, case: str,
) -> None:
    child_values = CASES[case]
    whole_trainer = PPOTrainer(run_config(tiny_lm_dir, prompts_file, tmp_path / "whole", **child_values))
    whole = whole_trainer.train()

    parent_values = {**child_values, **{name: before_split(child_values[name])
                                        for name in ("learning_rate_schedule", "kl_coef_schedule")}}
    parent = PPOTrainer(run_config(tiny_lm_dir, prompts_file, tmp_path / "parent", save_steps=3, **parent_values))
    first = parent.train(stop_after=SPLIT_AT)
    checkpoint = tmp_path / "parent" / "checkpoints" / f"checkpoint-{SPLIT_AT}"
    child_trainer = PPOTrainer(run_config(tiny_lm_dir, prompts_file, tmp_path / "child", **child_values))
    second = child_trainer.train(resume_from_checkpoint=checkpoint)
    assert second.resumed_at == SPLIT_AT

    assert [run_metrics(m) for m in first.metrics + second.metrics] == [run_metrics(m) for m in whole.metrics]
    after, expected = trained_weights(child_trainer), trained_weights(whole_trainer)
    assert after.keys() == expected.keys() and all(torch.equal(after[name], expected[name]) for name in expected)
    # The schedules changed something after the split: the child is not the parent's run continued unchanged.
    continued = PPOTrainer(run_config(tiny_lm_dir, prompts_file, tmp_path / "same", **parent_values))
    unchanged = continued.train(resume_from_checkpoint=checkpoint)
    assert [run_metrics(m) for m in unchanged.metrics] != [run_metrics(m) for m in second.metrics]


@pytest.mark.parametrize(("changes", "message"), [
    ({"learning_rate_schedule": [[2, 1.5e-3]]},
     r"learning_rate_schedule gives 0\.002 there, 0\.0015 here from update 2, at or before the checkpoint's update 2"),
    ({"learning_rate_schedule": [[2, 2e-3]], "kl_coef_schedule": [[1, 0.1]]},
     r"kl_coef_schedule gives 0\.05 there, 0\.1 here from update 1, at or before the checkpoint's update 2"),
])
def test_a_schedule_changed_at_or_before_the_checkpoint_is_refused_in_one_line(
    tiny_lm_dir: Path, prompts_file: Path, tmp_path: Path, changes: dict[str, Any], message: str,
) -> None:
    parent = run_config(tiny_lm_dir, prompts_file, tmp_path / "parent", save_steps=2,
                        learning_rate_schedule=[[2, 2e-3]])
    PPOTrainer(parent).train(stop_after=SPLIT_AT)
    child = run_config(tiny_lm_dir, prompts_file, tmp_path / "child", **changes)
    with pytest.raises(CheckpointError, match=f"made by another config: {message}; ") as raised:
        PPOTrainer(child).train(tmp_path / "parent" / "checkpoints" / "checkpoint-2")
    assert "\n" not in str(raised.value)
    # A pair that only restates the value in force, or one after the checkpoint, is no change.
    same = run_config(tiny_lm_dir, prompts_file, tmp_path / "same", kl_coef_schedule=[[1, 0.05], [5, 0.3]],
                      learning_rate_schedule=[[1, 3e-3], [2, 2e-3], [3, 1e-4]])
    assert PPOTrainer(same).train(tmp_path / "parent" / "checkpoints" / "checkpoint-2", stop_after=3).num_updates == 3
