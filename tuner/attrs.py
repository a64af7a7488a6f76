"""Names of the trial attributes the tuner writes, in a module light enough for readers (the dashboard).

Importing this module imports nothing else, so a reader can name the attributes without loading the
trainer (and torch) behind ``tuner.objective`` and ``tuner.kl_guard``.
"""

from __future__ import annotations

KL_HISTORY_ATTR = "kl_history"
BUDGET_ATTR = "budget_updates"
NON_FINITE_ATTR = "non_finite_metric"
PRUNE_REASON_ATTR = "prune_reason"
PRUNED_AT_ATTR = "pruned_at_update"
FAIL_REASON_ATTR = "fail_reason"
CONFIG_ATTR = "config"
