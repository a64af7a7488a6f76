"""``shared_prompt_forwards``: the update's forward runs each prompt of a GRPO group once and the responses on copies
of its KV cache, and gives the gradient and statistics of every row's whole forward (fp32); the rollout scores the
same way, so the first ratio is 1 and a policy equal to its reference is at KL 0 to the last bit; and where one epoch
of one mini-batch meets each row once, the update's forward supplies the old log-probabilities, the same update as
a rollout that scores them itself."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from helpers.tiny_runs import letter_run
from helpers.update_gradients import first_step_gradients

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.rollout import collect
from ppo_core.rollout.collect import old_logprobs_from_update, update_shares_prompts


@pytest.fixture(scope="module")
def run_values(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # Two prompts of four responses each per update: GRPO's groups.
    return letter_run(tmp_path_factory.mktemp("shared-update"), 32, advantage_estimator="grpo", num_generations=4,
                      response_length=6, per_device_train_batch_size=8, num_mini_batches=1, num_ppo_epochs=1,
                      total_episodes=8, seed=3, use_cpu=True, bf16=False)


@pytest.mark.parametrize("use_peft", [False, True])
def test_the_shared_forward_gives_the_whole_forwards_gradient(run_values: dict[str, Any], use_peft: bool) -> None:
    values = {**run_values, "use_peft": use_peft, "lora_r": 4}
    whole, whole_metrics, whole_forwards = first_step_gradients({**values, "shared_prompt_forwards": False})
    shared, shared_metrics, shared_forwards = first_step_gradients({**values, "shared_prompt_forwards": True})
    assert whole_forwards == [8] and shared_forwards == [2, 8]  # 2 distinct prompts once, then 8 responses
    (ours,), (theirs,) = shared, whole  # GRPO: the policy's optimizer alone
    assert len(ours) == len(theirs) > 0 and any(gradient.abs().max() > 0 for gradient in theirs)
    for our_gradient, their_gradient in zip(ours, theirs, strict=True):
        torch.testing.assert_close(our_gradient, their_gradient, rtol=1e-5, atol=1e-6)
    for name in ("loss/policy_avg", "policy/approxkl_avg", "policy/entropy_avg", "val/ratio"):
        assert shared_metrics[name] == pytest.approx(whole_metrics[name], abs=1e-6), name
    assert shared_metrics["val/ratio"] == pytest.approx(1.0, abs=1e-6)  # the rollout scored as the update does


def test_a_lora_policy_equal_to_its_reference_is_at_kl_zero_to_the_bit(run_values: dict[str, Any]) -> None:
    # Two epochs: the rollout scores the policy itself (the update's forward cannot stand in for it).
    trainer = PPOTrainer(PPOConfig(**{**run_values, "use_peft": True, "lora_r": 4, "num_ppo_epochs": 2}))
    rollout = trainer._rollout(trainer.setup.train_prompts.select(range(8)))
    assert not rollout.logprobs_pending
    assert torch.equal(rollout.logprobs, rollout.ref_logprobs)  # lora_B starts at zero: the same function


def test_one_epoch_of_one_mini_batch_takes_the_old_log_probs_from_the_updates_forward(
        run_values: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    values = {**run_values, "use_peft": True, "lora_r": 4}
    assert old_logprobs_from_update(PPOConfig(**values))
    trainer = PPOTrainer(PPOConfig(**values))
    scored: list[int] = []
    trainer.setup.models.policy.register_forward_pre_hook(
        lambda _, args, kwargs: scored.append(1) if not torch.is_grad_enabled() else None, with_kwargs=True)
    rollout = trainer._rollout(trainer.setup.train_prompts.select(range(8)))
    # A LoRA policy's reference is its base, the same module with the adapters off: its two passes (prompts, then
    # responses) are the rollout's only ones; scoring the policy too would make four.
    assert rollout.logprobs_pending and len(scored) == 2
    deferred, deferred_metrics, _ = first_step_gradients(values)
    monkeypatch.setattr(collect, "old_logprobs_from_update", lambda config: False)
    scored_first, scored_metrics, _ = first_step_gradients(values)
    for ours, theirs in zip(deferred[0], scored_first[0], strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    for name in ("objective/kl", "objective/entropy", "loss/policy_avg", "val/ratio", "policy/approxkl_avg"):
        assert deferred_metrics[name] == pytest.approx(scored_metrics[name], abs=1e-6), name
    assert deferred_metrics["val/ratio"] == 1.0 and deferred_metrics["policy/approxkl_avg"] == 0.0


@pytest.mark.parametrize(("changes", "deferred"), [
    ({}, True),
    ({"num_ppo_epochs": 2}, False),  # the second epoch's ratio divides by the sampling policy's log-probs
    # The second mini-batch meets a policy one step on.
    ({"num_mini_batches": 2, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}, False),
    ({"kl_in_reward": True}, False),  # the rewards need KL before the update
])
def test_the_old_log_probs_come_from_the_update_only_where_nothing_else_needs_them(
        run_values: dict[str, Any], changes: dict[str, Any], deferred: bool) -> None:
    assert old_logprobs_from_update(PPOConfig(**{**run_values, **changes})) is deferred


def test_gradient_checkpointing_runs_whole_sequences_in_the_rollout_and_the_update(run_values: dict[str, Any]) -> None:
    _, metrics, forwards = first_step_gradients({**run_values, "gradient_checkpointing": True})
    assert forwards == [8]  # no KV cache in training under checkpointing: one whole forward
    assert metrics["val/ratio"] == pytest.approx(1.0, abs=1e-6)


def test_prompts_asked_once_each_run_whole_sequences(run_values: dict[str, Any]) -> None:
    # One response a prompt (PPO's default): a prompt pass and a response pass would do one forward's work in two.
    _, _, forwards = first_step_gradients({**run_values, "advantage_estimator": "gae", "num_generations": 1})
    assert forwards == [8]


@pytest.mark.parametrize(("generations", "prompt_width", "response_length", "shared"), [
    (4, 11, 16, True),  # 2 x 3 x 11 = 66 >= 64
    (4, 10, 16, False),  # 60 < 64: the prompt pass would cost more than the copies save
    (4, 3, 16, False),  # the SmolLM2 text tasks' fortune openings
    (2, 16, 16, True),  # 2 x 1 x 16 = 32 >= 32
    (1, 500, 16, False),  # one generation a prompt: nothing repeats
])
def test_prompts_are_shared_where_the_copies_save_half_a_response(
        generations: int, prompt_width: int, response_length: int, shared: bool) -> None:
    config = PPOConfig(advantage_estimator="grpo" if generations > 1 else "gae", num_generations=generations)
    assert update_shares_prompts(config, prompt_width, response_length) is shared
    assert not update_shares_prompts(dataclasses.replace(config, shared_prompt_forwards=False), prompt_width,
                                     response_length)
