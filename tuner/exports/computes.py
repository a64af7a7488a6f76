"""What a target trainer computes differently from ppo-tune on one config: the math, not the bookkeeping.

An export is exact when its target, given the exported settings, computes the same advantages, losses and gradients
as the trial did (the peer-equivalence tests run each target's own code to check that). Where a target cannot be set
to do so (a constant it does not expose, a variant it lacks), each difference is one line here, with its size on
the config where that can be told: ``ppo-tune best`` prints them on stderr and the exported file carries them as
comments. Each function answers for one setting, None where the export is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ppo_core.config.ppo_config import PPOConfig
from tuner.exports._common import rollout_batch

Difference = Callable[[PPOConfig], str | None]


class EdgeLine(str):
    """A difference only at extremes (a clamp a healthy run never reaches) or of a size below any tuning signal:
    the export says it; a study that names the target does not refuse it."""


@dataclass(frozen=True)
class Edge:
    """A check whose difference is an :class:`EdgeLine`."""

    check: Difference

    def __call__(self, c: PPOConfig) -> str | None:
        line = self.check(c)
        return None if line is None else EdgeLine(line)

GROUP_STD_SCALED = ("grpo",)


def micro_batches_per_step(c: PPOConfig) -> int:
    """Micro-batches (of per_device_train_batch_size) accumulated into one optimizer step, on one process."""
    return max(1, c.gradient_accumulation_steps // c.num_mini_batches)


def fixed_scale_rewards_epsilon(trainer: str, theirs: float) -> Difference:
    """A target whose GRPO adds a fixed ``theirs`` to the group's standard deviation, where ppo-tune adds the
    config's ``scale_rewards_epsilon`` (verl's ``epsilon``)."""
    def differs(c: PPOConfig) -> str | None:
        if c.advantage_estimator != "grpo" or c.scale_rewards == "none" or c.scale_rewards_epsilon == theirs:
            return None
        return (f"scale_rewards_epsilon={c.scale_rewards_epsilon!r}: {trainer} adds {theirs!r} to the group's std, "
                f"not settable: its advantages are (s + {c.scale_rewards_epsilon!r}) / (s + {theirs!r}) times "
                f"ppo-tune's for a group std s (under 1% where s > {100 * abs(c.scale_rewards_epsilon - theirs):.2g}); "
                f"tune with scale_rewards_epsilon: {theirs!r} to match")
    return differs


def no_dual_clip(trainer: str) -> Difference:
    def differs(c: PPOConfig) -> str | None:
        if c.dual_clip is None:
            return None
        return (f"dual_clip={c.dual_clip!r}: {trainer} has no dual clip, so a token with A < 0 and a ratio above "
                f"{c.dual_clip!r} keeps pushing (loss -A r instead of at most -A x {c.dual_clip!r})")
    return differs


def entropy_per_micro_batch(trainer: str) -> Difference:
    """A target whose entropy bonus is each micro-batch's token mean, whatever its loss aggregation."""
    def differs(c: PPOConfig) -> str | None:
        if c.entropy_coef == 0 or c.loss_type == "bnpo" or (c.loss_type == "token_mean"
                                                             and micro_batches_per_step(c) == 1):
            return None
        return (f"entropy_coef={c.entropy_coef!r}: {trainer} averages the entropy bonus over each micro-batch's "
                f"tokens; ppo-tune aggregated it as the loss ({c.loss_type}): the bonus weighs long responses "
                "differently")
    return differs


def kl_loss_estimator_only(trainer: str, estimators: tuple[str, ...]) -> Difference:
    def differs(c: PPOConfig) -> str | None:
        if c.kl_penalty_in_reward or c.beta == 0 or c.kl_loss_estimator in estimators:
            return None
        return (f"kl_loss_estimator={c.kl_loss_estimator}: {trainer}'s KL loss term is "
                f"{' or '.join(estimators)}, a different penalty at beta={c.beta!r}")
    return differs


def clamped_kl(trainer: str, estimators: tuple[str, ...]) -> Difference:
    """A target that clamps its per-token KL estimate at 10 (verl's low_var_kl; OpenRLHF's every estimator)."""
    def differs(c: PPOConfig) -> str | None:
        in_use = c.kl_estimator if c.kl_penalty_in_reward else c.kl_loss_estimator
        if in_use not in estimators or c.kl_coefficient == 0:
            return None
        return (f"{in_use} KL: {trainer} clamps the per-token estimate at 10 (for k3, a token log-ratio to the "
                "reference beyond about +2.6 or -11): the same KL below that, a capped penalty without gradient "
                "above")
    return differs


def biased_whitening(trainer: str, estimators: tuple[str, ...]) -> Difference:
    """A target that whitens advantages with the variance over n rather than n - 1."""
    def differs(c: PPOConfig) -> str | None:
        if c.advantage_estimator not in estimators:
            return None
        batch = rollout_batch(c)
        return (f"advantage_estimator={c.advantage_estimator}: {trainer} whitens with the variance over the n tokens "
                f"(not n - 1), so its advantages are sqrt(n / (n - 1)) times ppo-tune's: less than "
                f"{100 * (((batch / (batch - 1)) ** 0.5) - 1) if batch > 1 else 0.0:.2g}% larger, n being at least "
                f"the rollout batch's {batch} responses")
    return differs


def whitening_kl_in_reward_returns(trainer: str) -> Difference:
    """verl's reinforce_plus_plus_baseline: the group mean of the summed token rewards, one number on every token."""
    def differs(c: PPOConfig) -> str | None:
        if c.advantage_estimator != "reinforce_pp_baseline":
            return None
        reasons = [f"gamma={c.gamma!r}"] if c.gamma != 1.0 else []
        if c.kl_penalty_in_reward and c.kl_coef != 0:
            reasons.append(f"the KL in the reward (kl_coef={c.kl_coef!r})")
        if not reasons:
            return None
        return (f"advantage_estimator=reinforce_pp_baseline with {' and '.join(reasons)}: {trainer} centres each "
                "response's summed reward on its group and puts that one number on every token, undiscounted; "
                "ppo-tune centred the score, then took each token's discounted return of score and KL")
    return differs


def collect(c: PPOConfig, checks: list[Difference]) -> list[str]:
    """The differences that apply to ``c``, in the checks' order."""
    return [line for check in checks if (line := check(c)) is not None]
