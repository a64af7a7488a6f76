"""The metrics a run will report, known from its config before anything loads: what a study may name as its
objective. Cheap to call (no torch, no models): the tuner checks a study's objectives with it before any trial.

Example::

    config = PPOConfig(task="shortest_path", eval_steps=10)
    assert "eval/gold_score" in reported_metrics(config)
"""

from __future__ import annotations

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.metric_names import (
    CRITIC_METRICS,
    EVAL_GOLD_SCORE,
    EVAL_JUDGE_SCORE,
    EVAL_JUDGE_WIN_RATE,
    EVAL_METRICS,
    GOLD_JUDGE,
    GOLD_SCORE,
    GROUP_METRICS,
    HACKING_SIGNALS,
    KL_LOSS,
    UPDATE_METRICS,
    distinct_names,
    judge_metric,
    reward_metric,
    reward_name,
)
from ppo_core.models.paths import is_function_spec


def reported_metrics(config: PPOConfig) -> frozenset[str]:
    """Every metric name that some update of ``config``'s run reports (the union over its updates)."""
    names = set(UPDATE_METRICS) | evaluation_metrics(config)
    if config.uses_critic:
        names.update(CRITIC_METRICS)
    if config.generations_per_prompt > 1:
        names.update(GROUP_METRICS)
    if not config.kl_penalty_in_reward:
        names.add(KL_LOSS)
    if has_gold_score(config):
        names.add(GOLD_SCORE)
    rewards = reward_names(config)
    if len(rewards) > 1:  # with one reward, objective/scores already says it
        names.update(reward_metric(name) for name in rewards)
    return frozenset(names)


def evaluation_metrics(config: PPOConfig) -> frozenset[str]:
    """The metrics only evaluation updates report (every ``eval_steps`` updates and the last); none without
    ``eval_steps``."""
    if config.eval_steps is None:
        return frozenset()
    names = {*EVAL_METRICS, *HACKING_SIGNALS}
    if has_gold_score(config):
        names.add(EVAL_GOLD_SCORE)
    judges = judge_names(config)
    if judges:
        names.add(EVAL_JUDGE_SCORE)
    if len(judges) > 1:
        names.update(judge_metric(name) for name in judges)
    if config.pairwise_judge is not None:
        names.add(EVAL_JUDGE_WIN_RATE)
    return frozenset(names)


def judge_names(config: PPOConfig) -> list[str]:
    """The name of each pointwise judge of a run of ``config``, as its metrics name them: the named judges, or a
    built-in task's gold."""
    if config.named_judges:
        return distinct_names([reward_name(spec, is_function_spec(spec)) for _, spec in config.named_judges])
    return [GOLD_JUDGE] if has_gold_score(config) else []


def has_gold_score(config: PPOConfig) -> bool:
    """Whether the run has a gold scorer: a built-in task always brings one, and nothing else does."""
    return config.task is not None


def reward_names(config: PPOConfig) -> list[str]:
    """The name of each reward the config names, in scoring order, as the run's rewards are named; empty when the
    run uses the task's own reward model alone."""
    return distinct_names([reward_name(spec, is_function_spec(spec)) for spec in config.reward_specs])
