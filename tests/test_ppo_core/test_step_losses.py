"""A step's loss whatever its micro-batches (ppo_core.algorithm.losses.StepTotals), the importance-sampling levels, the
dual clip and the objective that composes them (ppo_core.algorithm.objective), against loop-by-loop references; then
whole runs that split the same step into micro-batches differently."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.algorithm.kl import kl_per_token
from ppo_core.algorithm.losses import StepTotals, aggregate_loss, clipped_policy_loss, importance_log_ratio
from ppo_core.algorithm.objective import policy_objective
from ppo_core.config.ppo_config import LOSS_TYPES, LossType

MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]]).bool()
LENGTH = 6


def _rows(values: torch.Tensor, mask: torch.Tensor = MASK) -> list[list[float]]:
    return [[float(v) for v, m in zip(row, row_mask, strict=True) if m] for row, row_mask in zip(values, mask,
                                                                                                strict=True)]


def _step_reference(per_token: torch.Tensor, loss_type: str, micro: int) -> float:
    """The step's loss over all rows, from its definition: token_mean over every token, bnpo the mean of each
    micro-batch's token mean, the sequence means over every response."""
    rows = _rows(per_token)
    if loss_type == "token_mean":
        tokens = [value for row in rows for value in row]
        return sum(tokens) / len(tokens)
    if loss_type == "bnpo":
        chunks = [rows[start : start + micro] for start in range(0, len(rows), micro)]
        means = [sum(v for row in chunk for v in row) / sum(len(row) for row in chunk) for chunk in chunks]
        return sum(means) / len(means)
    if loss_type == "seq_mean_token_mean":
        return sum(sum(row) / len(row) for row in rows) / len(rows)
    return sum(sum(row) / LENGTH for row in rows) / len(rows)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("micro", [1, 2, 4])
def test_micro_batch_shares_add_up_to_the_steps_loss(loss_type: str, micro: int) -> None:
    per_token = torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    per_token[~MASK] = float("nan")  # padding is never read
    step = StepTotals(tokens=float(MASK.sum()), rows=4.0, micro_batches=4 // micro)
    shares = [aggregate_loss(per_token[start : start + micro], MASK[start : start + micro], loss_type, LENGTH, step)
              for start in range(0, 4, micro)]
    assert float(sum(shares)) == pytest.approx(_step_reference(per_token, loss_type, micro), rel=1e-12)


def test_token_mean_weighs_every_token_of_the_step_alike_where_bnpo_weighs_micro_batches() -> None:
    # Micro-batch 1 holds one token with A = +1, micro-batch 2 three tokens with A = -1; the per-token loss at
    # ratio 1 is -A. The step's token mean is (-1 + 3) / 4 = 0.5; the mean of the micro-batches' own means is
    # (-1 + 1) / 2 = 0.
    per_token = torch.tensor([[-1.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]]).bool()
    step = StepTotals(tokens=4.0, rows=2.0, micro_batches=2)

    def step_loss(loss_type: str) -> float:
        return float(sum(aggregate_loss(per_token[i : i + 1], mask[i : i + 1], loss_type, 3, step) for i in (0, 1)))

    assert step_loss("token_mean") == pytest.approx(0.5)
    assert step_loss("bnpo") == pytest.approx(0.0)


def test_two_processes_shares_average_to_the_global_step() -> None:
    # Each process holds two of the four rows; the all-reduce averages their gradients, so each share carries the
    # process count.
    per_token = torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    step = StepTotals(tokens=float(MASK.sum()), rows=4.0, micro_batches=1, processes=2)
    for loss_type in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"):
        average = sum(aggregate_loss(per_token[r : r + 2], MASK[r : r + 2], loss_type, LENGTH, step)
                      for r in (0, 2)) / 2
        assert float(average) == pytest.approx(_step_reference(per_token, loss_type, 4), rel=1e-12)


@pytest.mark.parametrize("level", ["token", "sequence", "sequence_sum"])
def test_importance_levels_against_a_loop(level: str) -> None:
    generator = torch.Generator().manual_seed(5)
    logprobs = -torch.rand(4, 4, dtype=torch.float64, generator=generator)
    old = -torch.rand(4, 4, dtype=torch.float64, generator=generator)
    old[~MASK] = -1e4  # a huge gap on padding must not leak
    got = importance_log_ratio(logprobs, old, MASK, level)
    for i, row in enumerate(MASK):
        gaps = [float(logprobs[i, t] - old[i, t]) for t in range(4) if row[t]]
        for t in range(4):
            if not row[t]:
                assert got[i, t] == 0.0
                continue
            expected = {"token": gaps[t] if t < len(gaps) else 0.0, "sequence": sum(gaps) / len(gaps),
                        "sequence_sum": sum(gaps)}[level]
            assert float(got[i, t]) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("log_ratio", "advantage", "dual_clip", "loss", "gradient"), [
    (1.5, -1.0, None, math.exp(1.5), math.exp(1.5)),  # above the band with A < 0: unclipped, pessimistic
    (1.5, -1.0, 3.0, 3.0, 0.0),  # ... capped at -A c by the dual clip: no gradient
    (0.5, -1.0, 3.0, math.exp(0.5), math.exp(0.5)),  # below the cap: as without it
    (1.5, 1.0, 3.0, -1.2, 0.0),  # a positive advantage is never dual-clipped
])
def test_dual_clip_hand_cases(log_ratio: float, advantage: float, dual_clip: float | None, loss: float,
                              gradient: float) -> None:
    logprobs = torch.tensor([[log_ratio - 1.0]], dtype=torch.float64, requires_grad=True)
    out = clipped_policy_loss(logprobs, torch.tensor([[-1.0]], dtype=torch.float64),
                              torch.tensor([[advantage]], dtype=torch.float64), torch.tensor([[True]]), 0.2,
                              dual_clip=dual_clip)
    out.loss.backward()
    assert logprobs.grad is not None
    assert (float(out.loss.detach()), float(logprobs.grad)) == (pytest.approx(loss), pytest.approx(gradient, abs=1e-12))


