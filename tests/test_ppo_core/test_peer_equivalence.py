"""ppo_core against its peers' own code: for every estimator, loss aggregation, KL placement and clip setting that
an export maps onto a peer, identical float64 inputs go to ppo_core and to the peer's installed code
(tests/helpers/peer_code.py) with the settings the export writes, and the values and the gradients w.r.t. the current
log-probs agree to 1e-6.

The batch (tests/helpers/peer_comparison.py): 8 right-padded responses of 1 to 7 tokens, the padding holding garbage
(finite: verl and OpenRLHF multiply by the mask, so a NaN there would poison their sums, and the peers' reward tensors
are zero past the response, as their reward managers write them); ratios below 1 - 0.2, between 1 + 0.2 and 1 + 0.28
and beyond 1.28, with positive and negative advantages at each.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from helpers.exports import flags_of, overrides_of
from helpers.peer_code import PaddedBatch, verl_code, verl_config
from helpers.peer_comparison import (
    GROUP,
    LENGTHS,
    REWARDS,
    SEQUENCE_ADVANTAGES,
    WIDTH,
    TrlCase,
    close,
    grad_of,
    last_token_scores,
    make_batch,
    ppo_core_advantages,
    ppo_core_share,
    run_trl_cases,
    verl_actor_loss,
    verl_advantages,
    with_sequence_advantages,
)

from ppo_core.algorithm.advantages import add_scores, kl_penalty
from ppo_core.algorithm.kl import kl_per_token
from ppo_core.algorithm.losses import clipped_value_loss
from ppo_core.config.ppo_config import KLEstimator, LossType, PPOConfig
from tuner.exports import differences, grpo_arguments, verl_overrides

# --- advantages: ppo_core's estimators against verl's, through verl's own compute_advantage ---

ADVANTAGE_CASES: dict[str, dict[str, Any]] = {
    # GAE: verl always whitens its advantages; KL in the reward (k1, verl's "kl"), discounted or not.
    "gae": dict(advantage_estimator="gae", gamma=1.0, lam=0.95),
    "gae discounted, k2 KL": dict(advantage_estimator="gae", gamma=0.9, lam=0.8, kl_coef=0.3, kl_estimator="k2"),
    "gae k3 KL": dict(advantage_estimator="gae", kl_coef=0.2, kl_estimator="k3"),
    # Dr. GRPO (no std division); the std-scaled GRPO is row 6's (scale_rewards_epsilon).
    "grpo none": dict(advantage_estimator="grpo", scale_rewards="none"),
    "grpo none, KL in the reward": dict(advantage_estimator="grpo", scale_rewards="none", kl_in_reward=True,
                                        kl_coef=0.1),
    "rloo": dict(advantage_estimator="rloo", kl_coef=0.0),
    "rloo, KL in the reward": dict(advantage_estimator="rloo", kl_coef=0.1),
    "reinforce_pp": dict(advantage_estimator="reinforce_pp", kl_coef=0.0),
    "reinforce_pp discounted, KL": dict(advantage_estimator="reinforce_pp", gamma=0.9, kl_coef=0.1),
    # verl puts the group-centred score on every token: ppo_core's return equals it at gamma 1 without KL (row 4).
    "reinforce_pp_baseline": dict(advantage_estimator="reinforce_pp_baseline", kl_coef=0.0),
}


@pytest.mark.parametrize("rewards", sorted(REWARDS))
@pytest.mark.parametrize("case", sorted(ADVANTAGE_CASES))
def test_advantages_equal_verl(case: str, rewards: str) -> None:
    config = PPOConfig(**ADVANTAGE_CASES[case], num_generations=GROUP, per_device_train_batch_size=len(LENGTHS),
                       response_length=WIDTH)
    batch = make_batch()
    scores = torch.tensor(REWARDS[rewards], dtype=torch.float64)
    ours, our_returns = ppo_core_advantages(config, scores, batch)
    theirs, their_returns = verl_advantages(config, scores, batch)
    close(ours, theirs, batch.mask)
    if our_returns is not None:  # GAE's value targets
        close(our_returns, their_returns, batch.mask)


# --- KL: ppo_core's estimators against verl's kl_penalty, values and gradients ---

@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
def test_kl_estimators_equal_verl(estimator: KLEstimator) -> None:
    verl = verl_code()
    batch = make_batch()
    name = verl_config(overrides_of(verl_overrides(PPOConfig(kl_estimator=estimator).to_dict())),
                       "algorithm").kl_penalty
    for reference in (batch.ref_logprobs, batch.old_logprobs):
        ours = kl_per_token(batch.logprobs, reference, estimator)
        theirs = verl.kl_penalty(batch.logprobs, reference, name)
        close(ours, theirs, batch.mask)
        _, our_grad = grad_of(lambda lp, r=reference: (kl_per_token(lp, r, estimator) * batch.mask).sum(),
                              batch.logprobs)
        _, their_grad = grad_of(lambda lp, r=reference: (verl.kl_penalty(lp, r, name) * batch.mask).sum(),
                                batch.logprobs)
        close(our_grad, their_grad)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
def test_kl_in_the_reward_equals_verl_apply_kl_penalty(estimator: KLEstimator) -> None:
    config = PPOConfig(kl_estimator=estimator, kl_coef=0.15)
    batch = make_batch()
    scores = torch.tensor(REWARDS["continuous"], dtype=torch.float64)
    kl = kl_per_token(batch.old_logprobs, batch.ref_logprobs, estimator)
    ours = add_scores(kl_penalty(kl, config.kl_coef, batch.mask), scores, batch.mask)
    verl = verl_code()
    algorithm = verl_config(overrides_of(verl_overrides(config.to_dict())), "algorithm")
    assert algorithm.use_kl_in_reward
    data = type("DataProto", (), {})()
    data.batch = PaddedBatch(response_mask=batch.mask, token_level_scores=last_token_scores(scores, batch.mask),
                             old_log_probs=batch.old_logprobs, ref_log_prob=batch.ref_logprobs)
    data.batch.batch_size = [batch.rows]
    data, _ = verl.apply_kl_penalty(data, verl.FixedKLController(algorithm.kl_ctrl.kl_coef), algorithm.kl_penalty)
    close(ours, data.batch["token_level_rewards"], batch.mask)


# --- one micro-batch's policy objective against verl's ppo_loss, with the actor config the export writes ---

VERL_LOSS_TYPES: list[LossType] = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]


@pytest.mark.parametrize("kl_loss_estimator", ["k1", "k2", "k3", "abs"])
@pytest.mark.parametrize("loss_type", VERL_LOSS_TYPES)
def test_one_micro_batch_policy_objective_equals_verl_ppo_loss(loss_type: LossType,
                                                               kl_loss_estimator: KLEstimator) -> None:
    # Asymmetric clipping, an entropy bonus and a KL loss term (GRPO's placement), the response length longer than the
    # batch's width so that Dr. GRPO's constant divisor (verl's loss_scale_factor) is not the width.
    config = PPOConfig(advantage_estimator="grpo", cliprange=0.2, cliprange_high=0.28, entropy_coef=0.01, beta=0.05,
                       kl_loss_estimator=kl_loss_estimator, loss_type=loss_type, response_length=WIDTH + 3)
    batch = make_batch()
    ours, our_grad = grad_of(lambda lp: ppo_core_share(config, batch, lp), batch.logprobs)
    theirs, their_grad = grad_of(lambda lp: verl_actor_loss(config, batch, lp), batch.logprobs)
    close(ours, theirs)
    close(our_grad, their_grad)


@pytest.mark.parametrize("loss_type", VERL_LOSS_TYPES)
def test_gspo_equals_verl_gspo_loss_mode_with_one_advantage_a_response(loss_type: LossType) -> None:
    # importance_sampling_level sequence exports as verl's gspo loss mode: its token ratios carry the response's mean
    # ratio in value and each token's own gradient, which sum to GSPO's where a response has one advantage.
    config = PPOConfig(advantage_estimator="grpo", importance_sampling_level="sequence", cliprange=0.2,
                       cliprange_high=0.28, entropy_coef=0.01, beta=0.05, loss_type=loss_type,
                       response_length=WIDTH + 3)
    assert not [line for line in differences("verl", config.to_dict()) if line.startswith("importance")]
    batch = make_batch()
    per_response = torch.tensor(SEQUENCE_ADVANTAGES, dtype=torch.float64)[:, None].expand_as(batch.mask)
    batch = dataclasses.replace(batch, advantages=torch.where(batch.mask.bool(), per_response, batch.advantages))
    ours, our_grad = grad_of(lambda lp: ppo_core_share(config, batch, lp), batch.logprobs)
    theirs, their_grad = grad_of(lambda lp: verl_actor_loss(config, batch, lp), batch.logprobs)
    close(ours, theirs)
    close(our_grad, their_grad)


# --- GAE's value loss against verl's compute_value_loss (its critic's token-mean) ---

def test_value_loss_equals_verl() -> None:
    config = PPOConfig(cliprange_value=0.3)
    batch = make_batch()
    critic = verl_config(overrides_of(verl_overrides(config.to_dict())), "critic")
    assert critic.cliprange_value == 0.3
    ours, our_grad = grad_of(lambda v: clipped_value_loss(v, batch.values, batch.returns, batch.mask,
                                                          config.cliprange_value)[0], batch.new_values)
    theirs, their_grad = grad_of(lambda v: verl_code().compute_value_loss(
        v, batch.returns, batch.values, batch.mask, critic.cliprange_value, "token-mean")[0], batch.new_values)
    close(ours, theirs)
    close(our_grad, their_grad)


# --- TRL 1.16's GRPOTrainer and RLOOTrainer losses, all of a module's cases in one subprocess ---

def trl_case_matches(case: TrlCase, result: dict[str, Any]) -> tuple[float, float]:
    """ppo_core's share of the case's micro-batch against TRL's loss, values and gradients; the largest gaps."""
    config = case.ppo_config()
    ours, our_grad = grad_of(lambda lp: ppo_core_share(config, case.batch, lp, case.step), case.batch.logprobs)
    return close(ours, result["loss"]), close(our_grad, result["grad"])


