"""What to try next for a study (dashboard.advice): real Optuna trials carrying the tuner's attributes, metrics that
trip the real health rules, and the items they add up to, in the guidance's order with the patterns behind them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
import pandas as pd
import pytest
from helpers.frontier_paths import peaked_paths

from dashboard import health_rules
from dashboard.advice import (
    ADVICE_OF,
    EPOCHS_CLIP,
    GROUP_OF,
    GROUPS,
    KL,
    LR_BATCH,
    Advice,
    knob_pattern,
    separation_needed,
    study_advice,
)
from dashboard.health_rules import ADVICE_KL_HIGH, ADVICE_STEP_SIZE, CRITICAL, HealthContext, diagnose_trials
from dashboard.study_reader import Snapshot, StudyRef, StudyView, build_study_view
from tuner.search.peak_reading import read_peak
from tuner.store.attrs import CONFIG_ATTR, KL_GUARD_ATTR, KL_HISTORY_ATTR, PRUNE_REASON_ATTR, SPEC_ATTR
from tuner.study.constraints import Constraint, constraint_values

N_TRIALS = 20
UPDATES = 30
# Learning rates in the searched range 1e-6..1e-4: 4 at its lower bound, the best (the objective favours the slowest
# learners), so the best trials crowd that bound; 12 spread over 2e-6..3e-5; and 4 near the top, which blow KL up.
LEARNING_RATES = [1e-6, 1.1e-6, 1.2e-6, 1.3e-6] + [2e-6 * 15 ** (i / 11) for i in range(12)] + [7e-5, 8e-5, 9e-5, 1e-4]
EPOCHS = [2 + (7 * i) % 9 for i in range(N_TRIALS)]
KL_BUDGET = Constraint("objective/kl", "max", k=1, max=5.0)


def healthy(n: int = UPDATES) -> dict[str, np.ndarray]:
    """A run with nothing wrong: KL grows to a few nats, losses fall, entropy dips a little."""
    steps = np.arange(1, n + 1, dtype=float)
    return {
        "objective/kl": 4 * (1 - np.exp(-steps / 10)),
        "objective/scores": 1 - np.exp(-steps / 8),
        "loss/value_avg": 0.5 * np.exp(-steps / 10) + 0.05,
        "loss/policy_avg": np.zeros(n),
        "policy/entropy_avg": 2.0 - 0.02 * steps,
        "policy/clipfrac_avg": np.full(n, 0.1),
        "policy/approxkl_avg": np.full(n, 0.01),
    }


def run_metrics(number: int, blow_up: bool, clips: bool) -> pd.DataFrame:
    columns = healthy()
    if blow_up:  # past the default 20-nat threshold: kl_blow_up
        columns["objective/kl"] = np.linspace(0.5, 25.0, UPDATES)
    if clips:  # clipfrac_high
        columns["policy/clipfrac_avg"] = np.full(UPDATES, 0.5)
    return pd.DataFrame({"trial_number": number, "update": np.arange(1, UPDATES + 1), **columns})


def make_study(blow_ups: set[int], clipping: set[int]) -> tuple[optuna.Study, pd.DataFrame]:
    """A study of N_TRIALS real trials searched over learning_rate and num_ppo_epochs, each with its config, KL
    history and KL-budget constraint as the tuner records them, and the metrics of each run."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(SPEC_ATTR, {"search_space": {
        "learning_rate": {"type": "float", "low": 1e-6, "high": 1e-4, "log": True},
        "num_ppo_epochs": {"type": "int", "low": 2, "high": 10},
    }})
    frames = []
    for number in range(N_TRIALS):
        study.enqueue_trial({"learning_rate": LEARNING_RATES[number], "num_ppo_epochs": EPOCHS[number]})
        frames.append(run_metrics(number, number in blow_ups, number in clipping))

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("learning_rate", 1e-6, 1e-4, log=True)
        epochs = trial.suggest_int("num_ppo_epochs", 2, 10)
        trial.set_user_attr(CONFIG_ATTR, {"learning_rate": lr, "num_ppo_epochs": epochs, "kl_coef": 0.05,
                                          "kl_target": None, "cliprange": 0.2, "vf_coef": 0.1, "seed": 0})
        kl = frames[trial.number]["objective/kl"].tolist()
        trial.set_user_attr(KL_HISTORY_ATTR, kl)
        for key, value in constraint_values(KL_BUDGET, max(kl)).items():
            trial.set_constraint(key, value)
        return -math.log10(lr)  # the slowest learners score best

    study.optimize(objective, n_trials=N_TRIALS)
    return study, pd.concat(frames, ignore_index=True)


