"""A run that stops part way and resumes from its checkpoint is the run that never stopped: the same metrics, update
for update (but the machine's timings), and the same trained weights, on tiny real models on a CPU.

Each case trains 4 updates with a checkpoint every 2. The split run stops after update 3, past its last checkpoint
(update 2), as a killed run does; a new trainer, built from the same config as a new process would build it, resumes
from that checkpoint and makes update 3 again, then 4.
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from ppo_core import PPOConfig, PPOTrainer, TrainerCallback
from ppo_core.config.ppo_config import settable_fields
from ppo_core.errors import RunFailure
from ppo_core.metric_names import run_metrics
from ppo_core.run import checkpoint_files
from ppo_core.run.checkpoint_files import CheckpointError, complete_checkpoints, read_manifest
from ppo_core.run.checkpoint_match import RESUME_MAY_CHANGE

UPDATES = 4
STOP_AT = 3  # past the checkpoint of update 2: what a killed run leaves

CASES: dict[str, dict[str, Any]] = {
    # A value network (GAE), with held-out evaluations and sample recordings on their own streams.
    "gae": {"eval_steps": 2, "num_sample_generations": 3},
    # A critic-free estimator, its KL a loss term.
    "grpo": {"advantage_estimator": "grpo", "num_generations": 4},
    # LoRA adapters on the policy and the value network's trunk; the rollout samples from a merged copy, and steps
    # this large move it far enough that a copy not refreshed from the restored adapter samples other responses.
    "lora": {"use_peft": True, "lora_r": 4, "lora_alpha": 32, "learning_rate": 3e-2},
    # The adaptive KL controller moves the coefficient at every update.
    "adaptive_kl": {"kl_target": 0.05, "kl_horizon": 64},
}


def run_config(lm: Path, prompts: Path, output: Path, **overrides: Any) -> PPOConfig:
    values: dict[str, Any] = dict(
        task=None, sft_model_path=str(lm), reward_model_path="reward_functions:count_letter_a",
        dataset_name=str(prompts), response_length=6, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, num_mini_batches=2, num_ppo_epochs=2, total_episodes=8 * UPDATES,
        num_sample_generations=0, num_eval_prompts=3, learning_rate=3e-3, stop_token="eos",
        save_steps=2, output_dir=str(output),
    )
    values.update(overrides)
    return PPOConfig(**values)


class StopAt(TrainerCallback):
    """Stops the run after ``update``, as a kill there would, but for the process."""

    def __init__(self, update: int) -> None:
        self.update = update

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        return "segment end" if update == self.update else None


def trained_weights(trainer: PPOTrainer) -> dict[str, torch.Tensor]:
    models = trainer.optimisation.models
    return {f"{index}.{name}": parameter.detach().clone() for index, model in enumerate(models)
            for name, parameter in model.named_parameters() if parameter.requires_grad}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_resumed_from_its_checkpoint_equals_the_run_unsplit(
    tiny_lm_dir: Path, prompts_file: Path, tmp_path: Path, case: str,
) -> None:
    whole_trainer = PPOTrainer(run_config(tiny_lm_dir, prompts_file, tmp_path / "whole", **CASES[case]))
    whole = whole_trainer.train()
    assert [m["update"] for m in whole.metrics] == list(range(1, UPDATES + 1))

    config = run_config(tiny_lm_dir, prompts_file, tmp_path / "split", **CASES[case])
    first = PPOTrainer(config, [StopAt(STOP_AT)]).train()
    assert first.stop_reason == "segment end"
    checkpoints = complete_checkpoints(tmp_path / "split" / "checkpoints")
    assert [update for update, _ in checkpoints] == [2]
    second_trainer = PPOTrainer(config)
    second = second_trainer.train(resume_from_checkpoint=checkpoints[0][1])
    assert second.resumed_at == 2

    assert [run_metrics(m) for m in first.metrics] == [run_metrics(m) for m in whole.metrics[:STOP_AT]]
    assert [run_metrics(m) for m in second.metrics] == [run_metrics(m) for m in whole.metrics[2:]]
    # The samples recorded after the resume are those the run unsplit recorded at the same updates.
    assert [s.to_dict() for s in second.samples] == [s.to_dict() for s in whole.samples if s.update > 2]
    after, expected = trained_weights(second_trainer), trained_weights(whole_trainer)
    assert after.keys() == expected.keys() and all(torch.equal(after[name], expected[name]) for name in expected)
    if case == "adaptive_kl":  # the controller's coefficient moved, and carried on from where it was
        coefficients = [m["objective/kl_coef"] for m in whole.metrics]
        assert len(set(coefficients)) == UPDATES


def test_a_run_splits_into_three_segments_as_one(tiny_lm_dir: Path, prompts_file: Path, tmp_path: Path) -> None:
    whole = PPOTrainer(run_config(tiny_lm_dir, prompts_file, tmp_path / "whole")).train()
    config = run_config(tiny_lm_dir, prompts_file, tmp_path / "split", save_steps=3, save_total_limit=None)
    metrics = PPOTrainer(config, [StopAt(1)]).train().metrics  # stopped before any checkpoint: a run to redo
    assert not (tmp_path / "split" / "checkpoints").exists()
    metrics = PPOTrainer(config, [StopAt(3)]).train().metrics
    metrics += PPOTrainer(config).train(tmp_path / "split" / "checkpoints" / "checkpoint-3").metrics
    assert [run_metrics(m) for m in metrics] == [run_metrics(m) for m in whole.metrics]
    # save_total_limit null keeps every checkpoint; a run saves after its last update too.
    assert [u for u, _ in complete_checkpoints(tmp_path / "split" / "checkpoints")] == [3, 4]


@pytest.fixture(scope="module")
def stopped_once(tiny_lm_dir: Path, prompts_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output directory of a run of 4 updates stopped after update 2, where it wrote its checkpoint."""
    output = tmp_path_factory.mktemp("stopped")
    PPOTrainer(run_config(tiny_lm_dir, prompts_file, output), [StopAt(2)]).train()
    return output


