"""The text task's gold as a held-out judge any run can name, in TRL GRPOTrainer's reward signature:

    judge_funcs: [ppo_core.tasks.fortunes.judge:text_gold]

It is the gold of the shipped text task (``smollm2_text``: now version 5, built on that task's training texts):
VADER's positivity times a fluency read against the BSD fortunes, which word lists, symbols, repeats and lists strung on
"and" cannot pass. It judges whether a continuation of an English prompt is positive, fluent English. Read blind
against a careful reader it agrees only in part (Spearman 0.59 on the rated set's held-out half,
benchmarks/results/rated_text/), so it is stricter than a sentiment reward but no substitute for reading the samples.

Built once a process, in about 5 s (it needs the text extra: ``pip install 'ppo-tune[text]'``).
"""

from __future__ import annotations

import functools
from typing import Any

from ppo_core.tasks.fortunes.gold import TextGoldScorer

JUDGED_TASK = "smollm2_text"
"""The text task whose gold this judge is."""


@functools.cache
def shipped_gold() -> TextGoldScorer:
    """The shipped text task's gold scorer, built once a process."""
    from ppo_core.tasks.fortunes.params import TextTaskParams
    from ppo_core.tasks.fortunes.task_data import text_task_data
    from ppo_core.tasks.variants import task_params_of

    return text_task_data(task_params_of(TextTaskParams, JUDGED_TASK)).gold


def _text(item: Any) -> str:
    """A prompt or completion as text: a conversation's last message's content."""
    return item if isinstance(item, str) else str(item[-1]["content"])


def text_gold(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
    """Each completion's gold in [0, 1], read as the continuation of its prompt."""
    return shipped_gold()([_text(p) for p in prompts], [_text(c) for c in completions])
