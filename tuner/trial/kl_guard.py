"""KLGuardPruner: stop trials whose KL blows up, composed with any Optuna pruner on the objective.

A trial is stopped when
1. a reported metric is not finite;
2. KL's level, the mean of its last ``window`` updates, passes the threshold (default
   ``tuner.store.attrs.DEFAULT_KL_THRESHOLD`` nats);
3. with ``predict``, once the level has reached ``predict_min_fraction`` of the threshold (so early, harmless growth
   from 0 is not extrapolated), the forecast of a least-squares line through KL's last ``window`` updates, ``window``
   updates ahead (no further than the trial's budget), is above the threshold even at its lower confidence bound
   (``confidence``, one-sided), at ``confirmations`` updates running.

Why a level, a forecast's bound, a short horizon and a confirmation, rather than the last value and the fitted slope
to the end of the run: one rollout's KL estimate is noisy (on the quickstart's task, single updates of runs that end at
1-2 nats of held-out KL reach 3-5 nats); a line through five noisy points, extrapolated over the rest of a long run,
predicts crossings that never come; and the guard asks again at every update, so a rule wrong one time in twenty is
wrong at least once in most runs of a hundred updates. Read the old way, the guard stopped 64 of the 603 runs of the
first curve table that ended within the study's KL budget, and 4 of the 16 runs of task seed 2's best configurations
(``python -m benchmarks.kl_guard_audit``, benchmarks/README.md).

The KL history travels on the trial as user attributes (``kl_history``, ``budget_updates``,
``non_finite_metric``), so the pruner works from any process reading the shared storage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial

from tuner.store.attrs import BUDGET_ATTR, KL_HISTORY_ATTR, NON_FINITE_ATTR, RACE_OF_ATTR
from tuner.study.spec import KLGuard
from tuner.study.student_t import t_quantile


def least_squares_slope(values: Sequence[float]) -> float:
    """slope b = sum (x - x_mean)(y - y_mean) / sum (x - x_mean)^2 with x = 0, 1, ..., n-1."""
    n = len(values)
    x_mean = (n - 1) / 2
    y_mean = sum(values) / n
    numerator = sum((x - x_mean) * (y - y_mean) for x, y in enumerate(values))
    denominator = sum((x - x_mean) ** 2 for x in range(n))
    return numerator / denominator


def forecast_lower_bound(values: Sequence[float], ahead: int, confidence: float) -> float:
    """The least-squares line through ``values`` (at x = 0, 1, ..., n-1) at x0 = n - 1 + ahead, at the one-sided lower
    confidence bound of that mean response:

        y_hat(x0) - t_{confidence, n-2} * s * sqrt(1/n + (x0 - x_mean)^2 / sum (x - x_mean)^2),
        s^2 = sum (y - y_hat(x))^2 / (n - 2).

    -inf when n < 3: no degree of freedom is left to measure the noise with."""
    n = len(values)
    if n < 3:
        return -math.inf
    slope = least_squares_slope(values)
    x_mean, y_mean = (n - 1) / 2, sum(values) / n
    spread = sum((x - x_mean) ** 2 for x in range(n))
    noise = sum((y - (y_mean + slope * (x - x_mean))) ** 2 for x, y in enumerate(values)) / (n - 2)
    x0 = n - 1 + ahead
    forecast = y_mean + slope * (x0 - x_mean)
    return forecast - t_quantile(confidence, n - 2) * math.sqrt(noise * (1 / n + (x0 - x_mean) ** 2 / spread))


def kl_level(kl_history: Sequence[float], window: int) -> float:
    """The mean of the last ``window`` values (of all, when fewer): what the threshold is held against."""
    recent = kl_history[-window:]
    return sum(recent) / len(recent)


def _trend_forecast(kl_history: Sequence[float], budget_updates: int, guard: KLGuard) -> tuple[int, float] | None:
    """(updates ahead, the forecast's lower bound) when the trend over the last ``window`` updates crosses the
    threshold within them, else None (see the module docstring, rule 3)."""
    update = len(kl_history)
    ahead = min(budget_updates - update, guard.window)
    if update < max(guard.min_updates, guard.window) or ahead <= 0 \
            or kl_level(kl_history, guard.window) < guard.predict_min_fraction * guard.threshold:
        return None
    bound = forecast_lower_bound(kl_history[-guard.window:], ahead, guard.confidence)
    return (ahead, bound) if bound > guard.threshold else None


def blowup_reason(kl_history: Sequence[float], budget_updates: int, guard: KLGuard,
                  update: int | None = None) -> str | None:
    """Why a trial with this KL history (one value per update so far) must stop, or None. ``update``, when given,
    is the update the last value came from, for the message (a metric reported at evaluations only has fewer
    values than updates)."""
    if not guard.enabled or not kl_history:
        return None
    update, kl = update or len(kl_history), kl_history[-1]
    if not math.isfinite(kl):
        return f"{guard.metric} is {kl} at update {update}"
    level = kl_level(kl_history, guard.window)
    if level > guard.threshold:
        values = min(len(kl_history), guard.window)
        return (f"{guard.metric} {level:.2f} (mean of the last {values} updates) passed the "
                f"threshold {guard.threshold:g} at update {update}")
    if not guard.predict:
        return None
    forecasts = [_trend_forecast(kl_history[:len(kl_history) - back], budget_updates, guard)
                 for back in range(guard.confirmations)]
    if all(forecasts) and forecasts[0] is not None:
        ahead, bound = forecasts[0]
        slope = least_squares_slope(kl_history[-guard.window:])
        return (f"{guard.metric} trend +{slope:.2f}/update from {level:.2f} at update {update} crosses "
                f"{guard.threshold:g} by update {update + ahead} of {budget_updates} (at least {bound:.2f} at "
                f"{guard.confidence:.0%} confidence, {guard.confirmations} updates running)")
    return None


class KLGuardPruner(BasePruner):
    """Prunes on KL blow-up or non-finite metrics, then defers to ``inner`` (e.g. MedianPruner) if given.

    Example::

        pruner = KLGuardPruner(KLGuard(threshold=15.0), inner=optuna.pruners.MedianPruner())
        study = optuna.create_study(pruner=pruner)
    """

    def __init__(self, guard: KLGuard, inner: BasePruner | None = None) -> None:
        self.guard = guard
        self.inner = inner

    def reason(self, trial: FrozenTrial) -> str | None:
        """The KL guard's verdict on a trial, from the attributes its worker reported."""
        non_finite = trial.user_attrs.get(NON_FINITE_ATTR)
        if non_finite:
            return str(non_finite)
        history = [float(v) for v in trial.user_attrs.get(KL_HISTORY_ATTR, [])]
        return blowup_reason(history, int(trial.user_attrs.get(BUDGET_ATTR, len(history))), self.guard)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if self.reason(trial) is not None:
            return True
        if RACE_OF_ATTR in trial.user_attrs:
            # A racing re-run runs to its end (the KL guard still stops a blow-up): the race compares final values,
            # and a re-run the pruner stopped would leave its configuration short of seeds for good.
            return False
        return self.inner is not None and self.inner.prune(study, trial)
