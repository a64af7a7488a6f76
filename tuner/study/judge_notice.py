"""What a study tunes when no held-out judge scores its objective, and what tuning that way was measured to cost.

A study that maximises its own reward on held-out prompts (``eval/score``, the proxy) climbs whatever the reward
overrates. Where a held-out judge exists (a built-in task's gold, or the judges a run names: ``ppo_core.rewards
.judges``) a study should tune it; where none does, ``ppo-tune run`` and the Study page say what the study is tuning,
and what choosing the winner by the proxy cost on the built-in tasks, where gold could tell
(``benchmarks/results/proxy_regret/``).

Example::

    line = no_judge_notice(spec)
    if line is not None:
        console.print(line)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ppo_core.config.ppo_config import ConfigError
from ppo_core.metric_names import GOLD_SCORE, HELD_OUT_JUDGE_METRICS
from tuner.study.spec import Objective

PROXY_COST = ("On the built-in tasks, choosing the winner by the proxy within the KL budget cost 0.008 [-0.016, "
              "0.020] held-out gold on the text task (no cost shown) and 0.147 [0.092, 0.176] on the graph task, more "
              "than the 0.090 [0.075, 0.107] that gold's own choice gains over a random configuration there "
              "(benchmarks/results/proxy_regret/README.md).")
"""What choosing by the proxy cost on the built-in tasks, with its 95% intervals and its page: the figures of
``python -m benchmarks.proxy_regret`` (its results' ``summary``), which a test holds this line to."""
NAME_A_JUDGE = ("name one in base (judge_model_path or judge_funcs: a reward model or 'module:function' that never "
                "trains; pairwise_judge: a win rate against the reference) and tune eval/judge_score")


def tuned_judge(objectives: Sequence[Objective]) -> str | None:
    """The first objective's metric that is a judge's verdict (a held-out judge's, or a built-in task's gold on the
    training rollouts), None when the study tunes none."""
    return next((o.metric for o in objectives if o.metric in (*HELD_OUT_JUDGE_METRICS, GOLD_SCORE)), None)


def reported_judges(base: Mapping[str, Any]) -> list[str]:
    """The held-out judges' metrics that runs of ``base`` report (none where it does not build: the study file's
    own checks say why)."""
    from ppo_core.config.io import build_config
    from ppo_core.setup.reported_metrics import reported_metrics

    try:
        reported = reported_metrics(build_config(dict(base)))
    except ConfigError:
        return []
    return [metric for metric in HELD_OUT_JUDGE_METRICS if metric in reported]


def no_judge_notice(objectives: Sequence[Objective], base: Mapping[str, Any]) -> str | None:
    """One line where a study tunes no held-out judge: what it tunes instead, the judge its runs report if they do,
    and what tuning without one was measured to cost. None for a study that tunes a judge, or names no objective."""
    if not objectives or tuned_judge(objectives) is not None:  # no objectives: a study that stored none
        return None
    tuned = ", ".join(sorted({o.metric for o in objectives}))
    judges = reported_judges(base)
    if judges:
        return (f"note: this study tunes {tuned}, not the held-out judge its runs report ({judges[0]}): a reward "
                f"can be gamed where a judge it never trains on cannot. {PROXY_COST}".rstrip())
    return (f"warning: this study tunes {tuned} with no held-out judge, so nothing it reads can tell a real gain "
            f"from a gamed reward. {PROXY_COST} To tune what you trust, {NAME_A_JUDGE}.").replace("  ", " ")
