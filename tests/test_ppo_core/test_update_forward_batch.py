"""``update_forward_batch_size``: micro-batches that share one forward and backward pass in the update give the same
gradient as each on its own (fp32, 1e-6), and the same update statistics; bad values are refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from helpers.tiny_runs import letter_run
from helpers.update_gradients import first_step_gradients

from ppo_core import PPOConfig
from ppo_core.config.ppo_config import ConfigError


@pytest.fixture(scope="module")
def run_values(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # One policy forward a pass, to count (the shared ones: their own test).
    return letter_run(tmp_path_factory.mktemp("forward-batch"), 32, response_length=6, per_device_train_batch_size=2,
                      gradient_accumulation_steps=4, num_mini_batches=1, num_ppo_epochs=1, total_episodes=8, seed=3,
                      use_cpu=True, shared_prompt_forwards=False)


@pytest.mark.parametrize("rows", [4, 8])
def test_shared_forward_passes_give_the_per_micro_batch_gradient(run_values: dict[str, Any], rows: int) -> None:
    alone, alone_metrics, alone_forwards = first_step_gradients(run_values)
    shared, shared_metrics, shared_forwards = first_step_gradients({**run_values, "update_forward_batch_size": rows})
    assert alone_forwards == [2, 2, 2, 2] and shared_forwards == [rows] * (8 // rows)  # the passes were shared
    assert len(alone) == len(shared) == 2  # the policy's optimizer and the value network's
    for ours, theirs in zip(shared, alone, strict=True):
        assert len(ours) == len(theirs) > 0
        assert any(gradient.abs().max() > 0 for gradient in theirs)  # the comparison is not of zeros
        for our_gradient, their_gradient in zip(ours, theirs, strict=True):
            torch.testing.assert_close(our_gradient, their_gradient, rtol=0, atol=1e-6)
    for name in ("loss/policy_avg", "loss/value_avg", "policy/approxkl_avg", "policy/entropy_avg", "val/ratio"):
        assert shared_metrics[name] == pytest.approx(alone_metrics[name], abs=1e-6), name


@pytest.mark.parametrize("rows", [3, 1])
def test_a_forward_batch_that_is_not_whole_micro_batches_is_refused(run_values: dict[str, Any], rows: int) -> None:
    refusal = r"^update_forward_batch_size: .*multiple of per_device_train_batch_size \(2\)"
    with pytest.raises(ConfigError, match=refusal):
        PPOConfig(**{**run_values, "update_forward_batch_size": rows})
