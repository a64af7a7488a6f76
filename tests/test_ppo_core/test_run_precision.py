"""ppo_core.setup.run_precision: a CPU run that leaves its precision open runs in bf16 only where the check finds this
CPU's bf16 products faster at the policy's shapes; explicit settings are never second-guessed; and the run reports what
it ran in.

The check's timings stand in for CPU kinds other than this machine's (one with fast bf16, one emulating it), and its
size floor is lowered so that a tiny model stands in for a large one: the choice, the loading and the run are the real
code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.tiny_runs import letter_run

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.models import sampling_precision
from ppo_core.setup.run_precision import leaves_precision_open, with_run_precision
from ppo_core.setup.run_setup import run_sources


def _policy_path(values: dict[str, Any]) -> str:
    """Where the run's policy loads from, as the trainer finds it before the precision check."""
    return run_sources(PPOConfig(**values)).policy_path



@pytest.mark.parametrize(("values", "on_gpu", "open_"), [
    ({}, False, True),
    ({}, True, False),  # a GPU: bf16 null already means "where the GPU supports it"
    ({"bf16": False}, False, False),  # the way to keep a CPU run in float32
    ({"bf16": True}, False, False),
    ({"dtype": "bfloat16"}, False, False),
    ({"dtype": "auto"}, False, False),
])
def test_only_a_cpu_run_with_both_fields_at_their_defaults_is_left_to_the_check(
        values: dict[str, object], on_gpu: bool, open_: bool) -> None:
    assert leaves_precision_open(PPOConfig(**values), on_gpu) is open_  # type: ignore[arg-type]


def _cpu_where_bf16_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bf16_seconds: float) -> list[int]:
    """The check's timings as a CPU with (0.02 s) or without (1.8 s) fast bf16 products gives them, against float32's
    0.06 s, with a tiny model checked as a large one is; returns the rows of each check made."""
    monkeypatch.setenv("PPO_TUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sampling_precision, "MIN_CHECKED_WEIGHTS", 0)
    calls: list[int] = []

    def timed(shapes: list[tuple[int, int]], rows: int) -> dict[str, float]:
        calls.append(rows)
        return {"float32": 0.06, "bfloat16": bf16_seconds}

    monkeypatch.setattr(sampling_precision, "product_seconds", timed)
    return calls


def test_where_bf16_is_fast_an_open_run_stores_frozen_weights_in_bf16_and_autocasts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _cpu_where_bf16_is(monkeypatch, tmp_path, 0.02)
    values = letter_run(tmp_path, 16, response_length=4, per_device_train_batch_size=8, total_episodes=8,
                        use_peft=True, lora_r=4)
    chosen = with_run_precision(PPOConfig(**values), _policy_path(values), on_gpu=False)
    assert (chosen.bf16, chosen.dtype) == (True, "bfloat16") and calls == [8]
    trainer = PPOTrainer(PPOConfig(**values))
    policy = trainer.setup.models.policy
    base = [p for name, p in policy.named_parameters() if "lora_" not in name]
    adapters = [p for p in policy.parameters() if p.requires_grad]
    assert base and all(p.dtype == torch.bfloat16 for p in base)
    assert adapters and all(p.dtype == torch.float32 for p in adapters)  # autocast's float32 master copy
    (update,) = trainer.train().metrics
    assert update["precision/autocast_bf16"] == 1.0 and update["precision/sampling_bf16"] == 1.0
    assert calls == [8]  # the sampling copy read the run's check from the cache


def test_where_bf16_is_emulated_an_open_run_stays_float32(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _cpu_where_bf16_is(monkeypatch, tmp_path, 1.8)
    values = letter_run(tmp_path, 16, response_length=4, per_device_train_batch_size=8, total_episodes=8,
                        use_peft=True, lora_r=4)
    config = PPOConfig(**values)
    assert with_run_precision(config, _policy_path(values), on_gpu=False) is config
    (update,) = PPOTrainer(config).train().metrics
    assert update["precision/autocast_bf16"] == 0.0 and update["precision/sampling_bf16"] == 0.0
    assert calls == [8]


def test_bf16_false_keeps_a_run_in_float32_without_a_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _cpu_where_bf16_is(monkeypatch, tmp_path, 0.02)
    values = letter_run(tmp_path, 16, response_length=4, per_device_train_batch_size=8, total_episodes=8,
                        use_peft=True, lora_r=4, bf16=False, sampling_dtype="float32")
    config = PPOConfig(**values)
    assert with_run_precision(config, _policy_path(values), on_gpu=False) is config
    (update,) = PPOTrainer(config).train().metrics
    assert update["precision/autocast_bf16"] == 0.0 and update["precision/sampling_bf16"] == 0.0
    assert calls == []
