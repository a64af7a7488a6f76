"""Names of per-update metrics that more than one part reads, importable without torch (the dashboard does)."""

from __future__ import annotations

# Reported on every update by every run, and checked for NaN and infinity after each one: the root causes of
# a divergence (the score, KL and the two losses), in the order a diagnosis should name them.
GUARDED_METRICS = ("objective/scores", "objective/kl", "loss/policy_avg", "loss/value_avg")
