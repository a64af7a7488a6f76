"""ppo_core against OpenRLHF 0.11.2's own code, with the settings the openrlhf export writes, parsed by
train_ppo_ray's own parser: its advantage estimators (the experience maker's compute_advantages_and_returns) and its
actor's loss (ActorPPOTrainer.training_step: PolicyLoss, the KL loss term, the entropy bonus).

Where OpenRLHF computes the same thing, the tests assert equality to 1e-6; where it does not, a test states the
difference exactly (what OpenRLHF computes instead, in ppo_core's terms), so that the export can name it.
"""

from __future__ import annotations

import math
import types
from typing import Any

import pytest
import torch
from helpers.exports import settings_of
from helpers.peer_code import (
    openrlhf_actor_loss,
    openrlhf_args,
    openrlhf_code,
    openrlhf_experience_maker,
    openrlhf_step_info,
)
from helpers.peer_comparison import LENGTHS, REWARDS, WIDTH, Batch, close, grad_of, make_batch, ppo_core_advantages

from ppo_core.algorithm.kl import kl_per_token
from ppo_core.algorithm.losses import StepTotals, clipped_value_loss
from ppo_core.algorithm.masked import masked_sum
from ppo_core.algorithm.objective import policy_objective
from ppo_core.config.ppo_config import PPOConfig
from tuner.exports import differences, openrlhf_arguments

GROUP = 4
EXPERIENCES = ((0, 4), (4, 8))  # the rollout as two experiences (OpenRLHF's micro-batches of the rollout)


def exported_args(config: PPOConfig) -> Any:
    return openrlhf_args(settings_of(openrlhf_arguments(config.to_dict())))