ONE_STEP = dict(advantage_estimator="grpo", num_generations=GROUP, per_device_train_batch_size=len(LENGTHS),
                response_length=WIDTH + 3, cliprange=0.2, cliprange_high=0.28, use_cpu=True)
TRL_CASES: dict[str, TrlCase] = {
    # One micro-batch is the step: token_mean (TRL's bnpo here, with TRL's entropy bonus, a token mean), grpo,
    # dr_grpo.
    "token_mean": TrlCase("grpo", dict(ONE_STEP, loss_type="token_mean", beta=0.0, entropy_coef=0.01),
                          with_sequence_advantages(make_batch())),
    "grpo": TrlCase("grpo", dict(ONE_STEP, loss_type="seq_mean_token_mean", beta=0.0),
                    with_sequence_advantages(make_batch())),
    "dr_grpo": TrlCase("grpo", dict(ONE_STEP, loss_type="seq_mean_token_sum_norm", beta=0.0),
                       with_sequence_advantages(make_batch())),
    # GSPO: the ratio of the response's mean token log-ratio (TRL's importance_sampling_level "sequence").
    "sequence grpo": TrlCase("grpo", dict(ONE_STEP, loss_type="seq_mean_token_mean", beta=0.0,
                                          importance_sampling_level="sequence"),
                             with_sequence_advantages(make_batch())),
    "sequence token_mean, KL": TrlCase("grpo", dict(ONE_STEP, loss_type="token_mean", beta=0.04,
                                                    importance_sampling_level="sequence"),
                                       with_sequence_advantages(make_batch())),
}


@pytest.fixture(scope="module")
def trl_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return run_trl_cases(TRL_CASES, tmp_path_factory.mktemp("trl_losses"))


@pytest.mark.parametrize("name", sorted(TRL_CASES))
def test_one_micro_batch_equals_trl_grpo(name: str, trl_results: dict[str, dict[str, Any]]) -> None:
    trl_case_matches(TRL_CASES[name], trl_results[name])


def test_trl_ran_with_the_exported_settings(trl_results: dict[str, dict[str, Any]]) -> None:
    for name, case in TRL_CASES.items():
        parsed = trl_results[name]["args"]
        exported = flags_of(grpo_arguments(case.ppo_config().to_dict()))
        assert parsed["loss_type"] == exported["loss_type"], name
        assert (parsed["epsilon"], parsed["epsilon_high"]) == (0.2, 0.28), name
        assert parsed["max_completion_length"] == WIDTH + 3, name
        assert parsed["importance_sampling_level"] == case.ppo_config().importance_sampling_level, name
    assert trl_results["token_mean"]["args"]["entropy_coef"] == 0.01
