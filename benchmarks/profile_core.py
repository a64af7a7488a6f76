"""Where ppo_core's time goes: an inclusive per-function breakdown, then torch.profiler's top operators.

ppo_core carries no profiler annotations, so this wraps its functions from outside (in the worker
process only; ppo_core's files are untouched). Each wrapper adds a ``record_function`` label and
accumulates its own wall time. The run has three stretches: warmup updates (ignored), breakdown
updates (wrappers timing, no profiler: low overhead) and profiled updates (torch.profiler on,
whose per-op bookkeeping inflates small-op timings, so its table is read for ranking only).
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import ppo_core.rewards
import ppo_core.rollout
import ppo_core.trainer
import ppo_core.update
from benchmarks.core_side import CoreSide
from benchmarks.timing import sync
from benchmarks.workload import Workload
from ppo_core import TrainerCallback

PROFILED_UPDATES = 2

# (namespace, attribute, label): the namespace is where the caller looks the name up.
MODULE_FUNCTIONS: tuple[tuple[Any, str, str], ...] = (
    (ppo_core.trainer, "ppo_update", "update (total)"),
    (ppo_core.rollout, "generate", "rollout/generate (sampling + logprobs)"),
    (ppo_core.rollout, "response_logits", "rollout/reference forward"),
    (ppo_core.rollout, "response_values", "rollout/value forward"),
    (ppo_core.rollout, "decode_responses", "rollout/decode responses"),
    (ppo_core.trainer, "kl_per_token", "rollout/kl, rewards, gae, whiten"),
    (ppo_core.trainer, "shape_rewards", "rollout/kl, rewards, gae, whiten"),
    (ppo_core.trainer, "gae", "rollout/kl, rewards, gae, whiten"),
    (ppo_core.trainer, "whiten_advantages", "rollout/kl, rewards, gae, whiten"),
    (ppo_core.trainer, "rollout_metrics", "update/rollout metrics"),
    (ppo_core.update, "response_logits", "update/policy forward"),
    (ppo_core.update, "response_values", "update/value forward"),
    (ppo_core.update, "token_logprobs", "update/logprobs"),
    (ppo_core.update, "entropy_from_logits", "update/entropy (with grad)"),
    (ppo_core.update, "clipped_policy_loss", "update/losses"),
    (ppo_core.update, "clipped_value_loss", "update/losses"),
    (ppo_core.update, "_optimizer_step", "update/optimizer step + zero_grad"),
)
CLASS_METHODS: tuple[tuple[Any, str, str], ...] = (
    (ppo_core.rewards.SequenceClassifierReward, "__call__", "rollout/reward (tokenize + forward)"),
    (ppo_core.update.StatsAccumulator, "add", "update/stats to CPU"),
    (ppo_core.update.StatsAccumulator, "add_ratios", "update/stats to CPU"),
)


class PhaseTimes:
    """Inclusive wall seconds and calls per label, accumulated only while ``enabled``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.enabled = False
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, function: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                with record_function(label):
                    return function(*args, **kwargs)
            started = time.perf_counter()
            with record_function(label):
                result = function(*args, **kwargs)
            sync(self.device)
            self.seconds[label] += time.perf_counter() - started
            self.calls[label] += 1
            return result

        return timed


def install(side: CoreSide, times: PhaseTimes) -> list[str]:
    """Wrap ppo_core's functions (this process only) and the trainer's rollout and backward.

    ppo_core is still changing; a function that has moved is skipped (and reported) rather than fatal.
    """
    missing = []
    for namespace, name, label in MODULE_FUNCTIONS + CLASS_METHODS:
        if not hasattr(namespace, name):
            missing.append(f"{namespace.__name__}.{name}")
            continue
        setattr(namespace, name, times.wrap(getattr(namespace, name), label))
    trainer = side.trainer
    trainer._rollout = times.wrap(trainer._rollout, "rollout (total, excl. kl/gae)")  # type: ignore[method-assign]
    accelerator = trainer.accelerator
    accelerator.backward = times.wrap(accelerator.backward, "update/backward")  # type: ignore[method-assign]
    return missing


