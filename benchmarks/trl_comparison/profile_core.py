"""Where ppo_core's time goes: an inclusive per-function breakdown, then torch.profiler's top operators.

ppo_core carries no profiler annotations, so this wraps its functions from outside (in the worker
process only; ppo_core's files are untouched). Each wrapper adds a ``record_function`` label and
accumulates its own wall time. The run has three stretches: warmup updates (ignored), breakdown
updates (wrappers timing, no profiler: low overhead) and profiled updates (torch.profiler on,
whose per-op bookkeeping inflates small-op timings, so its table is read for ranking only).

A wrapper sits on the name the caller looks up (``ppo_core.algorithm.update.scoring_logits``, not
``ppo_core.rollout.collect.scoring_logits``, for the update's forwards). When ppo_core moves or renames a
function, its name is missing here or no longer called: either one stops the run with the names
(:class:`StaleWrappers`), so the breakdown never quietly loses a row.
"""

from __future__ import annotations

import functools
import time
import types
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import ppo_core.algorithm.token_head
import ppo_core.algorithm.update
import ppo_core.rewards.models
import ppo_core.rollout.collect
import ppo_core.run.trainer
from benchmarks.trl_comparison.core_side import CoreSide
from benchmarks.trl_comparison.timing import sync
from benchmarks.trl_comparison.workload import Workload
from ppo_core import TrainerCallback

PROFILED_UPDATES = 2
"""Updates run under torch.profiler, after the breakdown updates."""

ROLLOUT_ADVANTAGES = "rollout/kl, rewards, advantages"
# (namespace, attribute, label): the namespace is where the caller looks the name up.
MODULE_FUNCTIONS: tuple[tuple[Any, str, str], ...] = (
    (ppo_core.run.trainer, "ppo_update", "update (total)"),
    (ppo_core.rollout.collect, "sample_chunk", "rollout/generate (sampling)"),
    (ppo_core.rollout.collect, "scoring_logits", "rollout/policy and reference scoring forwards"),
    (ppo_core.rollout.collect, "token_logprobs", "rollout/logprobs"),
    (ppo_core.rollout.collect, "response_values", "rollout/value forward"),
    (ppo_core.rollout.collect, "decode_responses", "rollout/decode responses"),
    (ppo_core.run.trainer, "kl_per_token", ROLLOUT_ADVANTAGES),
    (ppo_core.run.trainer, "kl_penalty", ROLLOUT_ADVANTAGES),
    (ppo_core.run.trainer, "estimate_advantages", ROLLOUT_ADVANTAGES),
    (ppo_core.run.trainer, "rollout_metrics", "update/rollout metrics"),
    (ppo_core.algorithm.update, "scoring_logits", "update/policy forward"),
    (ppo_core.algorithm.update, "response_values", "update/value forward"),
    (ppo_core.algorithm.token_head, "log_softmax_head", "update/log-probs and entropy"),
    (ppo_core.algorithm.update, "policy_objective", "update/losses"),
    (ppo_core.algorithm.update, "clipped_value_loss", "update/losses"),
    (ppo_core.algorithm.update, "_optimizer_step", "update/optimizer step + zero_grad"),
)
CLASS_METHODS: tuple[tuple[Any, str, str], ...] = (
    (ppo_core.rewards.models.SequenceClassifierReward, "__call__", "rollout/reward (forward)"),
    (ppo_core.algorithm.update.StatsAccumulator, "add", "update/stats (summed on the device)"),
    (ppo_core.algorithm.update.StatsAccumulator, "add_ratios", "update/stats (summed on the device)"),
    (ppo_core.algorithm.update.StatsAccumulator, "summary", "update/stats to CPU"),
)
TRAINER_LABELS = ("rollout (total, excl. kl and advantages)", "update/backward")
"""Labels of the two wrappers set on the trainer's own objects: its ``_rollout`` and its accelerator's backward."""


