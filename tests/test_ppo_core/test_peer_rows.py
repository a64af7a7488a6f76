"""Six mismatches between ppo_core and a peer, each tested against the peer's own code: with the settings the export
writes, ppo_core and the peer compute the same values and gradients; where the export cannot make them equal, its
differences list names the setting. The cases and sections below are numbered as the rows of this list.

1. KL in the loss exported to TRL GRPO: TRL multiplies k3 by the importance ratio unless use_bias_correction_kl is off.
2. token_mean over several micro-batches: the step's token mean (verl's token-mean, TRL's dapo), and bnpo (TRL's).
3. verl's dual clip (clip_ratio_c, 3.0 by default) against ppo_core's dual_clip.
4. reinforce_pp_baseline with KL in the reward or gamma < 1, exported to verl.
5. RLOO exported to TRL RLOO: the whole response's probability ratio (importance_sampling_level sequence_sum).
6. GRPO's std epsilon exported to verl (1e-6, fixed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.exports import overrides_of
from helpers.peer_code import verl_code, verl_config
from helpers.peer_comparison import (
    GROUP,
    LENGTHS,
    REWARDS,
    WIDTH,
    Batch,
    TrlCase,
    close,
    grad_of,
    make_batch,
    ppo_core_advantages,
    ppo_core_share,
    run_trl_cases,
    verl_actor_loss,
    verl_advantages,
    with_sequence_advantages,
)

from ppo_core.algorithm.estimators import AdvantageInputs, estimate_advantages
from ppo_core.algorithm.losses import StepTotals
from ppo_core.config.ppo_config import PPOConfig
from tuner.exports import differences, verl_overrides


def tensor(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def hand_batch(lengths: list[int], logprobs: list[list[float]], old: list[list[float]], ref: list[list[float]],
               advantages: list[float]) -> Batch:
    """A batch written out by hand, padding past each length; entropies 1, values unused."""
    mask = (torch.arange(len(logprobs[0]))[None, :] < torch.tensor(lengths)[:, None]).to(torch.float64)
    spread = tensor([[a] * len(logprobs[0]) for a in advantages])
    ones = torch.ones_like(mask)
    return Batch(mask=mask, logprobs=tensor(logprobs), old_logprobs=tensor(old), ref_logprobs=tensor(ref),
                 entropy=ones, advantages=spread, values=ones, new_values=ones, returns=ones)


def micro_batches(batch: Batch, *bounds: tuple[int, int]) -> list[Batch]:
    return [batch.slice(slice(start, end)) for start, end in bounds]


# Row 1: logp = old = -1, ref = -1.5, beta = 1: d(beta k3)/d logp = 1 - e^-0.5 = 0.394; TRL's default multiplies k3
# by the ratio, whose gradient adds k3 = 0.107: 0.500.
ROW_1_EXAMPLE = hand_batch([1], [[-1.0]], [[-1.0]], [[-1.5]], [0.0])
KL_RUN: dict[str, Any] = dict(advantage_estimator="grpo", num_generations=GROUP,
                              per_device_train_batch_size=len(LENGTHS), response_length=WIDTH, cliprange=0.2,
                              cliprange_high=0.28, beta=0.04, use_cpu=True)
# Row 2: micro-batch 1 holds one token with A = +1, micro-batch 2 three tokens with A = -1, both at ratio 1.
ROW_2_EXAMPLE = hand_batch([1, 3], [[-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]], [[-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]],
                           [[-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]], [1.0, -1.0])
ROW_2_RUN: dict[str, Any] = dict(advantage_estimator="grpo", num_generations=2, per_device_train_batch_size=1,
                                 gradient_accumulation_steps=2, response_length=3, beta=0.0, use_cpu=True)
# Two micro-batches of four responses (35 tokens) accumulated into one step, for every loss type.
TWO_MICRO: dict[str, Any] = dict(advantage_estimator="grpo", num_generations=GROUP, per_device_train_batch_size=4,
                                 gradient_accumulation_steps=2, response_length=WIDTH + 3, cliprange=0.2,
                                 cliprange_high=0.28, beta=0.04, use_cpu=True)
TWO_MICRO_STEP = StepTotals(tokens=float(sum(LENGTHS)), rows=float(len(LENGTHS)), micro_batches=2)
RLOO_RUN: dict[str, Any] = dict(advantage_estimator="rloo", num_generations=GROUP,
                                per_device_train_batch_size=len(LENGTHS), response_length=WIDTH, cliprange=0.2,
                                cliprange_high=0.28, kl_coef=0.05, importance_sampling_level="sequence_sum",
                                loss_type="seq_mean_token_mean", use_cpu=True)


def two_micro_batch_cases(name: str, loss_type: str, entropy_coef: float = 0.0) -> dict[str, TrlCase]:
    config = dict(TWO_MICRO, loss_type=loss_type, entropy_coef=entropy_coef)
    parts = micro_batches(with_sequence_advantages(make_batch()), (0, 4), (4, 8))
    return {f"{name} {index}": TrlCase("grpo", config, part, TWO_MICRO_STEP, accumulation_steps=2,
                                       generation_tokens=float(sum(LENGTHS))) for index, part in enumerate(parts)}


# A rollout of two optimizer steps of two micro-batches each: 16 and 19 tokens.
TWO_STEPS: dict[str, Any] = dict(TWO_MICRO, loss_type="token_mean", per_device_train_batch_size=2,
                                 gradient_accumulation_steps=4, num_mini_batches=2, beta=0.0)
TWO_STEP_BOUNDS = ((0, 2), (2, 4), (4, 6), (6, 8))
ROW_2_PARTS = micro_batches(ROW_2_EXAMPLE, (0, 1), (1, 2))
ROW_2_STEP = StepTotals(tokens=4.0, rows=2.0, micro_batches=2)
CASES: dict[str, TrlCase] = {
    **{f"row 1 {loss}": TrlCase("grpo", dict(KL_RUN, loss_type=loss), with_sequence_advantages(make_batch()))
       for loss in ("token_mean", "bnpo", "seq_mean_token_mean", "seq_mean_token_sum_norm")},
    "row 1 example": TrlCase("grpo", dict(KL_RUN, beta=1.0, per_device_train_batch_size=GROUP), ROW_1_EXAMPLE),
    "row 1 example, TRL's default": TrlCase("grpo", dict(KL_RUN, beta=1.0, per_device_train_batch_size=GROUP),
                                            ROW_1_EXAMPLE, extra_flags=("--use_bias_correction_kl", "True")),
    **{f"row 2 example {loss} {index}": TrlCase("grpo", dict(ROW_2_RUN, loss_type=loss), part, ROW_2_STEP,
                                                accumulation_steps=2, generation_tokens=4.0)
       for loss in ("token_mean", "bnpo") for index, part in enumerate(ROW_2_PARTS)},
    **two_micro_batch_cases("row 2 token_mean", "token_mean"),
    **two_micro_batch_cases("row 2 bnpo", "bnpo", entropy_coef=0.01),
    **two_micro_batch_cases("row 2 grpo", "seq_mean_token_mean"),
    **two_micro_batch_cases("row 2 dr_grpo", "seq_mean_token_sum_norm"),
    "row 5": TrlCase("rloo", RLOO_RUN, with_sequence_advantages(make_batch())),
    **{f"row 2 dapo two steps {a}": TrlCase("grpo", TWO_STEPS, part, accumulation_steps=2,
                                           generation_tokens=float(sum(LENGTHS)))
       for a, part in zip(range(0, 8, 2), micro_batches(with_sequence_advantages(make_batch()), *TWO_STEP_BOUNDS),
                          strict=True)},
}


@pytest.fixture(scope="module")
def trl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return run_trl_cases(CASES, Path(tmp_path_factory.mktemp("trl_rows")))


# --- row 1 ---

@pytest.mark.parametrize("loss_type", ["token_mean", "bnpo", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_kl_loss_equals_trl_grpo_off_policy(loss_type: str, trl: dict[str, dict[str, Any]]) -> None:
    name = f"row 1 {loss_type}"
    assert trl[name]["args"]["use_bias_correction_kl"] is False and trl[name]["args"]["beta"] == 0.04
    trl_case_equal(name, trl)


def test_kl_loss_hand_example_equals_trl_and_trls_default_adds_k3(trl: dict[str, dict[str, Any]]) -> None:
    trl_case_equal("row 1 example", trl)
    assert math.isclose(float(trl["row 1 example"]["grad"][0, 0]), 1 - math.exp(-0.5), abs_tol=1e-9)
    default = float(trl["row 1 example, TRL's default"]["grad"][0, 0])
    assert math.isclose(default, 1 - math.exp(-0.5) + math.exp(-0.5) - 0.5, abs_tol=1e-9)  # 0.500


def trl_case_equal(name: str, trl: dict[str, dict[str, Any]]) -> None:
    case = CASES[name]
    config = PPOConfig(**case.config)
    ours, our_grad = grad_of(lambda lp: ppo_core_share(config, case.batch, lp, case.step), case.batch.logprobs)
    close(ours, trl[name]["loss"])
    close(our_grad, trl[name]["grad"])


# --- row 2 ---

@pytest.mark.parametrize("loss_type", ["token_mean", "bnpo"])
def test_micro_batch_hand_example_shares_equal_trl(loss_type: str, trl: dict[str, dict[str, Any]]) -> None:
    # The step's loss: token_mean (TRL's dapo here) (-1 + 3) / 4 = 0.5; bnpo (-1 + 1) / 2 = 0.
    total = 0.0
    for index in range(2):
        trl_case_equal(f"row 2 example {loss_type} {index}", trl)
        total += float(trl[f"row 2 example {loss_type} {index}"]["loss"])
    assert math.isclose(total, 0.5 if loss_type == "token_mean" else 0.0, abs_tol=1e-12)


def test_micro_batch_hand_example_token_mean_equals_verl() -> None:
    config = PPOConfig(**ROW_2_RUN, loss_type="token_mean")
    ours = sum(float(ppo_core_share(config, part, part.logprobs, ROW_2_STEP)) for part in ROW_2_PARTS)
    theirs = sum(float(verl_actor_loss(config, part, part.logprobs, batch_num_tokens=4, global_batch_size=2))
                 for part in ROW_2_PARTS)
    assert math.isclose(ours, 0.5, abs_tol=1e-12) and math.isclose(theirs, 0.5, abs_tol=1e-12)


@pytest.mark.parametrize("loss", ["token_mean", "bnpo", "grpo", "dr_grpo"])
def test_two_micro_batches_equal_trl(loss: str, trl: dict[str, dict[str, Any]]) -> None:
    for index in range(2):
        trl_case_equal(f"row 2 {loss} {index}", trl)


@pytest.mark.parametrize("loss_type", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_two_micro_batches_equal_verl(loss_type: str) -> None:
    # Entropy and KL loss terms too: verl aggregates them over the step as its policy loss, as ppo_core does.
    config = PPOConfig(**dict(TWO_MICRO, loss_type=loss_type, entropy_coef=0.01))
    batch = make_batch()
    bounds = ((0, 4), (4, 8))

    def ours(logprobs: torch.Tensor) -> torch.Tensor:
        return sum((ppo_core_share(config, batch.slice(slice(a, b)), logprobs[a:b], TWO_MICRO_STEP)
                    for a, b in bounds), torch.zeros((), dtype=torch.float64))

    def theirs(logprobs: torch.Tensor) -> torch.Tensor:
        return sum((verl_actor_loss(config, batch.slice(slice(a, b)), logprobs[a:b], batch_num_tokens=sum(LENGTHS),
                                    global_batch_size=len(LENGTHS)) for a, b in bounds),
                   torch.zeros((), dtype=torch.float64))

    our_loss, our_grad = grad_of(ours, batch.logprobs)
    their_loss, their_grad = grad_of(theirs, batch.logprobs)
    close(our_loss, their_loss)
    close(our_grad, their_grad)


def test_trl_entropy_over_micro_batches_is_a_named_difference() -> None:
    # TRL's entropy bonus is each micro-batch's token mean over the accumulation steps, whatever the loss type.
    for loss_type in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"):
        lines = differences("trl-grpo", PPOConfig(**dict(TWO_MICRO, loss_type=loss_type, entropy_coef=0.01))
                            .to_dict())
        assert any(line.startswith("entropy_coef=0.01") for line in lines), (loss_type, lines)
    assert not any(line.startswith("entropy_coef") for line in differences(
        "trl-grpo", PPOConfig(**dict(TWO_MICRO, loss_type="bnpo", entropy_coef=0.01)).to_dict()))


def test_trl_dapo_over_several_steps_is_a_named_difference(trl: dict[str, dict[str, Any]]) -> None:
    # TRL's dapo divides every step by the rollout's tokens over its steps (35 / 2 = 17.5), ppo_core's token_mean by
    # the step's own (16, then 19): TRL's share is ppo_core's x step tokens / 17.5.
    config = PPOConfig(**TWO_STEPS)
    batch = with_sequence_advantages(make_batch())
    for first in (0, 4):
        tokens = float(batch.mask[first:first + 4].sum())
        step = StepTotals(tokens=tokens, rows=4.0, micro_batches=2)
        for start in (first, first + 2):
            part = batch.slice(slice(start, start + 2))
            ours, our_grad = grad_of(lambda lp, p=part, s=step: ppo_core_share(config, p, lp, s), part.logprobs)
            theirs = trl[f"row 2 dapo two steps {start}"]
            close(ours * tokens / 17.5, theirs["loss"])
            close(our_grad * tokens / 17.5, theirs["grad"])
    assert trl["row 2 dapo two steps 0"]["args"]["loss_type"] == "dapo"
    assert any(line.startswith("loss_type=token_mean") for line in differences("trl-grpo", config.to_dict()))


# --- row 3 ---

@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_dual_clip_equals_verl_clip_ratio_c(dual_clip: float | None) -> None:
    # A = -1 at log-ratio 1.5: without a dual clip the loss and its gradient are e^1.5 = 4.48; at c = 3, 3.0 and 0.
    batch = hand_batch([1], [[-1.0]], [[-2.5]], [[-1.0]], [-1.0])
    config = PPOConfig(advantage_estimator="grpo", beta=0.0, dual_clip=dual_clip, response_length=1)
    actor = verl_config(overrides_of(verl_overrides(config.to_dict())), "actor_rollout_ref.actor")
    verl = verl_code()
    ours, our_grad = grad_of(lambda lp: ppo_core_share(config, batch, lp), batch.logprobs)
    theirs, their_grad = grad_of(lambda lp: verl.compute_policy_loss_vanilla(
        batch.old_logprobs, lp, batch.advantages, batch.mask, actor.loss_agg_mode, actor)[0], batch.logprobs)
    close(ours, theirs)
    close(our_grad, their_grad)
    expected = math.exp(1.5) if dual_clip is None else 3.0
    assert math.isclose(float(ours), expected, abs_tol=1e-9)
    assert math.isclose(float(our_grad[0, 0]), expected if dual_clip is None else 0.0, abs_tol=1e-9)
    # Without the export's clip_ratio_c, verl's default (3.0) would have bound.
    assert verl_config({}, "actor_rollout_ref.actor").clip_ratio_c == 3.0


# --- row 4 ---

def test_reinforce_pp_baseline_with_kl_in_the_reward_or_gamma_below_1_is_a_named_verl_difference() -> None:
    # G = 2, 2 tokens, scores [1, 0], KL reward [[-0.2, 0], [0, 0]]: ppo_core's token returns whitened, verl's one
    # centred summed reward per response, whitened: +-0.866.
    mask = torch.ones(2, 2, dtype=torch.float64)
    kl_rewards = tensor([[-0.2, 0.0], [0.0, 0.0]])
    ours, _ = estimate_advantages("reinforce_pp_baseline", AdvantageInputs(
        scores=tensor([[1.0, 0.0]])[0], kl_rewards=kl_rewards, values=None, response_mask=mask, group_size=2,
        gamma=1.0, lam=1.0, whiten_advantages=True, whiten_rewards=False, scale_rewards="group"))
    rewards = kl_rewards + tensor([[0.0, 1.0], [0.0, 0.0]])
    theirs, _ = verl_code().compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, ["p", "p"])
    assert torch.allclose(ours, tensor([[0.665, 1.046], [-0.856, -0.856]]), atol=1e-3)
    assert torch.allclose(theirs, tensor([[0.866, 0.866], [-0.866, -0.866]]), atol=1e-3)
    kl_in_the_reward_or_discounted: tuple[dict[str, Any], ...] = (dict(kl_coef=0.1), dict(kl_coef=0.0, gamma=0.9))
    for fields in kl_in_the_reward_or_discounted:
        lines = differences("verl", PPOConfig(advantage_estimator="reinforce_pp_baseline", **fields).to_dict())
        assert any(line.startswith("advantage_estimator=reinforce_pp_baseline") for line in lines), (fields, lines)
    assert not any("reinforce_pp_baseline" in line for line in differences(
        "verl", PPOConfig(advantage_estimator="reinforce_pp_baseline", kl_coef=0.0).to_dict()))


@pytest.mark.parametrize("rewards", sorted(REWARDS))
def test_reinforce_pp_baseline_equals_verl_at_gamma_1_without_kl(rewards: str) -> None:
    config = PPOConfig(advantage_estimator="reinforce_pp_baseline", kl_coef=0.0, num_generations=GROUP,
                       per_device_train_batch_size=len(LENGTHS), response_length=WIDTH)
    batch = make_batch()
    scores = torch.tensor(REWARDS[rewards], dtype=torch.float64)
    close(ppo_core_advantages(config, scores, batch)[0], verl_advantages(config, scores, batch)[0], batch.mask)


# --- row 5 ---

def test_sequence_sum_ratio_equals_trl_rloo(trl: dict[str, dict[str, Any]]) -> None:
    assert trl["row 5"]["args"]["beta"] == 0.05 and trl["row 5"]["args"]["epsilon_high"] == 0.28
    trl_case_equal("row 5", trl)


def test_token_level_rloo_is_a_named_difference() -> None:
    lines = differences("trl-rloo", PPOConfig(**{**RLOO_RUN, "importance_sampling_level": "token"}).to_dict())
    assert any("importance_sampling_level=token" in line for line in lines), lines
    assert not any("importance_sampling_level" in line for line in differences("trl-rloo", PPOConfig(
        **RLOO_RUN).to_dict()))


# --- row 6 ---

@pytest.mark.parametrize("rewards", sorted(REWARDS))
def test_grpo_scale_rewards_epsilon_equals_verl(rewards: str) -> None:
    config = PPOConfig(advantage_estimator="grpo", scale_rewards="group", scale_rewards_epsilon=1e-6,
                       num_generations=GROUP, per_device_train_batch_size=len(LENGTHS), response_length=WIDTH)
    batch = make_batch()
    scores = torch.tensor(REWARDS[rewards], dtype=torch.float64)
    close(ppo_core_advantages(config, scores, batch)[0], verl_advantages(config, scores, batch)[0], batch.mask)


def test_trl_epsilon_is_a_named_verl_difference() -> None:
    # [0, 0, 0, 2e-4], std 1e-4: 1.5e-4 / (1e-4 + 1e-4) = 0.75 here, 1.5e-4 / (1e-4 + 1e-6) = 1.485 in verl.
    config = PPOConfig(advantage_estimator="grpo", scale_rewards="group", num_generations=GROUP,
                       per_device_train_batch_size=len(LENGTHS), response_length=WIDTH)
    batch = make_batch()
    scores = torch.tensor(REWARDS["tiny spread"], dtype=torch.float64)
    assert math.isclose(float(ppo_core_advantages(config, scores, batch)[0][3, 0]), 0.75, abs_tol=1e-9)
    assert math.isclose(float(verl_advantages(config, scores, batch)[0][3, 0]), 1.5e-4 / 1.01e-4, abs_tol=1e-6)
    assert any(line.startswith("scale_rewards_epsilon=0.0001") for line in differences("verl", config.to_dict()))