def openrlhf_advantages(config: PPOConfig, scores: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """OpenRLHF's advantages and returns for the openrlhf export of ``config``: make_experience's KL (to the reference,
    under the rollout policy, unless the KL is a loss term), then compute_advantages_and_returns as shipped."""
    args = exported_args(config)
    code = openrlhf_code()
    if args.algo.kl.use_loss:
        kl = torch.zeros_like(batch.old_logprobs)
    else:
        kl = code.compute_approx_kl(batch.old_logprobs, batch.ref_logprobs, kl_estimator=args.algo.kl.estimator)
    experiences = [types.SimpleNamespace(
        index=list(range(start, end)), rewards=scores[start:end].clone(), action_mask=batch.mask[start:end].bool(),
        kl=kl[start:end], values=batch.values[start:end], info={}, response_length=batch.mask[start:end].sum(1),
        truncated=None) for start, end in EXPERIENCES]
    maker = openrlhf_experience_maker(args, args.algo.kl.init_coef)
    maker.compute_advantages_and_returns(experiences)
    return (torch.cat([e.advantages for e in experiences]).to(torch.float64),
            torch.cat([e.returns for e in experiences]).to(torch.float64))


def estimator_config(**fields: Any) -> PPOConfig:
    return PPOConfig(**fields, num_generations=GROUP, per_device_train_batch_size=len(LENGTHS), response_length=WIDTH)


EQUAL: dict[str, dict[str, Any]] = {
    "rloo": dict(advantage_estimator="rloo", kl_coef=0.0),
    "dr_grpo": dict(advantage_estimator="grpo", scale_rewards="none"),
    # OpenRLHF's group_norm adds 1e-9 to the group's std: equal at ppo_core's scale_rewards_epsilon 1e-9.
    "group_norm": dict(advantage_estimator="grpo", scale_rewards="group", scale_rewards_epsilon=1e-9),
}


@pytest.mark.parametrize("rewards", sorted(REWARDS))
@pytest.mark.parametrize("case", sorted(EQUAL))
def test_group_estimators_equal_openrlhf(case: str, rewards: str) -> None:
    config = estimator_config(**EQUAL[case])
    batch = make_batch()
    scores = torch.tensor(REWARDS[rewards], dtype=torch.float64)
    ours, _ = ppo_core_advantages(config, scores, batch)
    theirs, _ = openrlhf_advantages(config, scores, batch)
    close(ours, theirs, batch.mask)


def test_group_norm_at_grpo_default_epsilon_differs() -> None:
    # [0, 0, 0, 2e-4]: std 1e-4, so the epsilon decides: OpenRLHF 1.5e-4 / (1e-4 + 1e-9) = 1.49999 on the last
    # response, ppo_core at TRL's 1e-4: 1.5e-4 / 2e-4 = 0.75.
    config = estimator_config(advantage_estimator="grpo", scale_rewards="group")
    batch = make_batch()
    scores = torch.tensor(REWARDS["tiny spread"], dtype=torch.float64)
    ours, _ = ppo_core_advantages(config, scores, batch)
    theirs, _ = openrlhf_advantages(config, scores, batch)
    assert math.isclose(float(ours[3, 0]), 0.75, abs_tol=1e-6)
    assert math.isclose(float(theirs[3, 0]), 1.5e-4 / (1e-4 + 1e-9), abs_tol=1e-6)


# The whitened estimators: OpenRLHF divides by the biased standard deviation (sum over n, clamped at 1e-8, where
# ppo_core divides by n - 1 and adds 1e-8), so its advantages are ppo_core's times sqrt(n / (n - 1)), n the batch's
# tokens (here 35: 1.4% larger).
WHITENED: dict[str, dict[str, Any]] = {
    "gae": dict(advantage_estimator="gae", gamma=1.0, lam=0.95, kl_coef=0.1),
    "reinforce": dict(advantage_estimator="reinforce_pp", gamma=0.9, kl_coef=0.1),
    "reinforce_baseline": dict(advantage_estimator="reinforce_pp_baseline", kl_coef=0.0),
}


@pytest.mark.parametrize("case", sorted(WHITENED))
def test_whitened_estimators_differ_by_openrlhf_biased_std(case: str) -> None:
    config = estimator_config(**WHITENED[case])
    batch = make_batch()
    scores = torch.tensor(REWARDS["continuous"], dtype=torch.float64)
    ours, our_returns = ppo_core_advantages(config, scores, batch)
    theirs, their_returns = openrlhf_advantages(config, scores, batch)
    tokens = float(batch.mask.sum())
    close(ours * math.sqrt(tokens / (tokens - 1)), theirs, batch.mask)
    if our_returns is not None:
        close(our_returns, their_returns, batch.mask)  # GAE's value targets are the same


def test_reinforce_baseline_with_gamma_below_one_is_undiscounted_in_openrlhf() -> None:
    # OpenRLHF sets gamma to 1 for every estimator but gae and reinforce (a warning in its log): ppo_core's
    # reinforce_pp_baseline at gamma 0.9 discounts the score back from the last token, OpenRLHF's does not.
    config = estimator_config(advantage_estimator="reinforce_pp_baseline", kl_coef=0.0, gamma=0.9)
    batch = make_batch()
    scores = torch.tensor(REWARDS["continuous"], dtype=torch.float64)
    theirs, _ = openrlhf_advantages(config, scores, batch)
    undiscounted, _ = ppo_core_advantages(estimator_config(advantage_estimator="reinforce_pp_baseline", kl_coef=0.0,
                                                           gamma=1.0), scores, batch)
    tokens = float(batch.mask.sum())
    close(undiscounted * math.sqrt(tokens / (tokens - 1)), theirs, batch.mask)
    ours, _ = ppo_core_advantages(config, scores, batch)
    assert float((ours - undiscounted).abs().max()) > 0.1


@pytest.mark.parametrize("estimator", ["rloo", "dr_grpo"])
def test_kl_in_the_reward_stays_per_token_in_openrlhf_group_estimators(estimator: str) -> None:
    # OpenRLHF subtracts the group baseline from the scores alone and then adds each token's KL reward-to-go
    # (-beta sum_{s >= t} KL_s); ppo_core's rloo and grpo put the whole response's KL into its reward R_i before the
    # baseline, one advantage for every token of the response.
    fields = dict(advantage_estimator="rloo", kl_coef=0.1) if estimator == "rloo" else dict(
        advantage_estimator="grpo", scale_rewards="none", kl_in_reward=True, kl_coef=0.1)
    config = estimator_config(**fields)
    batch = make_batch()
    scores = torch.tensor(REWARDS["continuous"], dtype=torch.float64)
    theirs, _ = openrlhf_advantages(config, scores, batch)
    without_kl = estimator_config(**{**fields, "kl_coef": 0.0})
    centred, _ = ppo_core_advantages(without_kl, scores, batch)
    kl = openrlhf_code().compute_approx_kl(batch.old_logprobs, batch.ref_logprobs, kl_estimator="k1")
    kl_to_go = torch.where(batch.mask.bool(), kl, 0.0).flip(1).cumsum(1).flip(1)
    close(centred - config.kl_coef * kl_to_go, theirs, batch.mask)
    ours, _ = ppo_core_advantages(config, scores, batch)
    assert float(torch.where(batch.mask.bool(), ours - theirs, 0.0).abs().max()) > 1e-3


# --- the actor's loss: ActorPPOTrainer.training_step ---

def openrlhf_step_loss(config: PPOConfig, batch: Batch, logprobs: torch.Tensor,
                       micro_batches: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """The step's loss as OpenRLHF's actor backpropagates it: each micro-batch's training_step loss with the step's
    loss_batch_info, times DeepSpeed's 1 / gas, summed."""
    args = exported_args(config)
    masks = [batch.mask[start:end] for start, end in micro_batches]
    info = openrlhf_step_info(masks, len(micro_batches))
    total = torch.zeros((), dtype=torch.float64)
    for start, end in micro_batches:
        part = batch.slice(slice(start, end))
        experience = types.SimpleNamespace(
            sequences=None, attention_mask=None, action_mask=part.mask, action_log_probs=part.old_logprobs,
            advantages=part.advantages, base_action_log_probs=part.ref_logprobs, rollout_log_probs=None, info={})
        loss = openrlhf_actor_loss(args, logprobs[start:end], part.entropy, experience, args.algo.kl.init_coef, info)
        total = total + loss / len(micro_batches)
    return total


def ppo_core_step_loss(config: PPOConfig, batch: Batch, logprobs: torch.Tensor,
                       micro_batches: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """The sum of ppo_core's micro-batch shares of the step (policy_objective, as update.py calls it)."""
    step = StepTotals(tokens=float(batch.mask.sum()), rows=float(batch.rows), micro_batches=len(micro_batches))
    beta = None if config.kl_penalty_in_reward else config.beta
    total = torch.zeros((), dtype=torch.float64)
    for start, end in micro_batches:
        part = batch.slice(slice(start, end))
        total = total + policy_objective(logprobs[start:end], part.old_logprobs, part.ref_logprobs, part.advantages,
                                         part.mask, part.entropy, config, beta, step, WIDTH).loss
    return total


LOSS_RUN: dict[str, Any] = dict(advantage_estimator="grpo", num_generations=GROUP, per_device_train_batch_size=4,
                                gradient_accumulation_steps=2, response_length=WIDTH, cliprange=0.2,
                                cliprange_high=0.28)
ONE, TWO = ((0, 8),), ((0, 4), (4, 8))
LOSS_CASES: dict[str, dict[str, Any]] = {
    # token-mean: the clipped loss, the entropy bonus and the KL loss term (k3, k2) all over the step's tokens.
    "token-mean, KL loss k3, entropy": dict(loss_type="token_mean", beta=0.05, entropy_coef=0.01),
    "token-mean, KL loss k2": dict(loss_type="token_mean", beta=0.05, kl_loss_estimator="k2"),
    "token-mean, dual clip 3": dict(loss_type="token_mean", beta=0.0, dual_clip=3.0),
    # seq-mean-token-mean without KL or entropy terms (see the test after this one for those).
    "seq-mean-token-mean": dict(loss_type="seq_mean_token_mean", beta=0.0),
    "seq-mean-token-mean, dual clip 1.5": dict(loss_type="seq_mean_token_mean", beta=0.0, dual_clip=1.5),
    # importance_sampling_level sequence exports as --actor.policy_loss_type gspo, which averages over responses.
    "gspo, seq-mean-token-mean": dict(loss_type="seq_mean_token_mean", beta=0.0, importance_sampling_level="sequence"),
}


@pytest.mark.parametrize("micro_batches", [ONE, TWO], ids=["one micro-batch", "two micro-batches"])
@pytest.mark.parametrize("case", sorted(LOSS_CASES))
def test_actor_loss_equals_openrlhf(case: str, micro_batches: tuple[tuple[int, int], ...]) -> None:
    config = PPOConfig(**LOSS_RUN, **LOSS_CASES[case])
    batch = beyond_dual_clip(make_batch())
    ours, our_grad = grad_of(lambda lp: ppo_core_step_loss(config, batch, lp, micro_batches), batch.logprobs)
    theirs, their_grad = grad_of(lambda lp: openrlhf_step_loss(config, batch, lp, micro_batches), batch.logprobs)
    close(ours, theirs)
    close(our_grad, their_grad)


def beyond_dual_clip(batch: Batch) -> Batch:
    """Two tokens with A < 0 at ratios e^1.5 = 4.5 (beyond a dual clip of 3) and e^0.6 = 1.8 (beyond 1.5)."""
    old = batch.old_logprobs.clone()
    old[1, 0], old[3, 1] = batch.logprobs[1, 0] - 1.5, batch.logprobs[3, 1] - 0.6
    return Batch(**{**batch.__dict__, "old_logprobs": old})


@pytest.mark.parametrize("micro_batches", [ONE, TWO], ids=["one micro-batch", "two micro-batches"])
def test_openrlhf_aggregates_kl_and_entropy_by_token_whatever_the_loss_agg_mode(
        micro_batches: tuple[tuple[int, int], ...]) -> None:
    # training_step calls aggregate_loss for the KL loss and the entropy without token_level_loss, whose default is
    # True: under seq-mean-token-mean they stay token means over the step, where ppo_core aggregates them as the
    # policy loss (verl's way).
    config = PPOConfig(**LOSS_RUN, loss_type="seq_mean_token_mean", beta=0.05, entropy_coef=0.01)
    batch = make_batch()
    theirs = openrlhf_step_loss(config, batch, batch.logprobs, micro_batches)
    ours = ppo_core_step_loss(config, batch, batch.logprobs, micro_batches)
    policy_only = PPOConfig(**LOSS_RUN, loss_type="seq_mean_token_mean", beta=0.0)
    code = openrlhf_code()
    kl = code.compute_approx_kl(batch.logprobs, batch.ref_logprobs, kl_estimator="k3").to(torch.float64)
    token_means = (config.beta * masked_sum(kl, batch.mask) - config.entropy_coef * masked_sum(batch.entropy,
                                                                                                batch.mask))
    expected = ppo_core_step_loss(policy_only, batch, batch.logprobs, micro_batches) + token_means / batch.mask.sum()
    close(expected, theirs)
    assert abs(float(ours - theirs)) > 1e-4
    # ... and the export says so.
    assert any(line.startswith("loss_type=seq_mean_token_mean: OpenRLHF averages the KL loss and the entropy bonus")
               for line in differences("openrlhf", config.to_dict()))


def test_openrlhf_clips_the_centred_reward_not_the_score() -> None:
    # compute_reward clamps to --reward.clip_range (-10, 10) what the group baseline left: RLOO's 30 - 0 = 30 becomes
    # 10 on the first response, while ppo_core (and verl) keep 30.
    config = estimator_config(advantage_estimator="rloo", kl_coef=0.0)
    batch = make_batch()
    scores = torch.tensor((30.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0), dtype=torch.float64)
    ours, _ = ppo_core_advantages(config, scores, batch)
    theirs, _ = openrlhf_advantages(config, scores, batch)
    assert float(ours[0, 0]) == 30.0 and float(theirs[0, 0]) == 10.0
    close(ours[4:], theirs[4:], batch.mask[4:])
    assert any(line.startswith("rewards: OpenRLHF clips each reward at +-10")
               for line in differences("openrlhf", config.to_dict()))


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_equal_openrlhf(estimator: str) -> None:
    # compute_approx_kl works in float32 (log_probs.float()): equal to 1e-6 at these magnitudes.
    batch = make_batch()
    code = openrlhf_code()
    ours, our_grad = grad_of(lambda lp: (kl_per_token(lp, batch.ref_logprobs, estimator) * batch.mask).sum(),
                             batch.logprobs)
    theirs, their_grad = grad_of(lambda lp: (code.compute_approx_kl(lp, batch.ref_logprobs, kl_estimator=estimator)
                                             * batch.mask).sum(), batch.logprobs)
    close(ours, theirs.to(torch.float64))
    close(our_grad, their_grad)


def test_value_loss_equals_openrlhf() -> None:
    config = PPOConfig(cliprange_value=0.3)
    args = exported_args(config)
    assert args.critic.value_clip == 0.3
    batch = make_batch()
    value_loss = openrlhf_code().ValueLoss(args.critic.value_clip)
    ours, our_grad = grad_of(lambda v: clipped_value_loss(v, batch.values, batch.returns, batch.mask,
                                                          config.cliprange_value)[0], batch.new_values)
    theirs, their_grad = grad_of(lambda v: value_loss(v, batch.values, batch.returns, batch.mask), batch.new_values)
    close(ours, theirs)
    close(our_grad, their_grad)
