"""What a trial's curves say, in plain words, with the advice that applies.

The signs and the advice follow the tuning guidance "PPO hyperparameters for LLMs"
(the seed guidance ../shared/seeds/ppo-hyperparameters-for-llms.txt, beside this repository): control KL first and
keep it below roughly 15–20 nats, moving β or the adaptive target when the policy runs away and
when KL falls to zero; a learning rate that is too high drives KL up and the outputs to collapse;
an unstable value function spoils the advantages; instability over several PPO epochs calls for
fewer epochs or a tighter clip range. The numeric limits below are this module's own rules of
thumb, named so they can be read and changed in one place.

Each rule is a small pure function from one trial's metrics (one row per update, the columns of
``tuner.store.records.read_metrics``) to a :class:`Finding` or ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ppo_core.metric_names import (
    EVAL_DISTINCT_2,
    EVAL_METRICS,
    EVAL_PREFIX,
    EVAL_REPEATED_3,
    EVAL_SCORE,
    GUARDED_METRICS,
    HELD_OUT_JUDGE_METRICS,
)
from tuner.store.attrs import DEFAULT_KL_METRIC, DEFAULT_KL_THRESHOLD
from tuner.store.records import METRIC_KEYS

CRITICAL, WARNING, INFO = "critical", "warning", "info"
SEVERITY_RANK = {CRITICAL: 0, WARNING: 1, INFO: 2}

KL_HIGH_NATS = 10.0  # the guidance: KL consistently above 10–15 nats is too far from the SFT model
KL_ZERO_NATS = 0.01  # below this the policy is effectively the reference model
KL_COLLAPSE_FRACTION = 0.05  # KL fell to under 5% of its peak
VALUE_LOSS_GROWTH = 4.0  # value loss at the end vs the start
ENTROPY_KEPT_FRACTION = 0.2  # entropy fell to under 20% of where it started
CLIPFRAC_HIGH = 0.3  # PPO typically clips 5–20% of tokens
APPROXKL_HIGH = 0.1  # per-update KL between old and new policy; PPO's trust region wants a few hundredths
GOLD_GIVE_BACK = 0.2  # gold gave back this much of its gain while the proxy kept rising
NOISE_MULTIPLE = 3.0  # a trend is a finding only when it exceeds this many standard errors of the run's own noise
# Signs of hacking in the held-out answers, each against the run's own first evaluation: what a reader sees as answers
# that say the same words to every prompt, or loop on one phrase (benchmarks/results/hacking_signals/).
DISTINCT_KEPT_FRACTION = 0.5  # distinct word pairs fell to under half their first evaluation's share
REPEATS_RISE = 0.1  # a tenth more of the answers' word triples repeat one earlier in the same answer

KL_GUIDANCE = "Keep KL under about 15–20 nats."  # the guidance's generic figure: a study's own peak replaces it
ADVICE_KL_HIGH = ("Lower the learning rate or raise β (kl_coef); with the adaptive controller, lower kl_target. "
                  f"{KL_GUIDANCE}")
ADVICE_KL_ZERO = ("Lower β (kl_coef) or raise the learning rate; with the adaptive controller, raise kl_target: "
                  "a policy pinned to the reference model cannot learn from the reward.")
ADVICE_VALUE = ("Lower the value learning rate (value_learning_rate) or vf_coef, or tighten cliprange_value: "
                "an unstable value function corrupts the advantages the policy learns from.")
ADVICE_ENTROPY = ("Lower the learning rate or raise β to keep the policy near the SFT model; an entropy bonus "
                  "(entropy_coef) also keeps it from collapsing to a few answers.")
ADVICE_STEP_SIZE = ("Use fewer PPO epochs (num_ppo_epochs) or a tighter clip range (cliprange), "
                    "or lower the learning rate: each update moves the policy too far from the one that sampled.")
ADVICE_OVER_OPTIMISATION = ("Raise β (kl_coef) or, with the adaptive controller, lower kl_target to stay closer to "
                            "the SFT model, or train for fewer updates.")
ADVICE_HACKING = ("Read the samples: where they repeat themselves, prefer an earlier evaluation's policy, raise β "
                  "(kl_coef) or lower the learning rate, and bound the signal in the study's hacking_guard or "
                  "constraints.")
ADVICE_NON_FINITE = ("Lower the learning rate(s), keep gradient clipping (max_grad_norm) on, "
                     "and check that the reward never returns NaN or infinity.")


@dataclass(frozen=True)
class Finding:
    """One sign of trouble: how bad, what, the numbers that show it, and what to try."""

    rule: str
    severity: str
    sign: str
    evidence: str
    advice: str
    update: int | None = None


@dataclass(frozen=True)
class HealthContext:
    """What the rules need besides the metrics: the study's KL guard and the trial's KL target."""

    kl_threshold: float = DEFAULT_KL_THRESHOLD
    kl_metric: str = DEFAULT_KL_METRIC
    kl_target: float | None = None
    window: int = 5
    # The metrics this trial reports on every update whatever happens, so a missing value is a run gone wrong.
    reported: tuple[str, ...] = GUARDED_METRICS


@dataclass(frozen=True)
class _Series:
    """A metric's finite values and the updates they belong to (numpy, for speed over hundreds of trials)."""

    updates: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def head(self, n: int) -> float:
        return float(self.values[:n].mean())

    def tail(self, n: int) -> float:
        return float(self.values[-n:].mean())

    def last_update(self) -> int:
        return int(self.updates[-1])


