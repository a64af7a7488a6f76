"""What early stopping saved (tuner.run.savings): the updates pruned trials did not run, against every trial run to its
end, in ``ppo-tune show`` and from a real study's trials."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from ppo_tune.cli import main
from tuner.run.savings import update_savings
from tuner.store.attrs import BUDGET_ATTR, CONFIG_ATTR, KL_HISTORY_ATTR
from tuner.study.reports import trials_frame

TRIALS = [  # (state, budget, updates run)
    ("COMPLETE", 10, 10), ("PRUNED", 10, 3), ("PRUNED", 20, 5), ("FAIL", 10, 2), ("COMPLETE", 20, 20),
]


def _reference(rows: list[tuple[str, int, int]]) -> tuple[int, int, int, int]:
    """(saved, planned, stopped, counted) by a loop: only completed and pruned trials count."""
    saved = planned = stopped = counted = 0
    for state, budget, ran in rows:
        if state not in ("COMPLETE", "PRUNED"):
            continue
        counted += 1
        planned += budget
        saved += budget - min(ran, budget)
        stopped += state == "PRUNED"
    return saved, planned, stopped, counted


def test_savings_against_a_loop() -> None:
    frame = pd.DataFrame([{"state": s, "budget_updates": b, "updates": u} for s, b, u in TRIALS])
    savings = update_savings(frame)
    assert savings is not None
    assert (savings.saved, savings.planned, savings.stopped, savings.trials) == _reference(TRIALS)
    assert savings.line().startswith(f"early stopping saved 22 of 60 updates ({22 / 60:.0%})")


def test_savings_in_episodes_and_seconds_against_a_loop() -> None:
    rollouts = [16, 32, 16, 16, float("nan")]  # the last trial stored no config
    seconds = [20.0, 6.0, 8.0, 3.0, 40.0]
    frame = pd.DataFrame([{"state": s, "budget_updates": b, "updates": u, "episodes_per_update": r, "duration_s": d}
                          for (s, b, u), r, d in zip(TRIALS, rollouts, seconds, strict=True)])
    savings = update_savings(frame)
    assert savings is not None
    episodes = pace = 0.0
    for (state, budget, ran), rollout, duration in zip(TRIALS, rollouts, seconds, strict=True):
        if state in ("COMPLETE", "PRUNED"):
            episodes += 0 if math.isnan(rollout) else (budget - ran) * rollout
            pace += (budget - ran) * duration / ran
    # Pruned at 3 of 10 at 32 episodes an update, and at 5 of 20 at 16: 7 x 32 + 15 x 16 episodes.
    assert savings.episodes == pytest.approx(episodes) == 7 * 32 + 15 * 16
    assert savings.seconds == pytest.approx(pace) == pytest.approx(7 * 6 / 3 + 15 * 8 / 5)
    assert savings.line().endswith(f"; about {episodes:,.0f} episodes and {pace:,.0f} s at each trial's own pace")


def test_no_recorded_budget_says_nothing() -> None:
    assert update_savings(pd.DataFrame()) is None
    frame = pd.DataFrame([{"state": "PRUNED", "budget_updates": math.nan, "updates": 3}])
    assert update_savings(frame) is None


@pytest.fixture
def stored(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'savings.db'}"
    study = optuna.create_study(storage=url, study_name="savings", direction="maximize")
    for state, budget, ran in TRIALS:
        study.add_trial(create_trial(
            state=TrialState[state], value=1.0 if state == "COMPLETE" else None,
            params={"learning_rate": 1e-5}, distributions={"learning_rate": FloatDistribution(1e-6, 1e-4)},
            user_attrs={BUDGET_ATTR: budget, KL_HISTORY_ATTR: [0.1] * ran,
                        CONFIG_ATTR: {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2}}))
    return url


def test_show_says_what_early_stopping_saved(stored: str, capsys: pytest.CaptureFixture[str]) -> None:
    frame = trials_frame(optuna.load_study(study_name="savings", storage=stored))
    assert frame["budget_updates"].tolist() == [b for _, b, _ in TRIALS]
    assert frame["episodes_per_update"].tolist() == [16.0] * len(TRIALS)
    assert main(["show", "savings", "--storage", stored]) == 0
    out = capsys.readouterr().out
    assert "early stopping saved 22 of 60 updates" in out and "2 of 4 trials pruned" in out
    assert f"about {22 * 16} episodes" in out
