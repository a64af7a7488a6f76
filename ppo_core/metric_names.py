"""Names of per-update metrics that more than one part reads, importable without torch (the dashboard does)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

# Reported on every update by every run, and checked for NaN and infinity after each one: the root causes of
# a divergence (the score, KL and the two losses), in the order a diagnosis should name them.
GUARDED_METRICS = ("objective/scores", "objective/kl", "loss/policy_avg", "loss/value_avg")

# Every metric every update of every run reports: the rollout's (ppo_core.run.rollout_metrics.rollout_metrics), the
# update's diagnostics (ppo_core.algorithm.update), and the trainer's own counters, schedule and measurements of the
# machine.
UPDATE_METRICS = (
    "update", "episode",
    "objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
    "objective/scores", "objective/scores_std", "objective/response_length", "objective/kl_coef",
    "objective/kl_in_reward",
    "val/num_eos_tokens", "val/ratio", "val/ratio_var",
    "policy/approxkl_avg", "policy/clipfrac_avg", "clip_ratio/low", "clip_ratio/high", "policy/entropy_avg",
    "loss/policy_avg",
    "lr",
    "time/rollout_s", "time/update_s", "time/tokens_per_s", "precision/sampling_bf16", "precision/autocast_bf16",
    "precision/sampling_fused", "memory/peak_gib",
)
# Reported on every update by runs with a value network (advantage_estimator gae) only.
CRITIC_METRICS = ("val/mean_value", "val/explained_variance", "val/clipfrac_avg", "loss/value_avg", "lr_value")
# Reported on every update when each prompt has several responses (num_generations > 1): the mean over groups of the
# scores' standard deviation, and the share of groups whose scores are all equal (no signal for a group baseline).
REWARD_STD = "objective/reward_std"
FRAC_REWARD_ZERO_STD = "objective/frac_reward_zero_std"
GROUP_METRICS = (REWARD_STD, FRAC_REWARD_ZERO_STD)
# Reported on every update when KL is a loss term (kl_in_reward false): the term's mean KL, before beta.
KL_LOSS = "loss/kl_avg"
# Reported on every update when the run has a gold scorer (a built-in task).
GOLD_SCORE = "objective/gold_score"

# The held-out evaluation's metrics, reported on evaluation updates only (ppo_core.run.evaluation).
EVAL_PREFIX = "eval/"
EVAL_SCORE = "eval/score"
EVAL_GOLD_SCORE = "eval/gold_score"  # with a gold scorer only
EVAL_KL = "eval/kl"
EVAL_RESPONSE_LENGTH = "eval/response_length"
EVAL_SECONDS = "time/eval_s"
EVAL_METRICS = (EVAL_SCORE, EVAL_KL, EVAL_RESPONSE_LENGTH, EVAL_SECONDS)

# The held-out judges' metrics (ppo_core.judges), reported on evaluation updates of a run that has a judge: a built-in
# task's gold is its judge unless the config names others. Judges score held-out answers only, never a training
# rollout. ``eval/judge_score`` is the judges' weighted sum, what a study tunes where it trusts the judge; each judge's
# own mean is ``eval/judge/<name>`` when there are several; ``eval/judge_win_rate`` is a pairwise judge's share of
# held-out prompts on which it prefers the policy's answer to the reference policy's.
EVAL_JUDGE_SCORE = "eval/judge_score"
GOLD_JUDGE = "gold"  # a built-in task's gold, as a judge
EVAL_JUDGE_WIN_RATE = "eval/judge_win_rate"
HELD_OUT_JUDGE_METRICS = (EVAL_JUDGE_SCORE, EVAL_JUDGE_WIN_RATE, EVAL_GOLD_SCORE)
"""Metrics that are a held-out judge's verdict, in the order a reader that needs one takes the first recorded:
``eval/gold_score`` last, the name studies recorded before the judge channel existed."""

# Signals of reward hacking that need no judge (ppo_core.run.hacking_signals), reported on every evaluation update:
# what a policy that games its reward tends to do to its held-out answers.
EVAL_DISTINCT_2 = "eval/distinct_2grams"  # distinct word pairs / all word pairs, pooled over the answers
EVAL_REPEATED_3 = "eval/repeated_3grams"  # share of an answer's word triples that repeat one earlier in it
EVAL_AT_LIMIT = "eval/at_length_limit"  # share of answers that ran to response_length without a stop
EVAL_ENTROPY = "eval/entropy"  # mean per-token -log pi of the sampled answers: a sample estimate of entropy
HACKING_SIGNALS = (EVAL_DISTINCT_2, EVAL_REPEATED_3, EVAL_AT_LIMIT, EVAL_ENTROPY)


def judge_metric(name: str) -> str:
    """The metric of one judge's own mean held-out score, reported when a run has several judges."""
    return f"eval/judge/{name}"

# Groups that measure the machine rather than the run: two identical runs (same seed, same config) differ in them.
MACHINE_METRIC_GROUPS = ("time/", "memory/")


def run_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` without the machine's measurements: what a seeded run must reproduce exactly."""
    return {name: value for name, value in metrics.items() if not name.startswith(MACHINE_METRIC_GROUPS)}


def reward_metric(name: str) -> str:
    """The metric of one reward's own mean score, reported when a run sums several rewards."""
    return f"rewards/{name}"


def reward_name(spec: str, is_function: bool) -> str:
    """A reward's name: the function's for ``module:function``, else the model directory's (or the hub name's)
    last part."""
    if is_function:
        return spec.partition(":")[2]
    return PurePath(spec).name or spec


def distinct_names(names: Sequence[str]) -> list[str]:
    """``names`` with the k-th repeat of a name (k >= 2) renamed ``name_k``: two rewards of one name would
    otherwise share one metric."""
    seen: dict[str, int] = {}
    distinct = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        distinct.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return distinct
