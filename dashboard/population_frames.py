"""A population study shaped for the Population page, pure pandas: its segments (one row per member per generation),
the copies between them, one lineage's segments, its learning rate and KL coefficient over the updates, and its
stitched curves.

A segment trains updates ``start + 1`` to ``stop`` (``tuner.store.segments``); its trial's metric rows begin with a
copy of its parent's, so the last segment of a lineage holds the lineage's whole curve from update 1.

Example::

    segments = segments_frame(study.get_trials())
    chain = lineage_rows(segments, view.best[0])                 # the winner's segments, first to last
    steps = schedule_frame(view.configs[view.best[0]], int(chain["stop"].iloc[-1]))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from ppo_core.config.estimator_traits import default_kl_in_reward
from ppo_core.config.ppo_config import PPOConfig
from ppo_core.config.schedules import value_at
from tuner.store.segments import COPIES, Segment, generation_slots, last_generation, segment_of

SEGMENT_COLUMNS = ["trial", "member", "generation", "start", "stop", "origin", "parent", "state", "value", "mutated"]
EDGE_COLUMNS = ["trial", "parent", "origin", "x0", "y0", "x1", "y1"]
PROXY, TRAINING_KL, HELD_OUT_KL = "objective/scores", "objective/kl", "eval/kl"
# ppo_core's own defaults, for a stored config that left a field to them.
DEFAULTS = {field.name: field.default for field in dataclasses.fields(PPOConfig)}


def mutated_words(mutated: Mapping[str, Sequence[float]]) -> str:
    """What a copy changed, as ``learning_rate 3.1e-05 → 2.5e-05, kl_coef 0.1 → 0.08``; "" for none."""
    return ", ".join(f"{name} {old:.3g} → {new:.3g}" for name, (old, new) in mutated.items())


def _row(trial: FrozenTrial, segment: Segment) -> dict[str, Any]:
    # Only a complete segment has an objective value: a pruned one's stored value is a partial reading.
    value = trial.values[0] if trial.state == TrialState.COMPLETE and trial.values else math.nan
    return {"trial": trial.number, "member": segment.member, "generation": segment.generation,
            "start": segment.start, "stop": segment.stop, "origin": segment.origin,
            "parent": -1 if segment.parent is None else segment.parent, "state": trial.state.name,
            "value": float(value), "mutated": mutated_words(segment.mutated)}


def segments_frame(trials: Sequence[FrozenTrial]) -> pd.DataFrame:
    """One row per member per generation, the attempt that counts (a retry replaces the one it retries, and a
    segment queued twice counts once), by generation then member; empty for a study with no population.

    ``parent`` is -1 for a first segment; ``value`` is the first objective's, NaN where the segment did not
    complete."""
    rows = [_row(trial, segment)
            for generation in range(last_generation(trials) + 1)
            for _, trial in sorted(generation_slots(trials, generation).items())
            if (segment := segment_of(trial)) is not None]
    return pd.DataFrame(rows, columns=SEGMENT_COLUMNS)


def copy_edges(segments: pd.DataFrame) -> pd.DataFrame:
    """Each copy (an ``exploit`` segment, or a ``backtrack`` one that went back to an earlier segment's end) as an
    edge from its parent's end, (stop, member), to its own start: for a backtrack, the earlier point it went back
    to."""
    by_trial = segments.set_index("trial")
    rows = []
    for child in segments[segments["origin"].isin(COPIES)].itertuples():
        if child.parent not in by_trial.index:  # a parent that no longer counts: a copy of a replaced attempt
            continue
        parent = by_trial.loc[child.parent]
        rows.append({"trial": child.trial, "parent": child.parent, "origin": child.origin, "x0": int(parent["stop"]),
                     "y0": int(parent["member"]), "x1": int(child.start), "y1": int(child.member)})
    return pd.DataFrame(rows, columns=EDGE_COLUMNS)


def lineage_rows(segments: pd.DataFrame, last: int) -> pd.DataFrame:
    """The segments that led to trial ``last``, first to last (following each one's parent); empty where ``last``
    is no segment."""
    by_trial = segments.set_index("trial", drop=False)
    chain: list[int] = []
    current = last
    while current in by_trial.index and current not in chain:
        chain.append(current)
        current = int(by_trial.loc[current, "parent"])
    return segments.set_index("trial", drop=False).loc[chain[::-1]].reset_index(drop=True)


def final_segments(segments: pd.DataFrame) -> list[int]:
    """Each member's latest segment (its run so far), by member."""
    latest = segments.sort_values(["member", "generation"]).groupby("member").tail(1)
    return [int(n) for n in latest["trial"]]


def kl_field(config: Mapping[str, Any]) -> str:
    """The config field whose KL coefficient is in force: kl_coef when the KL penalty is in the reward, beta when it
    is in the loss (``ppo_core.config.readings``); ``kl_coef_schedule`` schedules that one."""
    in_reward = config.get("kl_in_reward")
    if in_reward is None:
        in_reward = default_kl_in_reward(str(config.get("advantage_estimator") or DEFAULTS["advantage_estimator"]))
    return "kl_coef" if in_reward else "beta"


def schedule_frame(config: Mapping[str, Any], last_update: int) -> pd.DataFrame:
    """The learning rate and the KL coefficient in force at each update 1..``last_update``, as the config's values
    and its schedules (``learning_rate_schedule``, ``kl_coef_schedule``) give them."""
    field = kl_field(config)
    learning_rate = float(config.get("learning_rate", DEFAULTS["learning_rate"]))
    kl = float(config.get(field, DEFAULTS[field]))
    updates = range(1, max(last_update, 1) + 1)
    return pd.DataFrame({
        "update": list(updates),
        "learning_rate": [value_at(config.get("learning_rate_schedule"), learning_rate, u) for u in updates],
        "kl": [value_at(config.get("kl_coef_schedule"), kl, u) for u in updates],
    })


def stitched_curves(metrics: pd.DataFrame, trial: int, judge: str) -> pd.DataFrame:
    """Trial ``trial``'s own rows of the held-out judge, the proxy and both KLs, long: update, metric, value (the
    rows a metric lacks, such as updates with no evaluation, left out)."""
    wanted = [m for m in dict.fromkeys([judge, PROXY, HELD_OUT_KL, TRAINING_KL]) if m in metrics.columns]
    if metrics.empty or not wanted:
        return pd.DataFrame(columns=["update", "metric", "value"])
    rows = metrics.loc[metrics["trial_number"] == trial, ["update", *wanted]]
    long = rows.melt(id_vars="update", var_name="metric", value_name="value").dropna(subset=["value"])
    return long.astype({"update": int, "value": float}).reset_index(drop=True)


__all__ = [
    "EDGE_COLUMNS",
    "HELD_OUT_KL",
    "PROXY",
    "SEGMENT_COLUMNS",
    "TRAINING_KL",
    "copy_edges",
    "final_segments",
    "kl_field",
    "lineage_rows",
    "mutated_words",
    "schedule_frame",
    "segments_frame",
    "stitched_curves",
]