class StaleWrappers(RuntimeError):
    """Wrapped names that ppo_core no longer has, or no longer calls through the wrapped name."""


class PhaseTimes:
    """Inclusive wall seconds and calls per label, accumulated only while ``enabled``; calls per wrapped name too
    (several names can share a label)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.enabled = False
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.calls_by_name: dict[str, int] = defaultdict(int)

    def wrap(self, function: Callable[..., Any], label: str, name: str | None = None) -> Callable[..., Any]:
        name = name or label

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
            self.calls_by_name[name] += 1
            return result

        return timed


def install(side: CoreSide, times: PhaseTimes) -> None:
    """Wrap ppo_core's functions (this process only) and the trainer's rollout and backward.

    Raises StaleWrappers naming every wrapped name that no longer exists, before anything is wrapped.
    """
    targets = MODULE_FUNCTIONS + CLASS_METHODS
    missing = [f"{_where(namespace)}.{name}" for namespace, name, _ in targets if not hasattr(namespace, name)]
    if missing:
        raise StaleWrappers(
            f"ppo_core no longer has {', '.join(missing)}: profile_core.py wraps the names its callers "
            "look up; point MODULE_FUNCTIONS / CLASS_METHODS at their current homes"
        )
    for namespace, name, label in targets:
        setattr(namespace, name, times.wrap(getattr(namespace, name), label, f"{_where(namespace)}.{name}"))
    trainer = side.trainer
    trainer._rollout = times.wrap(trainer._rollout, TRAINER_LABELS[0])
    accelerator = trainer.accelerator
    accelerator.backward = times.wrap(accelerator.backward, TRAINER_LABELS[1])


def _where(namespace: Any) -> str:
    """``ppo_core.algorithm.update`` for a module, ``ppo_core.algorithm.update.StatsAccumulator`` for a class."""
    if isinstance(namespace, types.ModuleType):
        return namespace.__name__
    return f"{namespace.__module__}.{namespace.__name__}"


def check_every_label_called(times: PhaseTimes) -> None:
    """Raise StaleWrappers when a wrapped name was never called in the breakdown updates: ppo_core has stopped
    calling it through that name (it calls a new function, or imports the old one under another name), so its time
    would silently vanish from the breakdown."""
    names = [f"{_where(namespace)}.{name}" for namespace, name, _ in MODULE_FUNCTIONS + CLASS_METHODS]
    never = [name for name in [*names, *TRAINER_LABELS] if times.calls_by_name.get(name, 0) == 0]
    if never:
        raise StaleWrappers(f"wrapped but never called during the breakdown updates: {', '.join(never)}")


class _Stretches(TrainerCallback):
    """Switches from warmup to breakdown timing to torch.profiler at the right update boundaries."""

    def __init__(self, times: PhaseTimes, warmup: int, breakdown: int, profiler: profile) -> None:
        self.times, self.warmup, self.breakdown, self.profiler = times, warmup, breakdown, profiler
        self.profiling = False
        self.update_seconds: list[float] = []
        self._last = 0.0

    def on_train_begin(self, config: Any, num_updates: int) -> None:
        self.times.enabled = self.warmup == 0
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
    install(side, times)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    profiler = profile(activities=activities)
    stretches = _Stretches(times, workload.warmup_updates, breakdown, profiler)
    side.trainer.callbacks.append(stretches)
    timings = side.train()
    check_every_label_called(times)
    mean_update = sum(stretches.update_seconds) / len(stretches.update_seconds)
    labels = {label for _, _, label in MODULE_FUNCTIONS + CLASS_METHODS} | set(TRAINER_LABELS)
    return {
        "breakdown_updates": breakdown,
        "profiled_updates": PROFILED_UPDATES,
        "mean_update_wall_s": mean_update,
        "breakdown": _breakdown_rows(times, breakdown, mean_update),
        "operators": _operator_rows(profiler, labels, PROFILED_UPDATES, device.type == "cuda"),
        "updates": [timing.to_dict() for timing in timings],
    }
