"""Every metric a study names (objectives, constraints, the KL guard's) must be one its runs report: checked when
the study file is read, before any trial runs, instead of failing every trial."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.metric_names import EVAL_PREFIX
from ppo_core.setup.reported_metrics import reported_metrics


def unreported_metric(named: Iterable[tuple[str, str]], config: PPOConfig) -> str | None:
    """The error for the first (study-file key, metric) pair whose metric ``config``'s run does not report, or
    None when it reports them all."""
    reported = reported_metrics(config)
    for key, metric in named:
        if metric in reported:
            continue
        if metric.startswith(EVAL_PREFIX) and config.eval_steps is None:
            return (f"{key}: {metric!r} is reported only by runs that evaluate on held-out prompts; set "
                    "base.eval_steps (e.g. 0.25: an evaluation every quarter of the run, and one at its end)")
        close = difflib.get_close_matches(metric, sorted(reported), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"it reports {', '.join(sorted(reported)[:8])}, ..."
        return f"{key}: {metric!r} is not a metric this study's runs report ({hint})"
    return None