def _floats(metrics: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """The columns as one float matrix, a row per update. By position in the whole frame's matrix: selecting
    columns by name, as a list or one at a time, goes through pandas' index of (Arrow) strings, which over hundreds
    of trials cost more than the rules themselves."""
    positions = {name: i for i, name in enumerate(metrics.columns)}
    return metrics.to_numpy(dtype=float)[:, [positions[name] for name in columns]]


def _series(metrics: pd.DataFrame, name: str) -> _Series:
    if name not in metrics.columns or metrics.empty:
        return _Series(np.empty(0, dtype=int), np.empty(0))
    values = metrics[name].to_numpy(dtype=float)
    keep = np.isfinite(values)
    return _Series(metrics["update"].to_numpy()[keep], values[keep])


def non_finite(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
    """A metric became NaN or infinite (the run diverged numerically)."""
    columns = [c for c in metrics.columns if c not in METRIC_KEYS]
    if not columns or metrics.empty:
        return None
    values = _floats(metrics, columns)
    finite = np.isfinite(values)
    # Stored NaNs and missing values read back alike. A column without any value is a metric this run
    # does not report (a gold score without a task), unless every run reports it (the guarded metrics); the
    # held-out evaluation's metrics are missing on every update without an evaluation, so only infinity counts there.
    sparse = np.array([c.startswith(EVAL_PREFIX) or c in EVAL_METRICS for c in columns], dtype=bool)
    reported = (finite.any(axis=0) & ~sparse) | np.isin(columns, context.reported)
    bad = (~finite & ~np.isnan(values)) | (np.isnan(values) & reported)
    if not bad.any():
        return None
    row = int(np.argmax(bad.any(axis=1)))
    column = int(np.argmax(bad[row]))
    update = int(metrics["update"].iloc[row])
    name = columns[column]
    return Finding("non_finite", CRITICAL, f"{name} became non-finite",
                   f"{name} is {values[row, column]} at update {update}", ADVICE_NON_FINITE, update)


def kl_blow_up(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
    """KL passed the study's blow-up threshold."""
    kl = _series(metrics, context.kl_metric)
    above = np.nonzero(kl.values > context.kl_threshold)[0]
    if not len(above):
        return None
    first = int(above[0])
    update = int(kl.updates[first])
    return Finding(
        "kl_blow_up", CRITICAL, "KL above the blow-up threshold",
        f"{context.kl_metric} reached {kl.values[first]:.2f} nats at update {update} "
        f"(threshold {context.kl_threshold:g}; peak {kl.values.max():.2f})", ADVICE_KL_HIGH, update,
    )


def kl_high(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
    """KL stays high (above 10 nats) without passing the threshold; an adaptive target that high is by design."""
    kl = _series(metrics, context.kl_metric)
    if len(kl) < context.window or (kl.values > context.kl_threshold).any():
        return None
    recent = kl.tail(context.window)
    if recent < KL_HIGH_NATS or (context.kl_target is not None and recent <= 1.5 * context.kl_target):
        return None
    return Finding(
        "kl_high", WARNING, "KL is high",
        f"{context.kl_metric} averages {recent:.2f} nats over the last {context.window} updates "
        f"(above {KL_HIGH_NATS:g}; blow-up threshold {context.kl_threshold:g})", ADVICE_KL_HIGH,
        kl.last_update(),
    )


def kl_collapse(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
    """KL fell to zero, or to a small fraction of its peak: the policy is not moving."""
    kl = _series(metrics, context.kl_metric)
    if len(kl) < 2 * context.window:
        return None
    recent, peak = float(np.abs(kl.values[-context.window:]).mean()), float(kl.values.max())
    if recent < KL_ZERO_NATS:
        evidence = f"{context.kl_metric} averages {recent:.4f} nats over the last {context.window} updates"
    elif peak >= 1.0 and recent < KL_COLLAPSE_FRACTION * peak:
        evidence = (f"{context.kl_metric} fell from a peak of {peak:.2f} at update "
                    f"{int(kl.updates[int(np.argmax(kl.values))])} to {recent:.3f} nats over the last "
                    f"{context.window} updates")
    else:
        return None
    return Finding("kl_collapse", WARNING, "KL collapsed to zero", evidence, ADVICE_KL_ZERO, kl.last_update())


def value_loss_diverging(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
    """The value loss grows several-fold from its start and is still rising."""
    loss = _series(metrics, "loss/value_avg")
    if len(loss) < 2 * context.window:
        return None
    start, end = loss.head(context.window), loss.tail(context.window)
    rising = np.polyfit(np.arange(context.window), loss.values[-context.window:], 1)[0] > 0
    if start <= 0 or end < VALUE_LOSS_GROWTH * start or not rising:
        return None
    return Finding(
        "value_loss_diverging", WARNING, "Value loss diverging",
        f"loss/value_avg rose from {start:.3g} (first {context.window} updates) to {end:.3g} "
        f"(last {context.window}), {end / start:.1f}×", ADVICE_VALUE, loss.last_update(),
    )


def entropy_collapse(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
    """The policy's entropy fell to a small fraction of where it started."""
    name = "policy/entropy_avg" if "policy/entropy_avg" in metrics.columns else "objective/entropy"
    entropy = _series(metrics, name)
    if len(entropy) < 2 * context.window:
        return None
    start, end = entropy.head(context.window), entropy.tail(context.window)
    if start <= 0 or end >= ENTROPY_KEPT_FRACTION * start:
        return None
    return Finding(
        "entropy_collapse", WARNING, "Entropy collapsing",
        f"{name} fell from {start:.3g} to {end:.3g} ({(1 - end / start) * 100:.0f}% lower)", ADVICE_ENTROPY,
        entropy.last_update(),
    )


def _step_size_rule(rule: str, name: str, limit: float, sign: str) -> Callable[..., Finding | None]:
    def check(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
        values = _series(metrics, name)
        if len(values) < context.window:
            return None
        recent = values.tail(context.window)
        if recent <= limit:
            return None
        return Finding(rule, WARNING, sign,
                       f"{name} averages {recent:.3g} over the last {context.window} updates (above {limit:g})",
                       ADVICE_STEP_SIZE, values.last_update())

    check.__name__ = rule
    check.__doc__ = f"{sign}: the mean of the last updates is above {limit:g}."
    return check


clipfrac_high = _step_size_rule("clipfrac_high", "policy/clipfrac_avg", CLIPFRAC_HIGH, "Clip fraction too high")
approxkl_high = _step_size_rule("approxkl_high", "policy/approxkl_avg", APPROXKL_HIGH, "Approx-KL too high")


def _rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """The mean of each point and up to ``window - 1`` before it."""
    sums = np.cumsum(np.insert(values, 0, 0.0))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def update_noise(values: np.ndarray) -> float:
    """sigma, the per-update noise of a series, from its update-to-update changes: a steady trend barely moves
    them, so sigma = 1.4826 MAD(diff) / sqrt(2) (the MAD, robust to a few jumps; a difference holds two draws)."""
    changes = np.diff(values)
    if len(changes) == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(changes - np.median(changes))) / np.sqrt(2.0))


def window_difference_error(values: np.ndarray, window: int) -> float:
    """The standard error of the difference of two ``window``-update means of ``values``: sigma sqrt(2 / window)."""
    return update_noise(values) * float(np.sqrt(2.0 / window))


def _times(move: float, error: float) -> str:
    return f"{move / error:.1f}" if error > 0 else "any number of"


def over_optimisation(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
    """The proxy score keeps rising after the gold score peaked and fell back: the reward model is fooled.

    Only when both moves exceed the run's own noise: gold's fall from its peak (of ``window``-update means) and the
    proxy's rise over the same span must each be more than :data:`NOISE_MULTIPLE` standard errors of a difference of
    two such means (:func:`window_difference_error`); the peak of a flat noisy curve is noise, not a peak.
    """
    if "objective/scores" not in metrics.columns or "objective/gold_score" not in metrics.columns:
        return None
    values = _floats(metrics, ["update", "objective/scores", "objective/gold_score"])
    values = values[np.isfinite(values).all(axis=1)]
    if len(values) < 2 * context.window:
        return None
    # Rolling means, so a single noisy update neither makes nor hides a peak.
    proxy, gold = _rolling_mean(values[:, 1], context.window), _rolling_mean(values[:, 2], context.window)
    peak_at = int(np.argmax(gold))
    gain, given_back = float(gold[peak_at] - gold[0]), float(gold[peak_at] - gold[-1])
    rise = float(proxy[-1] - proxy[peak_at])
    if peak_at >= len(gold) - 1 or gain <= 0 or given_back < GOLD_GIVE_BACK * gain or rise <= 0:
        return None
    gold_error = window_difference_error(values[:, 2], context.window)
    proxy_error = window_difference_error(values[:, 1], context.window)
    if given_back <= NOISE_MULTIPLE * gold_error or rise <= NOISE_MULTIPLE * proxy_error:
        return None
    update = int(values[peak_at, 0])
    return Finding(
        "over_optimisation", WARNING, "Proxy score up, gold score down (over-optimisation)",
        f"after update {update} the proxy score rose {proxy[peak_at]:.3g} → {proxy[-1]:.3g} "
        f"while the gold score fell {gold[peak_at]:.3g} → {gold[-1]:.3g} (means of {context.window} updates; the "
        f"fall is {_times(given_back, gold_error)} and the rise {_times(rise, proxy_error)} times its noise, the "
        f"standard error of two such means from the run's update-to-update spread; a finding needs more than "
        f"{NOISE_MULTIPLE:g})",
        f"The policy is exploiting the proxy reward model: prefer the policy from around update {update}. "
        f"{ADVICE_OVER_OPTIMISATION}", update,
    )


def judge_turned(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
    """The held-out proxy score (``eval/score``) kept rising after the held-out judge peaked and fell back by at
    least :data:`GOLD_GIVE_BACK` of its gain: the policy games what it trains on, where a judge it never trains on can
    see it. Read on the evaluations alone (a run evaluates a handful of times, too few to measure their noise), so
    it is a sign to read the samples by, not a verdict."""
    judge = next((m for m in HELD_OUT_JUDGE_METRICS if m in metrics.columns and metrics[m].notna().any()), None)
    if judge is None or EVAL_SCORE not in metrics.columns:
        return None
    values = _floats(metrics, ["update", EVAL_SCORE, judge])
    values = values[np.isfinite(values).all(axis=1)]
    if len(values) < 3:
        return None
    proxy, verdict = values[:, 1], values[:, 2]
    peak_at = int(np.argmax(verdict))
    gain, given_back = float(verdict[peak_at] - verdict[0]), float(verdict[peak_at] - verdict[-1])
    if peak_at >= len(verdict) - 1 or gain <= 0 or given_back < GOLD_GIVE_BACK * gain or proxy[-1] <= proxy[peak_at]:
        return None
    update = int(values[peak_at, 0])
    return Finding(
        "judge_turned", WARNING, f"Proxy up, held-out judge down ({judge})",
        f"after the evaluation at update {update} eval/score rose {proxy[peak_at]:.3g} → {proxy[-1]:.3g} while "
        f"{judge} fell {verdict[peak_at]:.3g} → {verdict[-1]:.3g}, giving back {given_back / gain:.0%} of its gain "
        f"({len(values)} evaluations: too few to measure their noise; read the samples)",
        f"The policy is gaming its reward: prefer the policy from around update {update}. "
        f"{ADVICE_OVER_OPTIMISATION}", update,
    )


def hacking_signs(metrics: pd.DataFrame, context: HealthContext) -> Finding | None:
    """The held-out answers lost their variety since the run's first evaluation: distinct word pairs fell under
    :data:`DISTINCT_KEPT_FRACTION` of their first share, or repeated word triples rose by :data:`REPEATS_RISE` or
    more. Needs no judge: what a policy that games its reward does to its answers."""
    distinct, repeats = _series(metrics, EVAL_DISTINCT_2), _series(metrics, EVAL_REPEATED_3)
    signs = []
    if len(distinct) >= 2 and distinct.values[-1] < DISTINCT_KEPT_FRACTION * distinct.values[0]:
        signs.append(f"distinct word pairs fell {distinct.values[0]:.2f} → {distinct.values[-1]:.2f} "
                     f"({EVAL_DISTINCT_2})")
    if len(repeats) >= 2 and repeats.values[-1] - repeats.values[0] >= REPEATS_RISE:
        signs.append(f"repeated word triples rose {repeats.values[0]:.2f} → {repeats.values[-1]:.2f} "
                     f"({EVAL_REPEATED_3})")
    if not signs:
        return None
    last = max(series.last_update() for series in (distinct, repeats) if len(series))
    return Finding("hacking_signs", WARNING, "Held-out answers repeat themselves",
                   f"from the first evaluation to the one at update {last}: {'; '.join(signs)}", ADVICE_HACKING, last)


RULES: tuple[Callable[[pd.DataFrame, HealthContext], Finding | None], ...] = (
    non_finite, kl_blow_up, kl_high, kl_collapse, value_loss_diverging, entropy_collapse, clipfrac_high,
    approxkl_high, over_optimisation, judge_turned, hacking_signs,
)


def diagnose(metrics: pd.DataFrame, context: HealthContext) -> list[Finding]:
    """Every rule's finding for one trial's metrics (sorted by update), worst first."""
    # The reader's frames are sorted already; sorting again costs more than every rule together.
    ordered = "update" not in metrics.columns or metrics["update"].is_monotonic_increasing
    rows = metrics if ordered else metrics.sort_values("update")
    findings = [f for rule in RULES if (f := rule(rows, context)) is not None]
    return sorted(findings, key=lambda f: SEVERITY_RANK[f.severity])


def diagnose_trials(metrics: pd.DataFrame, contexts: Mapping[int, HealthContext]) -> dict[int, list[Finding]]:
    """Findings for each trial in ``contexts`` (trials without metrics get none)."""
    # Plain labels: the rules look columns up a dozen times per trial, and a lookup in pandas 3's string index costs
    # more (together about a quarter of the rules' time over 200 trials).
    metrics = metrics.set_axis(metrics.columns.astype(object), axis=1)
    groups = dict(tuple(metrics.groupby("trial_number"))) if not metrics.empty else {}
    return {
        number: diagnose(groups[number], context) if number in groups else []
        for number, context in contexts.items()
    }


def worst(findings: list[Finding]) -> str:
    """The worst severity among the findings, or "ok"."""
    return min((f.severity for f in findings), key=SEVERITY_RANK.__getitem__, default="ok")
