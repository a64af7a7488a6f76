"""What a repeat achieved, judged by TRUE quality (a configuration's mean over every table seed), and the summary of
a strategy's repeats.

- target = 0.95 x the best TRUE value among configurations feasible in truth (gold scores are positive);
- updates to target: the updates spent when the winner's TRUE value first reached the target, a winner infeasible in
  truth counting as not reaching it; a repeat that never reaches it counts the whole budget and is flagged;
- episodes and seconds to target: what the same trials cost in episodes generated and in the table's measured wall
  time (a repeat that never reaches the target counts all it spent): runs of 48 and 96 updates can generate the same
  episodes in about the same time, so updates alone flatter short runs;
- final regret: best TRUE - the final winner's TRUE value; a repeat that ends with no winner, or one infeasible in
  truth, counts best - the worst TRUE value of a feasible configuration (what the worst feasible pick would lose),
  and is flagged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats  # type: ignore[import-untyped]

TARGET_FRACTION = 0.95
COST_UNITS = ("episodes", "seconds")
"""What a repeat's cost to the target is also counted in, beside updates."""


@dataclass(frozen=True)
class RepeatResult:
    updates_to_target: int
    reached: bool
    regret: float
    winner: int | None
    winner_ok: bool
    """The final winner is feasible in truth."""
    spent: int
    trials: int
    states: dict[str, int]
    reruns: int
    episodes_to_target: float = math.nan
    seconds_to_target: float = math.nan


def updates_to_target(timeline: Sequence[tuple[int, float | None]], target: float, budget: int) -> tuple[int, bool]:
    """(updates, reached): the first ``spent`` of the timeline whose winner's TRUE value (None: no winner, or one
    infeasible in truth) is >= ``target`` within the budget; (budget, False) when none is."""
    for spent, true in timeline:
        if true is not None and spent <= budget and true >= target:
            return spent, True
    return budget, False


def final_regret(best: float, winner_true: float | None, worst_feasible: float) -> float:
    """best - the final winner's TRUE value; best - worst_feasible for no winner or one infeasible in truth."""
    return best - (worst_feasible if winner_true is None else winner_true)


def true_of(config_id: int | None, truth: Mapping[int, tuple[float, bool]]) -> float | None:
    """A configuration's TRUE value, None for no configuration or one infeasible in truth."""
    if config_id is None:
        return None
    value, feasible = truth[config_id]
    return value if feasible else None


def judge(timeline: Sequence[tuple[int, int | None]], truth: Mapping[int, tuple[float, bool]], target: float,
          best: float, budget: int, states: Sequence[str], reruns: int, spent: int,
          costs: Sequence[tuple[int, float]] = ()) -> RepeatResult:
    """A repeat's figures from its timeline of winners (config_id after each trial) and the table's truth; with
    ``costs`` ((episodes, seconds) spent after each trial), the episodes and seconds to the target too."""
    trues = [(at, true_of(config_id, truth)) for at, config_id in timeline]
    updates, reached = updates_to_target(trues, target, budget)
    episodes, seconds = math.nan, math.nan
    if costs:
        hits = [i for i, (at_then, true) in enumerate(trues)
                if true is not None and at_then <= budget and true >= target]
        at = hits[0] if hits else len(costs) - 1  # never reached: all it spent
        episodes, seconds = float(costs[at][0]), float(costs[at][1])
    final = timeline[-1][1] if timeline else None
    final_true = true_of(final, truth)
    worst = min(value for value, feasible in truth.values() if feasible)
    counts = {state: list(states).count(state) for state in dict.fromkeys(states)}
    return RepeatResult(updates, reached, final_regret(best, final_true, worst), final, final_true is not None,
                        spent, len(states), counts, reruns, episodes, seconds)


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile), numpy's linear interpolation."""
    q1, median, q3 = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return float(q1), float(median), float(q3)


def paired_p(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p of paired repeats (the same sampler seed and table seed); 1.0 when every pair
    is equal (no evidence of a difference)."""
    differences = [a - b for a, b in zip(ours, theirs, strict=True)]
    if all(difference == 0 for difference in differences):
        return 1.0
    return float(stats.wilcoxon(ours, theirs, zero_method="zsplit").pvalue)


def versus(results: Sequence[RepeatResult], baseline: Sequence[RepeatResult]) -> dict[str, Any]:
    """A strategy against ``baseline``, repeat by repeat (the same sampler and table seeds): the ratio of median
    updates to target, the shares of repeats faster and slower, paired Wilcoxon p of the updates and of the final
    regret, and the ratio and p in each cost unit."""
    updates = [float(r.updates_to_target) for r in results]
    theirs = [float(r.updates_to_target) for r in baseline]
    median, their_median = statistics.median(updates), statistics.median(theirs)
    against: dict[str, Any] = {
        "median_ratio": median / their_median if their_median else math.nan,
        "faster": sum(a < b for a, b in zip(updates, theirs, strict=True)) / len(results),
        "slower": sum(a > b for a, b in zip(updates, theirs, strict=True)) / len(results),
        "wilcoxon_p": paired_p(updates, theirs),
        "regret_wilcoxon_p": paired_p([r.regret for r in results], [r.regret for r in baseline]),
    }
    for unit in COST_UNITS:
        ours_cost = [getattr(r, f"{unit}_to_target") for r in results]
        theirs_cost = [getattr(r, f"{unit}_to_target") for r in baseline]
        known = all(map(math.isfinite, ours_cost + theirs_cost))
        against[f"{unit}_median_ratio"] = statistics.median(ours_cost) / statistics.median(theirs_cost) \
            if known and statistics.median(theirs_cost) else math.nan
        against[f"{unit}_wilcoxon_p"] = paired_p(ours_cost, theirs_cost) if known else math.nan
    return against


def summarise(results: Sequence[RepeatResult], baseline: Sequence[RepeatResult] | None) -> dict[str, Any]:
    """A strategy's figures over its repeats, and against ``baseline`` (random search) repeat by repeat."""
    updates = [float(r.updates_to_target) for r in results]
    regrets = [r.regret for r in results]
    q1, median, q3 = quartiles(updates)
    r1, regret_median, r3 = quartiles(regrets)
    states = sorted({state for r in results for state in r.states})
    summary: dict[str, Any] = {
        "median_updates_to_target": median, "iqr": [q1, q3], "mean_updates_to_target": statistics.fmean(updates),
        "final_regret_median": regret_median, "final_regret_iqr": [r1, r3],
        "final_regret_mean": statistics.fmean(regrets),
        "reached": sum(r.reached for r in results) / len(results),
        "winner_infeasible": sum(not r.winner_ok for r in results) / len(results),
        "trials_median": statistics.median(r.trials for r in results),
        "states_mean": {state: statistics.fmean(r.states.get(state, 0) for r in results) for state in states},
        "reruns_mean": statistics.fmean(r.reruns for r in results),
        "spent_median": statistics.median(r.spent for r in results),
    }
    for unit in COST_UNITS:
        values = [getattr(r, f"{unit}_to_target") for r in results]
        summary[f"median_{unit}_to_target"] = statistics.median(values) if all(map(math.isfinite, values)) \
            else math.nan
    if baseline is not None:
        summary["vs_random"] = versus(results, baseline)
    return summary
