"""ppo_core and its peers on one batch, for the peer tests (test_peer_equivalence, test_peer_rows, test_peer_openrlhf,
test_peer_distributed): the batch (8 right-padded float64 responses, garbage in the padding), the comparison of values
and gradients to 1e-6, and each side's computation of the advantages and of one micro-batch's loss: ppo_core's as its
trainer computes them, verl's through its own code (helpers.peer_code) with the settings the verl export writes, and
TRL 1.16's GRPOTrainer and RLOOTrainer losses through run_trl_losses, with the flags the trl-grpo and trl-rloo exports
write.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from helpers.exports import overrides_of, settings_of
from helpers.peer_code import PaddedBatch, run_trl_losses, verl_code, verl_config
from ppo_core.algorithm.advantages import kl_penalty
from ppo_core.algorithm.estimators import AdvantageInputs, estimate_advantages
from ppo_core.algorithm.kl import kl_per_token
from ppo_core.algorithm.losses import StepTotals
from ppo_core.algorithm.objective import policy_objective
from ppo_core.config.ppo_config import PPOConfig
from tuner.exports import grpo_arguments, rloo_arguments, verl_overrides

ATOL = 1e-6
WIDTH = 7
LENGTHS = (1, 7, 3, 5, 2, 6, 4, 7)
GROUP = 4  # two prompts of four responses
# Per-token log-ratios log pi - log pi_old, cycled over the tokens: ratios 0.41 and 0.78 (below 1 - 0.2), 1.25
# (between 1 + 0.2 and 1 + 0.28), 1.35, 1.82 and 2.72 (beyond 1 + 0.28), all below verl's default dual clip of 3
# (row 3's own test goes beyond it).
LOG_RATIOS = (-0.9, -0.25, 0.0, 0.12, 0.22, 0.3, 0.6, 1.0, -0.1)
SEQUENCE_ADVANTAGES = (1.3, -0.7, 0.4, -1.1, 0.9, -0.2, 0.6, -1.5)
REWARDS = {
    "equal": (0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0),
    "tiny spread": (0.0, 0.0, 0.0, 2e-4, 0.0, 0.0, 0.0, 2e-4),
    "binary": (1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0),
    "continuous": (0.31, -1.2, 0.87, 2.4, -0.05, 0.66, 1.9, -0.73),
}


@dataclass(frozen=True)
class Batch:
    mask: torch.Tensor  # [B, T] float64, 1 on the response's tokens
    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    entropy: torch.Tensor
    advantages: torch.Tensor  # per token
    values: torch.Tensor  # V_old
    new_values: torch.Tensor
    returns: torch.Tensor

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    def slice(self, rows: slice) -> Batch:
        return Batch(*(getattr(self, name)[rows] for name in self.__dataclass_fields__))


def make_batch(lengths: tuple[int, ...] = LENGTHS, seed: int = 0) -> Batch:
    generator = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    mask = (torch.arange(WIDTH)[None, :] < torch.tensor(lengths)[:, None]).to(torch.float64)

    def uniform(low: float, high: float) -> torch.Tensor:
        return low + (high - low) * torch.rand(rows, WIDTH, generator=generator, dtype=torch.float64)

    def padded(valid: torch.Tensor) -> torch.Tensor:
        return torch.where(mask.bool(), valid, uniform(-9.0, 9.0))  # garbage past each response

    positions = 3 * torch.arange(rows)[:, None] + torch.arange(WIDTH)[None, :]
    log_ratio = torch.tensor(LOG_RATIOS, dtype=torch.float64)[positions % len(LOG_RATIOS)]
    logprobs = uniform(-3.0, -0.1)
    advantages = torch.tensor(SEQUENCE_ADVANTAGES, dtype=torch.float64)[:, None] + uniform(-0.3, 0.3)
    values = uniform(-1.0, 1.0)
    return Batch(mask=mask, logprobs=padded(logprobs), old_logprobs=padded(logprobs - log_ratio),
                 ref_logprobs=padded(logprobs + uniform(-0.8, 0.8)), entropy=padded(uniform(0.2, 2.5)),
                 advantages=padded(advantages), values=padded(values), new_values=padded(values + uniform(-0.5, 0.5)),
                 returns=padded(uniform(-1.5, 1.5)))


def close(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """The largest |ours - theirs| (over ``mask``'s tokens where given); asserted within ATOL."""
    difference = (ours.detach() - theirs.detach()).abs()
    if mask is not None:
        difference = torch.where(mask.bool(), difference, torch.zeros_like(difference))
    largest = float(difference.max())
    assert largest <= ATOL, f"max |ppo_core - peer| = {largest:.3g}\nppo_core {ours}\npeer {theirs}"
    return largest


def grad_of(loss_fn: Any, logprobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, d loss / d logprobs) of ``loss_fn(logprobs)``."""
    leaf = logprobs.clone().requires_grad_(True)
    loss = loss_fn(leaf)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


# --- advantages: ppo_core's estimators and verl's compute_advantage ---

def last_token_scores(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's token_level_scores: each score on its response's last token (workers/reward_manager/naive.py)."""
    levels = torch.zeros_like(mask)
    levels[torch.arange(mask.shape[0]), mask.sum(dim=1).long() - 1] = scores
    return levels


def ppo_core_advantages(config: PPOConfig, scores: torch.Tensor,
                        batch: Batch) -> tuple[torch.Tensor, torch.Tensor | None]:
    """As ppo_core's trainer computes them: KL to the reference under the rollout policy, in the reward when the
    config says so, then the config's estimator."""
    kl = kl_per_token(batch.old_logprobs, batch.ref_logprobs, config.kl_estimator)
    kl_rewards = kl_penalty(kl, config.kl_coef if config.kl_penalty_in_reward else 0.0, batch.mask)
    return estimate_advantages(config.advantage_estimator, AdvantageInputs(
        scores=scores, kl_rewards=kl_rewards, values=batch.values, response_mask=batch.mask,
        group_size=config.generations_per_prompt, gamma=config.gamma, lam=config.lam,
        whiten_advantages=config.whiten_advantages, whiten_rewards=config.whiten_rewards,
        scale_rewards=config.scale_rewards, scale_rewards_epsilon=config.scale_rewards_epsilon))


def verl_advantages(config: PPOConfig, scores: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's advantages and returns for the verl export of ``config``: ray_trainer's apply_kl_penalty where
    algorithm.use_kl_in_reward, then its compute_advantage, with the algorithm section the overrides give."""
    verl = verl_code()
    overrides = overrides_of(verl_overrides(config.to_dict()))
    algorithm = verl_config(overrides, "algorithm")
    data_batch = PaddedBatch(response_mask=batch.mask, token_level_scores=last_token_scores(scores, batch.mask),
                             old_log_probs=batch.old_logprobs, ref_log_prob=batch.ref_logprobs, values=batch.values)
    data_batch.batch_size = [batch.rows]  # type: ignore[attr-defined]
    uids = np.array([f"prompt-{row // config.generations_per_prompt}" for row in range(batch.rows)], dtype=object)
    data = type("DataProto", (), {})()
    data.batch, data.non_tensor_batch = data_batch, {"uid": uids}
    if algorithm.use_kl_in_reward:
        data, _ = verl.apply_kl_penalty(data, verl.FixedKLController(algorithm.kl_ctrl.kl_coef), algorithm.kl_penalty)
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data = verl.compute_advantage(data, adv_estimator=algorithm.adv_estimator, gamma=algorithm.gamma,
                                  lam=algorithm.lam, num_repeat=config.generations_per_prompt,
                                  norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo, config=algorithm)
    return data.batch["advantages"], data.batch["returns"]


# --- one micro-batch's loss: ppo_core's share of the step's objective and verl's ppo_loss ---

def verl_actor_loss(config: PPOConfig, batch: Batch, logprobs: torch.Tensor, **global_info: Any) -> torch.Tensor:
    """verl's ppo_loss (workers/utils/losses.py) for one micro-batch: its policy loss, entropy and KL loss terms
    with the actor section of the verl export's overrides; ``global_info`` the step's dp_size, batch_num_tokens and
    global_batch_size (none: the micro-batch is the step)."""
    actor = verl_config(overrides_of(verl_overrides(config.to_dict())), "actor_rollout_ref.actor")
    data = PaddedBatch(dp_size=global_info.get("dp_size", 1), batch_num_tokens=global_info.get("batch_num_tokens"),
                       global_batch_size=global_info.get("global_batch_size"), response_mask=batch.mask,
                       old_log_probs=batch.old_logprobs, advantages=batch.advantages,
                       ref_log_prob=batch.ref_logprobs)
    loss, _ = verl_code().ppo_loss(actor, {"log_probs": logprobs, "entropy": batch.entropy}, data)
    return loss


def ppo_core_share(config: PPOConfig, part: Batch, logprobs: torch.Tensor, step: StepTotals | None = None,
                   max_length: int | None = None) -> torch.Tensor:
    """One micro-batch's share of the step's objective, as update.py computes it (policy_objective), with the KL
    loss term's coefficient the trainer passes (beta where the KL is not in the reward)."""
    beta = None if config.kl_penalty_in_reward else config.kl_coefficient
    return policy_objective(logprobs, part.old_logprobs, part.ref_logprobs, part.advantages, part.mask,
                            part.entropy, config, beta, step, max_length or config.response_length).loss


# --- TRL 1.16's GRPOTrainer and RLOOTrainer losses, all of a module's cases in one subprocess ---

@dataclass(frozen=True)
class TrlCase:
    """A config exported to TRL (``trainer``: "grpo" or "rloo") and one micro-batch of an optimizer step:
    ``batch`` (its advantages one per response, column 0 read), ``step`` the step's totals for ppo_core's share,
    ``accumulation_steps`` TRL's current_gradient_accumulation_steps, ``generation_tokens`` its num_items_in_batch
    (dapo's normaliser; default the micro-batch's tokens), ``extra_flags`` appended to the export's."""

    trainer: str
    config: dict[str, Any]
    batch: Batch
    step: StepTotals | None = None
    accumulation_steps: int = 1
    generation_tokens: float | None = None
    extra_flags: tuple[str, ...] = ()

    def ppo_config(self) -> PPOConfig:
        return PPOConfig(**self.config)


REPORTED = ["loss_type", "beta", "epsilon", "epsilon_high", "max_completion_length", "entropy_coef",
            "use_bias_correction_kl", "importance_sampling_level"]


def with_sequence_advantages(batch: Batch) -> Batch:
    """``batch`` with one advantage per response (SEQUENCE_ADVANTAGES), as TRL's trainers take them."""
    advantages = torch.tensor(SEQUENCE_ADVANTAGES, dtype=torch.float64)[: batch.rows, None].expand(-1, WIDTH)
    return Batch(**{**batch.__dict__, "advantages": advantages})


def trl_payload(case: TrlCase, directory: Path) -> dict[str, Any]:
    """The case as run_trl_losses takes it: the export's flags and what _compute_loss reads of the micro-batch
    (grpo_trainer.py / rloo_trainer.py's _generate_and_score_completions output)."""
    part = case.batch
    export = grpo_arguments if case.trainer == "grpo" else rloo_arguments
    text = export(PPOConfig(**case.config, output_dir=str(directory)).to_dict())
    inputs: dict[str, Any] = {
        "prompt_ids": torch.zeros(part.rows, 2, dtype=torch.long), "prompt_mask": torch.ones(part.rows, 2),
        "completion_ids": torch.zeros(part.rows, WIDTH, dtype=torch.long), "completion_mask": part.mask,
        "advantages": part.advantages[:, 0].clone(), "ref_per_token_logps": part.ref_logprobs,
        "num_items_in_batch": torch.tensor(case.generation_tokens or float(part.mask.sum()), dtype=torch.float64),
    }
    if case.trainer == "grpo":
        inputs["old_per_token_logps"] = part.old_logprobs
    else:
        inputs["old_logps"] = (part.old_logprobs * part.mask).sum(dim=1)
    return {"trainer": case.trainer, "flags": [*settings_of(text), "--output_dir", str(directory), *case.extra_flags],
            "logps": part.logprobs, "entropies": part.entropy, "inputs": inputs,
            "accumulation_steps": case.accumulation_steps, "report": REPORTED}


def run_trl_cases(cases: dict[str, TrlCase], directory: Path) -> dict[str, dict[str, Any]]:
    return dict(zip(cases, run_trl_losses([trl_payload(case, directory) for case in cases.values()], directory),
                    strict=True))
