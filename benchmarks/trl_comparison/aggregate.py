"""Turning raw per-run timings into medians, throughput, FLOP utilisation and ppo_core / TRL ratios."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.trl_comparison.workload import Workload

TIME_KEYS = ("rollout_s", "update_s", "other_s", "wall_s", "gc_s", "wall_excl_gc_s")


def run_medians(run: dict[str, Any], warmup_updates: int) -> dict[str, float]:
    """One run's median seconds per update over its measured (post-warmup) updates."""
    measured = run["updates"][warmup_updates:]
    if not measured:
        raise ValueError("a run has no measured updates")
    for update in measured:
        update.setdefault("gc_s", 0.0)
        update["other_s"] = update["wall_s"] - update["rollout_s"] - update["update_s"]
        update["wall_excl_gc_s"] = update["wall_s"] - update["gc_s"]
    return {key: statistics.median(update[key] for update in measured) for key in TIME_KEYS}


def side_summary(
    runs: list[dict[str, Any]], workload: Workload, work: dict[str, Any], peak: float | None,
    matmul_peak: float | None = None,
) -> dict[str, Any]:
    """Medians across repeats of each run's medians, with throughput derived from the median times.

    ``peak`` is the accelerator's datasheet peak (for MFU, None on CPU); ``matmul_peak`` the FLOP/s this machine's
    ``torch.mm`` reached in the same session (matmul_peak.py), which the update phase's FLOP/s is read against.
    """
    per_run = [run_medians(run, workload.warmup_updates) for run in runs]
    summary: dict[str, Any] = {key: statistics.median(medians[key] for medians in per_run) for key in TIME_KEYS}
    walls = [medians["wall_s"] for medians in per_run]
    summary["wall_s_min"], summary["wall_s_max"] = min(walls), max(walls)
    summary["episodes_per_s"] = workload.batch_size / summary["wall_s"]
    summary["generated_tokens_per_s"] = work["generated_tokens"] / summary["rollout_s"]
    summary["trained_tokens_per_s"] = work["trained_tokens"] / summary["update_s"]
    summary["update_flops_per_s"] = work["update_flops"] / summary["update_s"]
    summary["rollout_flops_per_s"] = work["rollout_flops"] / summary["rollout_s"]
    summary["update_mfu"] = summary["update_flops_per_s"] / peak if peak else None
    summary["update_share_of_matmul_peak"] = summary["update_flops_per_s"] / matmul_peak if matmul_peak else None
    memory = [run["memory"] for run in runs]
    summary["peak_rss_delta_mib"] = statistics.median(m["peak_rss_delta_mib"] for m in memory)
    summary["peak_rss_mib"] = statistics.median(m["peak_rss_mib"] for m in memory)
    if all("cuda_peak_allocated_mib" in m for m in memory):
        summary["cuda_peak_allocated_mib"] = statistics.median(m["cuda_peak_allocated_mib"] for m in memory)
    summary["setup_s"] = statistics.median(run["setup_s"] for run in runs)
    summary["repeats"] = len(runs)
    return summary


RATIO_KEYS = (
    "rollout_s", "update_s", "wall_s", "wall_excl_gc_s", "episodes_per_s", "update_flops_per_s",
    "peak_rss_delta_mib", "peak_rss_mib", "cuda_peak_allocated_mib", "update_mfu",
)


def ratios(core: dict[str, Any], trl: dict[str, Any]) -> dict[str, float]:
    """ppo_core / TRL: below 1 is better for seconds and memory, above 1 is better for episodes/s and MFU."""
    return {
        key: core[key] / trl[key]
        for key in RATIO_KEYS
        if core.get(key) is not None and trl.get(key) not in (None, 0)
    }