def advise(study: optuna.Study, metrics: pd.DataFrame) -> tuple[StudyView, list[Advice]]:
    """The study as the dashboard reads it, its findings through the real health rules, and the advice."""
    trials = tuple(study.get_trials(deepcopy=False))
    view = build_study_view(StudyRef("sqlite:///memory.db", "advice"),
                            Snapshot("token", study, trials, study.user_attrs, {}))
    findings = diagnose_trials(metrics, {n: HealthContext() for n in view.numbers})
    # The constraint values as the Health page passes them: read with the rest of the view, not from the trials again.
    assert view.constraint_values == {t.number: t.constraints for t in trials if t.constraints}
    return view, study_advice(view, findings, view.constraint_values)


@pytest.fixture(scope="module")
def patterned() -> tuple[StudyView, list[Advice]]:
    fastest = {i for i, lr in enumerate(LEARNING_RATES) if lr >= 7e-5}
    many_epochs = {i for i, epochs in enumerate(EPOCHS) if epochs >= 8}
    return advise(*make_study(fastest, many_epochs))


def test_items_follow_the_guidance_order_kl_then_learning_rate_then_epochs(
    patterned: tuple[StudyView, list[Advice]],
) -> None:
    _, advice = patterned
    assert [item.group for item in advice] == [KL, KL, LR_BATCH, EPOCHS_CLIP]
    blow_up, budget, edge, clipping = advice
    # Within a group the worst sign first: the blow-up is critical, the broken budget a warning.
    assert blow_up.severity == CRITICAL and blow_up.action == ADVICE_KL_HIGH
    assert budget.what.startswith("Constraint objective/kl (max) <= 5 broken")
    assert "lower bound of learning_rate" in edge.what and edge.action.startswith("Widen learning_rate below 1e-06")
    assert edge.evidence.startswith("learning_rate: the best 4 of 16 trials")  # the feasible ones
    assert clipping.action == ADVICE_STEP_SIZE


def test_each_item_counts_its_trials_and_names_the_setting_they_share(
    patterned: tuple[StudyView, list[Advice]],
) -> None:
    _, advice = patterned
    blow_up, budget, _, clipping = advice
    assert blow_up.what == f"KL above the blow-up threshold in 4 of {N_TRIALS} trials"
    assert blow_up.evidence == "#16, #17, #18, #19; all 4 had learning_rate ≥ 7e-05, against none of the 16 others"
    # The budget broken by the same four runs, by their peak KL of 25 nats less the budget of 5.
    assert budget.evidence.startswith("by up to 20: #16, #17, #18, #19; all 4 had learning_rate ≥ 7e-05")
    many = sum(e >= 8 for e in EPOCHS)
    assert clipping.what == f"Clip fraction too high in {many} of {N_TRIALS} trials"
    assert f"all {many} had num_ppo_epochs ≥ 8, against none of the {N_TRIALS - many} others" in clipping.evidence


def test_no_pattern_is_claimed_where_the_affected_trials_are_spread_out() -> None:
    ranked = sorted(range(N_TRIALS), key=lambda i: LEARNING_RATES[i])
    spread = {ranked[i] for i in (2, 7, 12, 17)}  # every fifth learning rate: nothing sets them apart
    _, advice = advise(*make_study(spread, set()))
    blow_up = next(item for item in advice if item.what.startswith("KL above the blow-up threshold"))
    assert blow_up.what.endswith("in 4 of 20 trials")
    assert blow_up.evidence.endswith("no clear pattern in learning_rate")


def test_one_trial_is_a_count_not_a_pattern() -> None:
    _, advice = advise(*make_study({19}, set()))
    blow_up = next(item for item in advice if item.what.startswith("KL above the blow-up threshold"))
    # Even perfectly apart (the highest learning rate of all), one trial is shown with its settings, not as a rule.
    assert blow_up.evidence == "#19 with learning_rate = 0.0001"
    assert separation_needed(1, N_TRIALS - 1) > 1


@pytest.mark.parametrize(("values", "affected", "expected"), [
    # A threshold below which every affected trial lies.
    ([0.01, 0.012, 0.015, 0.05, 0.08, 0.1, 0.2, 0.15], [1, 1, 1, 0, 0, 0, 0, 0], ("≤", 0.015, 3, 0)),
    # The threshold is the extreme affected value, so the others on its side are counted exactly.
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [0, 0, 0, 0, 0, 1, 0, 1, 1, 1], ("≥", 6.0, 4, 1)),
    # A category.
    (["fixed", "adaptive", "fixed", "adaptive", "adaptive", "fixed"], [1, 0, 1, 0, 0, 0], ("=", "fixed", 2, 1)),
])
def test_knob_pattern_finds_the_widest_split(
    values: Sequence[Any], affected: Sequence[int], expected: tuple[str, Any, int, int],
) -> None:
    pattern = knob_pattern("knob", pd.Series(values), pd.Series(affected, dtype=bool))
    assert pattern is not None
    assert (pattern.relation, pattern.bound, pattern.hits, pattern.other_hits) == expected