class _Stretches(TrainerCallback):
    """Switches from warmup to breakdown timing to torch.profiler at the right update boundaries."""

    def __init__(self, times: PhaseTimes, warmup: int, breakdown: int, profiler: profile) -> None:
        self.times, self.warmup, self.breakdown, self.profiler = times, warmup, breakdown, profiler
        self.profiling = False
        self.update_seconds: list[float] = []
        self._last = 0.0

    def on_train_begin(self, config: Any, num_updates: int) -> None:
        self._last = time.perf_counter()

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        now = time.perf_counter()
        if self.warmup < update <= self.warmup + self.breakdown:
            self.update_seconds.append(now - self._last)
        if update == self.warmup:
            self.times.enabled = True
        if update == self.warmup + self.breakdown:
            self.times.enabled = False
            self.profiler.start()
            self.profiling = True
        self._last = time.perf_counter()
        return None

    def on_train_end(self, num_updates: int, stop_reason: str | None) -> None:
        if self.profiling:
            self.profiler.stop()


def _breakdown_rows(times: PhaseTimes, updates: int, update_seconds: float) -> list[dict[str, Any]]:
    rows = [
        {
            "label": label,
            "ms_per_update": 1000 * seconds / updates,
            "share_of_update_wall": seconds / updates / update_seconds,
            "calls_per_update": times.calls[label] / updates,
        }
        for label, seconds in times.seconds.items()
    ]
    return sorted(rows, key=lambda row: row["label"])


def _operator_rows(
    profiler: profile, labels: set[str], updates: int, on_gpu: bool, limit: int = 15
) -> list[dict[str, Any]]:
    """Top operators by self time: CPU time on CPU, kernel time on a GPU (the scarce resource there)."""

    def device_us(event: Any) -> float:
        return float(getattr(event, "self_device_time_total", 0.0))

    def cpu_us(event: Any) -> float:
        return float(event.self_cpu_time_total)

    rank = device_us if on_gpu else cpu_us
    events = [event for event in profiler.key_averages() if event.key not in labels]
    events.sort(key=rank, reverse=True)
    total = sum(rank(event) for event in events) or 1.0
    rows = []
    for event in events[:limit]:
        row = {
            "operator": event.key,
            "self_cpu_ms_per_update": cpu_us(event) / 1000 / updates,
            "share_of_op_time": rank(event) / total,
            "calls_per_update": event.count / updates,
        }
        if on_gpu:
            row["self_device_ms_per_update"] = device_us(event) / 1000 / updates
        rows.append(row)
    return rows


def profile_core(side: CoreSide, workload: Workload) -> dict[str, Any]:
    """Train ``side`` for the workload's updates; the last PROFILED_UPDATES run under torch.profiler."""
    breakdown = workload.measured_updates - PROFILED_UPDATES
    if breakdown < 1:
        raise ValueError(f"profile needs measured_updates > {PROFILED_UPDATES}")
    device = side.trainer.accelerator.device
    times = PhaseTimes(device)
    missing = install(side, times)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    profiler = profile(activities=activities)
    stretches = _Stretches(times, workload.warmup_updates, breakdown, profiler)
    side.trainer.callbacks.append(stretches)
    timings = side.train()
    mean_update = sum(stretches.update_seconds) / len(stretches.update_seconds)
    labels = {label for _, _, label in MODULE_FUNCTIONS + CLASS_METHODS}
    labels |= {"rollout (total, excl. kl/gae)", "update/backward"}
    return {
        "not_wrapped": missing,
        "breakdown_updates": breakdown,
        "profiled_updates": PROFILED_UPDATES,
        "mean_update_wall_s": mean_update,
        "breakdown": _breakdown_rows(times, breakdown, mean_update),
        "operators": _operator_rows(profiler, labels, PROFILED_UPDATES, device.type == "cuda"),
        "updates": [timing.to_dict() for timing in timings],
    }
