"""KLGuardPruner: stop trials whose KL blows up, composed with any Optuna pruner on the objective.

A trial is stopped when
1. a reported metric is not finite;
2. KL passes the threshold (default ``tuner.attrs.DEFAULT_KL_THRESHOLD`` nats);
3. a least-squares line through KL's last ``window`` updates crosses the threshold before the trial's
   budget ends, once KL has reached ``predict_min_fraction`` of the threshold (so early, harmless
   growth from 0 is not extrapolated).

The KL history travels on the trial as user attributes (``kl_history``, ``budget_updates``,
``non_finite_metric``), so the pruner works from any process reading the shared storage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial

from tuner.attrs import BUDGET_ATTR, KL_HISTORY_ATTR, NON_FINITE_ATTR, RACE_OF_ATTR
from tuner.study_spec import KLGuard


def least_squares_slope(values: Sequence[float]) -> float:
    """slope = sum (x - x_mean)(y - y_mean) / sum (x - x_mean)^2 with x = 0, 1, ..., n-1."""
    n = len(values)
    x_mean = (n - 1) / 2
    y_mean = sum(values) / n
    numerator = sum((x - x_mean) * (y - y_mean) for x, y in enumerate(values))
    denominator = sum((x - x_mean) ** 2 for x in range(n))
    return numerator / denominator


def blowup_reason(kl_history: Sequence[float], budget_updates: int, guard: KLGuard) -> str | None:
    """Why a trial with this KL history (one value per update so far) must stop, or None."""
    if not guard.enabled or not kl_history:
        return None
    update, kl = len(kl_history), kl_history[-1]
    if not math.isfinite(kl):
        return f"{guard.metric} is {kl} at update {update}"
    if kl > guard.threshold:
        return f"{guard.metric} {kl:.2f} passed the threshold {guard.threshold:g} at update {update}"
    if guard.predict and update >= max(guard.min_updates, guard.window) and kl >= guard.predict_min_fraction \
            * guard.threshold:
        slope = least_squares_slope(kl_history[-guard.window:])
        remaining = budget_updates - update
        if slope > 0 and remaining > 0 and kl + slope * remaining > guard.threshold:
            crossing = update + math.ceil((guard.threshold - kl) / slope)
            return (f"{guard.metric} trend +{slope:.2f}/update from {kl:.2f} at update {update} "
                    f"crosses {guard.threshold:g} by update {crossing} of {budget_updates}")
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
