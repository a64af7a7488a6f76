"""When to give up on a study: the same error failing several trials in a row means the setup is broken, and more
trials would fail alike."""

from __future__ import annotations

from collections.abc import Sequence

from optuna.trial import FrozenTrial, TrialState

from tuner.store.attrs import FAIL_REASON_ATTR

SAME_FAILURES_TO_STOP = 3
"""Trials in a row that fail with one reason before a study stops; 3 leaves room for a sampled config that fails
on its own (one bad corner of the search space) without running a broken study to its n_trials."""


def failure_streak(trials: Sequence[FrozenTrial], length: int = SAME_FAILURES_TO_STOP) -> str | None:
    """The reason shared by the last ``length`` finished trials (in the order they finished), if all of them failed
    with it; else None. A trial without a recorded reason counts as "no reason recorded"."""
    finished = sorted((t for t in trials if t.state.is_finished() and t.datetime_complete is not None),
                      key=lambda t: t.datetime_complete)  # type: ignore[arg-type, return-value]
    last = finished[-length:]
    if len(last) < length or any(t.state != TrialState.FAIL for t in last):
        return None
    reasons = {str(t.user_attrs.get(FAIL_REASON_ATTR) or "no reason recorded") for t in last}
    return reasons.pop() if len(reasons) == 1 else None