def test_a_knob_the_affected_trials_did_not_use_is_compared_among_those_that_did() -> None:
    # kl_target is missing under a fixed coefficient: only the adaptive trials are compared.
    values = pd.Series([3.0, 3.5, 4.0, 9.0, 10.0, 11.0, math.nan, math.nan])
    pattern = knob_pattern("kl_target", values, pd.Series([0, 0, 0, 1, 1, 1, 1, 0], dtype=bool))
    assert pattern is not None and (pattern.affected, pattern.others) == (3, 3)
    assert pattern.text(4) == "all 3 that used kl_target had kl_target ≥ 9, against none of the 3 others that did"


def test_every_health_rule_has_a_group_and_its_advice() -> None:
    # A new rule without an entry would fall to "Other" and lose its pattern.
    for rule in health_rules.RULES:
        assert GROUP_OF[rule.__name__] in GROUPS and rule.__name__ in ADVICE_OF
    assert GROUPS[0] == KL  # the guidance: "Prioritize KL Control"


def test_trials_the_kl_guard_stopped_on_its_trend_are_a_kl_item() -> None:
    """The guard's prediction stops a trial before KL passes the threshold, so no health rule sees it; the advice
    does, from the reason the real guard writes."""
    from tuner.study.study_file import KLGuard
    from tuner.trial.kl_guard import blowup_reason

    guard = KLGuard(threshold=6.0, predict=True, window=5, predict_min_fraction=0.5)
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(KL_GUARD_ATTR, {"threshold": guard.threshold, "metric": guard.metric})
    frames = []
    for number, lr in enumerate(LEARNING_RATES):
        study.enqueue_trial({"learning_rate": lr})
        climbing = lr >= 7e-5  # KL climbs 0.3 nats an update: stopped on its trend at 3 nats, long before 6
        kl = [0.3 * u if climbing else 0.05 * u for u in range(1, UPDATES + 1)]
        frames.append(pd.DataFrame({"trial_number": number, "update": np.arange(1, UPDATES + 1),
                                    **healthy(), "objective/kl": kl}))

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("learning_rate", 1e-6, 1e-4, log=True)
        trial.set_user_attr(CONFIG_ATTR, {"learning_rate": lr, "kl_coef": 0.05, "kl_target": None})
        history = frames[trial.number]["objective/kl"].tolist()
        for update in range(1, UPDATES + 1):
            reason = blowup_reason(history[:update], UPDATES, guard)
            if reason is not None:
                trial.set_user_attr(PRUNE_REASON_ATTR, reason)
                raise optuna.TrialPruned(reason)
        return 1.0

    study.optimize(objective, n_trials=N_TRIALS)
    stopped = [t.number for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert stopped == [16, 17, 18, 19]
    _, items = advise(study, pd.concat(frames, ignore_index=True))
    (item,) = [i for i in items if "stopped on the trend" in i.what]
    assert item.group == KL and item.count == 4 and item.action == ADVICE_KL_HIGH
    assert item.what.startswith("KL heading past the guard's 6 nats: 4 of 20 trials")
    assert "#16, #17, #18, #19" in item.evidence and "all 4 had learning_rate ≥ 7e-05" in item.evidence
    assert not [i for i in items if i.what.startswith("KL passed")]  # no health rule saw them


def test_where_the_studys_gold_peaks_the_kl_advice_speaks_of_that_kl(
    patterned: tuple[StudyView, list[Advice]],
) -> None:
    view, _ = patterned
    findings = diagnose_trials(pd.concat([run_metrics(n, n >= 16, False) for n in view.numbers], ignore_index=True),
                               {n: HealthContext() for n in view.numbers})
    # Gold along 8 trials' paths, peaking at 2 nats: the reading the Frontier page shows.
    numbers, kls, golds = peaked_paths(np.geomspace(0.5, 12.0, 8), 2.0, top=0.7, curvature=0.05)
    reading = read_peak(pd.DataFrame({"trial": numbers, "kl": kls, "gold": golds}))
    peak = reading.peak
    assert reading.found and 1.6 < peak.kl < 2.5, reading
    advice = study_advice(view, findings, {}, reading)
    kl_items = [item for item in advice if item.group == KL]
    (blow_up,) = [item for item in kl_items if item.what.startswith("KL above the blow-up threshold")]
    assert "15–20" not in blow_up.action and f"peaks at {peak.kl:.3g} nats" in blow_up.action
    (aim,) = [item for item in kl_items if item.what == f"Gold peaks at {peak.kl:.3g} nats of KL"]
    assert f"kl_target (with the adaptive controller) near {peak.kl:.3g}" in aim.action
    assert "read from 64 evaluations of 8 trials" in aim.evidence
    # No peak read (gold still rising, or no gold at all): the guidance's figure, and no item about a peak.
    rising = read_peak(pd.DataFrame({"trial": numbers, "kl": [k / 20 for k in kls], "gold": kls}))
    for unread in (None, rising):
        items = study_advice(view, findings, {}, unread)
        assert [i.action for i in items if i.what.startswith("KL above")] == [ADVICE_KL_HIGH]
        assert not [i for i in items if i.what.startswith("Gold peaks")]
