"""TRL's logged metrics under the names ppo-tune's pages, guard and objectives read.

TRL's GRPOTrainer and RLOOTrainer log the means of one logging window (here one PPO update: the optimizer steps of
one generation). Each value is kept under ``trl/<TRL's name>`` as logged, and the ones ppo-tune reads are copied
under its names; nothing is invented for a metric TRL did not log.
"""

from __future__ import annotations

from collections.abc import Mapping

from ppo_core.metric_names import FRAC_REWARD_ZERO_STD, REWARD_STD

TRL_PREFIX = "trl/"
# TRL's name -> ppo-tune's, where the two mean the same quantity in the same units.
SAME_QUANTITY = {
    "reward": "objective/scores",
    "reward_std": REWARD_STD,
    "frac_reward_zero_std": FRAC_REWARD_ZERO_STD,
    "entropy": "policy/entropy_avg",  # both the mean over response tokens
    "completions/mean_length": "objective/response_length",
    "clip_ratio/low_mean": "clip_ratio/low",
    "clip_ratio/high_mean": "clip_ratio/high",
    "clip_ratio/region_mean": "policy/clipfrac_avg",
    "policy_loss": "loss/policy_avg",
    "learning_rate": "lr",
}
KL_PER_TOKEN = "kl"
MEAN_LENGTH = "completions/mean_length"


def response_kl(kl_per_token: float, mean_length: float) -> float:
    """KL summed over a response, averaged over responses, from TRL's token mean: k̄ L̄ = (sum_it k_it / sum_i L_i)
    (sum_i L_i / n) = (1/n) sum_i sum_t k_it, exact when both means are over the same responses."""
    return kl_per_token * mean_length


def ppo_tune_metrics(logs: Mapping[str, float | None], update: int, episode: int, beta: float) -> dict[str, float]:
    """One update's metrics from TRL's logs: every numeric log as ``trl/<name>``, ppo-tune's names for the same
    quantities, ``objective/kl`` (per response) where TRL measured KL (beta > 0), and the update counters."""
    numeric = {name: float(value) for name, value in logs.items()
               if isinstance(value, int | float) and not isinstance(value, bool)}
    metrics = {f"{TRL_PREFIX}{name}": value for name, value in numeric.items()}
    metrics.update({ours: numeric[theirs] for theirs, ours in SAME_QUANTITY.items() if theirs in numeric})
    if KL_PER_TOKEN in numeric and MEAN_LENGTH in numeric:
        metrics["objective/kl"] = response_kl(numeric[KL_PER_TOKEN], numeric[MEAN_LENGTH])
    metrics["objective/kl_coef"] = beta
    metrics["update"], metrics["episode"] = float(update), float(episode)
    return metrics
