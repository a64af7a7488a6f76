"""Edge-of-range findings: the best trials crowding against a bound of a searched range, on real Optuna trials, and
``ppo-tune show`` printing them from the study's stored definition."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState, create_trial

from ppo_tune.cli import main
from tuner.store.attrs import KL_HISTORY_ATTR, SPEC_ATTR
from tuner.study.edge_findings import EdgeFinding, edge_findings, format_edge_findings, position
from tuner.study.stored_spec import read_stored_spec
from tuner.study.study_file import parse_param

RAW_SPACE = {
    "learning_rate": {"type": "float", "low": 1e-6, "high": 5e-5, "log": True},
    "cliprange": {"type": "float", "low": 0.1, "high": 0.3},
    "num_ppo_epochs": {"type": "int", "low": 2, "high": 10},
    "kl_control": {"type": "categorical", "choices": ["fixed", "adaptive"]},
    "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
}
SPACE = {name: parse_param(name, raw) for name, raw in RAW_SPACE.items()}
DISTRIBUTIONS = {
    "learning_rate": FloatDistribution(1e-6, 5e-5, log=True), "cliprange": FloatDistribution(0.1, 0.3),
    "num_ppo_epochs": IntDistribution(2, 10), "kl_control": CategoricalDistribution(("fixed", "adaptive")),
    "kl_coef": FloatDistribution(0.01, 0.2, log=True),
}
MAXIMIZE = [StudyDirection.MAXIMIZE]
# Within 10% of the range's width of 5e-5 in log space (position 0.97), though not linearly (0.898): a finding
# only when measured in log space, as a log-scale parameter is searched.
NEAR_TOP = 4.5e-5
MIDDLE = 7e-6  # position 0.5


def complete(value: float, state: TrialState = TrialState.COMPLETE, constraints: dict[str, float] | None = None,
             **params: Any) -> FrozenTrial:
    params = {"learning_rate": MIDDLE, "cliprange": 0.2, "num_ppo_epochs": 6, "kl_control": "fixed",
              "kl_coef": 0.045, **params}
    params = {name: value for name, value in params.items() if value is not None}
    return create_trial(state=state, value=value if state == TrialState.COMPLETE else None, params=params,
                        distributions={name: DISTRIBUTIONS[name] for name in params}, constraints=constraints)


def study_of(best_learning_rates: list[float], others: int = 24) -> list[FrozenTrial]:
    """``others`` middling trials, then one better trial for each learning rate given (the first the best)."""
    trials = [complete(0.1 * i / others) for i in range(others)]
    return trials + [complete(10.0 - i, learning_rate=lr) for i, lr in enumerate(best_learning_rates)]


@pytest.mark.parametrize(("spec", "value", "where"), [
    ("cliprange", 0.1, 0.0), ("cliprange", 0.3, 1.0), ("cliprange", 0.15, 0.25),
    ("learning_rate", 1e-6, 0.0), ("learning_rate", 5e-5, 1.0),
    # Measured in log space: 3.4e-5 is 69% of the way linearly, 90% in log terms.
    ("learning_rate", 3.4e-5, math.log(34) / math.log(50)),
])
def test_position(spec: str, value: float, where: float) -> None:
    assert math.isclose(position(SPACE[spec], value), where, abs_tol=1e-12)


def test_the_best_trials_at_the_upper_bound_are_a_finding() -> None:
    (finding,) = edge_findings(study_of([NEAR_TOP] * 6), SPACE, MAXIMIZE)
    assert finding == EdgeFinding("learning_rate", "high", 5e-5, near=6, top=6, ranked=30, margin=0.1)
    assert finding.message == ("learning_rate: the best 6 of 30 trials lie within 10% of the upper bound 5e-05; "
                               "widen the range above it")
    assert finding.advice == "widen learning_rate above 5e-05"


@pytest.mark.parametrize(("best", "found"), [
    ([NEAR_TOP] * 5 + [MIDDLE], True),  # 5 of 6: at least 80%
    ([NEAR_TOP] * 4 + [MIDDLE] * 2, False),  # 4 of 6
    ([MIDDLE] + [NEAR_TOP] * 5, True),  # the very best elsewhere does not hide the edge
    ([3.2e-5] * 6, False),  # 89% of the way in log space: not within 10% of the bound
])
def test_at_least_80_percent_of_the_best_trials(best: list[float], found: bool) -> None:
    findings = edge_findings(study_of(best), SPACE, MAXIMIZE)
    assert bool(findings) == found
    if found:
        assert findings[0].message.startswith("learning_rate: 5 of the best 6 of 30 trials lie within 10%")


def test_a_finding_names_the_final_kl_band_of_the_best_trials() -> None:
    trials = study_of([NEAR_TOP] * 6)
    for kl, trial in zip([1.9, 1.1, 1.4, 1.6, math.nan, 1.2], trials[-6:], strict=True):
        trial.user_attrs[KL_HISTORY_ATTR] = [0.1, 0.8, kl] if math.isfinite(kl) else [0.2, 1.3, kl]
    trials[0].user_attrs[KL_HISTORY_ATTR] = [9.0]  # not among the best: not in the band
    (finding,) = edge_findings(trials, SPACE, MAXIMIZE)
    # The trial whose last KL is not finite counts by its last finite one (1.3).
    assert finding.kl_band == (1.1, 1.9)
    assert finding.message.endswith("widen the range above it (the best trials end at 1.1 to 1.9 nats of KL)")


def test_lower_bounds_ints_and_minimizing() -> None:
    # Lower is better: the six lowest values all ran 2 epochs (the low end) at a clip range of 0.29-0.3 (the top).
    trials = [complete(1.0 + i) for i in range(20)] + [complete(0.1 * i, num_ppo_epochs=2, cliprange=0.29)
                                                       for i in range(5)]
    findings = edge_findings(trials, SPACE, [StudyDirection.MINIMIZE])
    assert [(f.param, f.bound, f.value, f.near, f.top) for f in findings] == [
        ("cliprange", "high", 0.3, 5, 5), ("num_ppo_epochs", "low", 2, 5, 5)]
    assert findings[1].message.endswith("of the lower bound 2; widen the range below it")
    assert edge_findings(trials, SPACE, MAXIMIZE) == []  # the other way round, the best are the middling ones


def test_too_few_trials_say_nothing() -> None:
    assert edge_findings([complete(float(i), learning_rate=NEAR_TOP) for i in range(4)], SPACE, MAXIMIZE) == []
    # Five completed trials are enough; the best 3 of them are taken (20% of 5 is 1, below the least of 3).
    (finding,) = edge_findings([complete(float(i), learning_rate=NEAR_TOP) for i in range(5)], SPACE, MAXIMIZE)
    assert (finding.top, finding.ranked) == (3, 5)


def test_only_completed_feasible_trials_count_and_unused_parameters_are_skipped() -> None:
    trials = study_of([MIDDLE] * 6)
    # Better values, but pruned, failed or over a constraint: not among the best.
    trials += [complete(20.0, state=TrialState.PRUNED, learning_rate=NEAR_TOP),
               complete(21.0, state=TrialState.FAIL, learning_rate=NEAR_TOP)]
    trials += [complete(22.0 + i, constraints={"kl": 1.0}, learning_rate=NEAR_TOP) for i in range(6)]
    assert edge_findings(trials, SPACE, MAXIMIZE) == []
    # The best 5 of 25: kl_coef at its low end in every one that used it, but only two fixed β: too few to judge.
    middling = [complete(0.1 * i) for i in range(20)]
    best = [complete(30.0 + i, kl_control="adaptive", kl_coef=None) for i in range(3)]
    best += [complete(40.0 + i, kl_coef=0.0101) for i in range(2)]
    assert edge_findings(middling + best, SPACE, MAXIMIZE) == []
    best = [complete(30.0 + i, kl_control="adaptive", kl_coef=None) for i in range(2)]
    best += [complete(40.0 + i, kl_coef=0.0101) for i in range(3)]
    (finding,) = edge_findings(middling + best, SPACE, MAXIMIZE)
    assert (finding.param, finding.bound, finding.near, finding.top, finding.ranked) == ("kl_coef", "low", 3, 3, 25)


def test_several_objectives_rank_by_the_first() -> None:
    trials = [create_trial(state=TrialState.COMPLETE, values=[v, -v], params={"learning_rate": lr},
                           distributions={"learning_rate": DISTRIBUTIONS["learning_rate"]})
              for v, lr in [(float(i), MIDDLE) for i in range(20)] + [(100.0 + i, NEAR_TOP) for i in range(5)]]
    (finding,) = edge_findings(trials, SPACE, [StudyDirection.MAXIMIZE, StudyDirection.MINIMIZE])
    assert finding.param == "learning_rate" and finding.top == 5


def test_format_and_stored_search_space() -> None:
    assert format_edge_findings([]) == ""
    text = format_edge_findings(edge_findings(study_of([NEAR_TOP] * 6), SPACE, MAXIMIZE))
    assert text.splitlines()[1] == "  learning_rate: the best 6 of 30 trials lie within 10% of the upper bound " \
                                   "5e-05; widen the range above it"
    assert read_stored_spec({SPEC_ATTR: {"search_space": RAW_SPACE}}, 1).search_space == SPACE
    assert read_stored_spec({}, 1).search_space == {}
    broken = {"cliprange": RAW_SPACE["cliprange"], "lam": {"type": "uniform"}}
    assert read_stored_spec({SPEC_ATTR: {"search_space": broken}}, 1).search_space == {"cliprange": SPACE["cliprange"]}


def test_show_prints_the_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'edge.db'}"
    study = optuna.create_study(storage=url, study_name="edge", direction="maximize")
    study.set_user_attr(SPEC_ATTR, {"name": "edge", "search_space": RAW_SPACE})
    for trial in study_of([NEAR_TOP] * 6):
        study.add_trial(trial)
    assert main(["show", "edge", "--storage", url]) == 0
    output = capsys.readouterr().out
    assert "learning_rate: the best 6 of 30 trials lie within 10% of the upper bound 5e-05; widen the range above " \
           "it" in output
    # Without a stored definition there is no space to judge against, and show prints the table alone.
    bare = optuna.create_study(storage=url, study_name="bare", direction="maximize")
    for trial in study_of([NEAR_TOP] * 6):
        bare.add_trial(trial)
    assert main(["show", "bare", "--storage", url]) == 0
    assert "Edges of the search space" not in capsys.readouterr().out
