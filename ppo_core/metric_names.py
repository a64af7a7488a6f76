"""Names of per-update metrics that more than one part reads, importable without torch (the dashboard does)."""

from __future__ import annotations

# Reported on every update by every run, and checked for NaN and infinity after each one: the root causes of
# a divergence (the score, KL and the two losses), in the order a diagnosis should name them.
GUARDED_METRICS = ("objective/scores", "objective/kl", "loss/policy_avg", "loss/value_avg")

# Groups that measure the machine rather than the run: two identical runs (same seed, same config) differ in them.
MACHINE_METRIC_GROUPS = ("time/", "memory/")


def run_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` without the machine's measurements: what a seeded run must reproduce exactly."""
    return {name: value for name, value in metrics.items() if not name.startswith(MACHINE_METRIC_GROUPS)}
