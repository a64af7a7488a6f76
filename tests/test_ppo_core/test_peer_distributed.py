"""Two processes (torch.distributed over gloo, torch.multiprocessing.spawn, world size 2) against the peers' own code
on the whole batch: ppo_core's batch-wide statistics take a ``total`` that sums over the processes, so the GRPO
batch std and the whitening of two processes are one process's on the whole batch, which is what verl computes on
its driver; each process's share of the token-mean (and seq-mean) loss is verl's and OpenRLHF's share at dp_size 2,
values and gradients.

Each rank holds one group of four responses (rows 0-3 and 4-7 of the peer tests' batch, helpers.peer_comparison's).
"""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing
from helpers.exports import settings_of
from helpers.peer_code import openrlhf_actor_loss, openrlhf_args
from helpers.peer_comparison import (
    GROUP,
    LENGTHS,
    REWARDS,
    WIDTH,
    close,
    grad_of,
    make_batch,
    ppo_core_advantages,
    ppo_core_share,
    verl_actor_loss,
    verl_advantages,
)

from ppo_core.algorithm.advantages import kl_penalty
from ppo_core.algorithm.estimators import AdvantageInputs, estimate_advantages
from ppo_core.algorithm.kl import kl_per_token
from ppo_core.algorithm.losses import StepTotals
from ppo_core.config.ppo_config import LossType, PPOConfig
from tuner.exports import openrlhf_arguments

WORLD = 2
ROWS = len(LENGTHS) // WORLD
ESTIMATORS: dict[str, dict[str, Any]] = {
    "grpo batch": dict(advantage_estimator="grpo", scale_rewards="batch"),
    "gae": dict(advantage_estimator="gae", gamma=0.95, lam=0.9, kl_coef=0.1),
    "reinforce_pp": dict(advantage_estimator="reinforce_pp", kl_coef=0.1),
    "reinforce_pp_baseline": dict(advantage_estimator="reinforce_pp_baseline", kl_coef=0.0),
}
LOSS_RUN: dict[str, Any] = dict(advantage_estimator="grpo", num_generations=GROUP, per_device_train_batch_size=ROWS,
                                response_length=WIDTH + 3, cliprange=0.2, cliprange_high=0.28, beta=0.05,
                                entropy_coef=0.01)
LOSS_TYPES: tuple[LossType, ...] = ("token_mean", "seq_mean_token_mean")


def estimator_config(name: str) -> PPOConfig:
    return PPOConfig(**ESTIMATORS[name], num_generations=GROUP, per_device_train_batch_size=len(LENGTHS),
                     response_length=WIDTH)


def all_ranks(value: torch.Tensor) -> torch.Tensor:
    """The ``total`` of a data-parallel run: the sum over every process."""
    value = value.clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def _rank(rank: int, init_file: str, out_dir: str) -> None:
    """One process: its rows' advantages under every estimator, and its share of each loss with its gradient."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        batch = make_batch().slice(slice(rank * ROWS, (rank + 1) * ROWS))
        results: dict[str, Any] = {}
        for rewards, values in REWARDS.items():
            scores = torch.tensor(values, dtype=torch.float64)[rank * ROWS:(rank + 1) * ROWS]
            for name in ESTIMATORS:
                config = estimator_config(name)
                kl = kl_per_token(batch.old_logprobs, batch.ref_logprobs, config.kl_estimator)
                advantages, _ = estimate_advantages(config.advantage_estimator, AdvantageInputs(
                    scores=scores, kl_rewards=kl_penalty(kl, config.kl_coef if config.kl_penalty_in_reward else 0.0,
                                                         batch.mask),
                    values=batch.values, response_mask=batch.mask, group_size=GROUP, gamma=config.gamma,
                    lam=config.lam, whiten_advantages=config.whiten_advantages, whiten_rewards=config.whiten_rewards,
                    scale_rewards=config.scale_rewards, scale_rewards_epsilon=config.scale_rewards_epsilon,
                    total=all_ranks))
                results[f"{name} {rewards}"] = advantages
        step = StepTotals(tokens=float(all_ranks(batch.mask.sum())), rows=float(all_ranks(
            torch.tensor(float(batch.rows), dtype=torch.float64))), micro_batches=1, processes=WORLD)
        for loss_type in LOSS_TYPES:
            config = PPOConfig(**LOSS_RUN, loss_type=loss_type)
            results[loss_type] = grad_of(lambda lp, c=config: ppo_core_share(c, batch, lp, step), batch.logprobs)
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("two_processes")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.multiprocessing.spawn(_rank, args=(str(directory / "init"), str(directory)), nprocs=WORLD, join=True)
    return [torch.load(directory / f"rank{rank}.pt") for rank in range(WORLD)]


@pytest.mark.parametrize("rewards", sorted(REWARDS))
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_two_processes_advantages_are_one_process_on_the_whole_batch(
        name: str, rewards: str, two_processes: list[dict[str, Any]]) -> None:
    config = estimator_config(name)
    batch = make_batch()
    scores = torch.tensor(REWARDS[rewards], dtype=torch.float64)
    ours = torch.cat([results[f"{name} {rewards}"] for results in two_processes])
    close(ours, ppo_core_advantages(config, scores, batch)[0], batch.mask)
    if name != "grpo batch":  # verl's grpo has no batch std (the verl export says so)
        close(ours, verl_advantages(config, scores, batch)[0], batch.mask)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_two_processes_loss_shares_equal_verl_and_openrlhf_at_dp_size_2(
        loss_type: LossType, two_processes: list[dict[str, Any]]) -> None:
    config = PPOConfig(**LOSS_RUN, loss_type=loss_type)
    batch = make_batch()
    args = openrlhf_args(settings_of(openrlhf_arguments(config.to_dict())))
    info = {"dp_size": WORLD, "batch_num_tokens": float(batch.mask.sum()), "global_batch_size": float(batch.rows)}
    for rank, results in enumerate(two_processes):
        part = batch.slice(slice(rank * ROWS, (rank + 1) * ROWS))
        ours, our_grad = results[loss_type]
        verl, verl_grad = grad_of(lambda lp, p=part: verl_actor_loss(config, p, lp, **info), part.logprobs)
        close(ours, verl)
        close(our_grad, verl_grad)
        if loss_type == "token_mean":  # OpenRLHF aggregates its KL and entropy terms by token (test_peer_openrlhf)
            experience = _experience(part)
            theirs, their_grad = grad_of(lambda lp, p=part, e=experience: openrlhf_actor_loss(
                args, lp, p.entropy, e, args.algo.kl.init_coef, info), part.logprobs)
            close(ours, theirs)
            close(our_grad, their_grad)
    # DDP averages the processes' gradients: the step's loss is the mean of their shares, one process's on the
    # whole batch.
    whole = ppo_core_share(config, batch, batch.logprobs)
    close(sum(results[loss_type][0] for results in two_processes) / WORLD, whole)


def _experience(part: Any) -> Any:
    return types.SimpleNamespace(sequences=None, attention_mask=None, action_mask=part.mask,
                                 action_log_probs=part.old_logprobs, advantages=part.advantages,
                                 base_action_log_probs=part.ref_logprobs, rollout_log_probs=None, info={})