def test_sequence_sum_clips_the_whole_responses_ratio() -> None:
    # Two tokens each at ratio 1.1: per token both lie inside [0.8, 1.2]; the response's ratio 1.21 is clipped.
    logprobs = torch.log(torch.tensor([[0.55, 0.55]], dtype=torch.float64))
    old = torch.log(torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    mask, advantage = torch.ones(1, 2).bool(), torch.ones(1, 2, dtype=torch.float64)
    token = clipped_policy_loss(logprobs, old, advantage, mask, 0.2, loss_type="seq_mean_token_mean")
    whole = clipped_policy_loss(logprobs, old, advantage, mask, 0.2, loss_type="seq_mean_token_mean",
                                importance_sampling_level="sequence_sum")
    assert float(token.loss) == pytest.approx(-1.1) and float(whole.loss) == pytest.approx(-1.2)


def test_objective_composes_policy_entropy_and_kl_with_one_aggregation() -> None:
    generator = torch.Generator().manual_seed(6)
    logprobs = -torch.rand(4, 4, dtype=torch.float64, generator=generator)
    old, ref = logprobs - 0.1, logprobs + 0.3 * torch.randn(4, 4, dtype=torch.float64, generator=generator)
    advantages = torch.randn(4, 4, dtype=torch.float64, generator=generator)
    entropy = torch.rand(4, 4, dtype=torch.float64, generator=generator)
    config = PPOConfig(advantage_estimator="grpo", loss_type="seq_mean_token_mean", entropy_coef=0.01,
                       cliprange_high=0.28, dual_clip=3.0, kl_loss_estimator="k3")
    got = policy_objective(logprobs, old, ref, advantages, MASK, entropy, config, kl_loss_coef=0.05)
    policy = clipped_policy_loss(logprobs, old, advantages, MASK, 0.2, 0.28, "seq_mean_token_mean", 4,
                                 dual_clip=3.0)
    kl = aggregate_loss(kl_per_token(logprobs, ref, "k3"), MASK, "seq_mean_token_mean", 4)
    bonus = aggregate_loss(entropy, MASK, "seq_mean_token_mean", 4)
    assert float(got.loss) == pytest.approx(float(policy.loss - 0.01 * bonus + 0.05 * kl), rel=1e-12)
    assert got.kl is not None and float(got.kl) == pytest.approx(float(kl))
    no_kl = policy_objective(logprobs, old, ref, advantages, MASK, entropy, config, kl_loss_coef=None)
    assert no_kl.kl is None and float(no_kl.loss) == pytest.approx(float(policy.loss - 0.01 * bonus), rel=1e-12)


# --- whole runs: one step split into micro-batches two ways ---


def _first_update(lm: Path, prompts: Path, loss_type: LossType, micro: int) -> tuple[dict[str, float], torch.Tensor]:
    """One update of 8 responses in one mini-batch, ``micro`` responses per micro-batch: its metrics and the
    trained policy's weights."""
    config = PPOConfig(task=None, sft_model_path=str(lm), dataset_name=str(prompts),
                       reward_model_path="reward_functions:count_letter_a", response_length=6,
                       per_device_train_batch_size=micro, gradient_accumulation_steps=8 // micro,
                       num_mini_batches=1, num_ppo_epochs=2, total_episodes=8, num_sample_generations=0,
                       advantage_estimator="rloo", num_generations=4, loss_type=loss_type, learning_rate=1e-3,
                       seed=3)
    trainer = PPOTrainer(config)
    metrics = trainer.train().metrics[0]
    weights = torch.cat([p.detach().flatten() for p in trainer.optimisation.policy.parameters()])
    return metrics, weights


@pytest.mark.parametrize("loss_type", ["token_mean", "seq_mean_token_mean"])
def test_how_a_step_is_split_into_micro_batches_changes_nothing(tiny_lm_dir: Path, prompts_file: Path,
                                                                 loss_type: LossType) -> None:
    # Responses stop at EOS at different lengths, so micro-batches hold different token counts: a per-micro-batch
    # mean would weigh tokens unequally. The second epoch reads the weights the first step left.
    whole, whole_weights = _first_update(tiny_lm_dir, prompts_file, loss_type, 8)
    split, split_weights = _first_update(tiny_lm_dir, prompts_file, loss_type, 2)
    for name in ("loss/policy_avg", "val/ratio"):  # token-weighted over the step (the others are micro-batch means)
        assert split[name] == pytest.approx(whole[name], rel=1e-5, abs=1e-9), name
    # Adam divides by the gradients' own scale, so float32 summation order shows in a few near-zero ones: compare the
    # mean change, against what weighing micro-batches differently (bnpo) changes.
    drift = float((split_weights - whole_weights).abs().mean())
    _, bnpo_weights = _first_update(tiny_lm_dir, prompts_file, "bnpo", 2)
    assert drift < 1e-8
    assert float((bnpo_weights - whole_weights).abs().mean()) > 100 * drift