@pytest.fixture
def stopped_run(tiny_lm_dir: Path, prompts_file: Path, stopped_once: Path,
                tmp_path: Path) -> tuple[PPOConfig, Path]:
    """A copy of ``stopped_once`` for this test to damage: its config and its checkpoint."""
    shutil.copytree(stopped_once, tmp_path / "run")
    return run_config(tiny_lm_dir, prompts_file, tmp_path / "run"), tmp_path / "run" / "checkpoints" / "checkpoint-2"


def resume(config: PPOConfig, checkpoint: Path, **changes: Any) -> int:
    values = {**config.to_dict(), **changes}
    return PPOTrainer(PPOConfig(**values), [StopAt(3)]).train(checkpoint).num_updates


@pytest.mark.parametrize(("changes", "message"), [
    ({"learning_rate": 1e-3}, "learning_rate is 0.003 there, 0.001 here"),
    ({"seed": 7, "kl_coef": 0.5}, r"kl_coef is 0.05 there, 0.5 here \(and 1 more: seed\)"),
    ({"total_episodes": 8 * 6}, r"total_episodes is 32 there, 48 here \(and 1 more: num_updates\)"),
])
def test_a_checkpoint_of_another_config_is_refused_naming_the_difference(
    stopped_run: tuple[PPOConfig, Path], changes: dict[str, Any], message: str,
) -> None:
    config, checkpoint = stopped_run
    with pytest.raises(CheckpointError, match=f"made by another config: {message}; resume it with the config"):
        resume(config, checkpoint, **changes)


def test_where_and_how_a_run_writes_may_change_on_resume(stopped_run: tuple[PPOConfig, Path],
                                                         tmp_path: Path) -> None:
    config, checkpoint = stopped_run
    assert resume(config, checkpoint, output_dir=str(tmp_path / "elsewhere"), save_steps=1,
                  local_rollout_forward_batch_size=4, eval_steps=1) == 3
    assert set(settable_fields()) >= RESUME_MAY_CHANGE  # the table names fields that exist


def test_a_checkpoint_of_another_code_version_is_refused(stopped_run: tuple[PPOConfig, Path]) -> None:
    config, checkpoint = stopped_run
    manifest = checkpoint / "manifest.json"
    record = json.loads(manifest.read_text())
    record["versions"]["torch"] = "1.0.0"
    manifest.write_text(json.dumps(record))
    with pytest.raises(CheckpointError, match=r"was written with torch 1\.0\.0, this is torch .*: resumed, the run"):
        resume(config, checkpoint)


@pytest.mark.parametrize("damage", ["truncated", "flipped", "no manifest", "bad manifest", "missing file"])
def test_a_damaged_checkpoint_is_refused_in_one_line(stopped_run: tuple[PPOConfig, Path], damage: str) -> None:
    config, checkpoint = stopped_run
    weights = checkpoint / "policy.pt"
    data = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":  # one bit of a weight: the file still reads, its digest does not match
        weights.write_bytes(data[:-100] + bytes([data[-100] ^ 1]) + data[-99:])
    elif damage == "no manifest":
        (checkpoint / "manifest.json").unlink()
    elif damage == "bad manifest":
        (checkpoint / "manifest.json").write_text('{"update": 2, "files"')
    else:
        (checkpoint / "state.pt").unlink()
    with pytest.raises(CheckpointError) as raised:
        resume(config, checkpoint)
    assert "\n" not in str(raised.value) and str(checkpoint) in str(raised.value)
    assert ("not a whole checkpoint" if damage == "no manifest" else "is damaged") in str(raised.value)


def test_a_full_disk_while_writing_leaves_the_last_checkpoint_and_no_half_one(
    stopped_run: tuple[PPOConfig, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, checkpoint = stopped_run
    before = {path.name: path.read_bytes() for path in checkpoint.iterdir()}
    real_write_file = checkpoint_files.write_file
    written: list[str] = []

    def fills_the_disk(path: Path, save: Any) -> None:
        written.append(path.name)
        if path.name == "optimizers.pt":  # after the weights: a partial write, then the disk is full
            path.write_bytes(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write_file(path, save)

    monkeypatch.setattr("ppo_core.run.checkpoint.write_file", fills_the_disk)
    with pytest.raises(RunFailure, match=r"^cannot write checkpoint '.*checkpoint-4' \(No space left on device\)$"):
        PPOTrainer(config).train(checkpoint)
    assert written[-1] == "optimizers.pt"  # the policy's and the value network's weights were written before it
    directory = checkpoint.parent
    assert sorted(path.name for path in directory.iterdir()) == ["checkpoint-2"]  # no temporary directory left
    assert {path.name: path.read_bytes() for path in checkpoint.iterdir()} == before
    assert read_manifest(checkpoint)["update"] == 2
