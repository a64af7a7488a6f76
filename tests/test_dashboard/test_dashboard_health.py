"""The health rules on hand-made metrics: each sign is found when present and not when absent."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dashboard import health_rules
from dashboard.health_rules import CRITICAL, WARNING, HealthContext, diagnose, diagnose_trials, worst

CONTEXT = HealthContext(kl_threshold=20.0)
N = 30


def metrics(**columns: list[float] | np.ndarray) -> pd.DataFrame:
    """One trial's metrics: update 1..n plus the given columns."""
    n = len(next(iter(columns.values())))
    return pd.DataFrame({"trial_number": 0, "update": np.arange(1, n + 1), **columns})


def healthy(n: int = N) -> pd.DataFrame:
    """A run with nothing wrong: KL grows to a few nats, losses fall, entropy dips a little."""
    steps = np.arange(1, n + 1, dtype=float)
    return metrics(**{
        "objective/kl": 4 * (1 - np.exp(-steps / 10)),
        "objective/scores": 1 - np.exp(-steps / 8),
        "objective/gold_score": 0.8 * (1 - np.exp(-steps / 8)),
        "loss/value_avg": 0.5 * np.exp(-steps / 10) + 0.05,
        "loss/policy_avg": np.zeros(n),
        "policy/entropy_avg": 2.0 - 0.02 * steps,
        "policy/clipfrac_avg": np.full(n, 0.1),
        "policy/approxkl_avg": np.full(n, 0.01),
    })


def with_column(frame: pd.DataFrame, name: str, values: list[float] | np.ndarray) -> pd.DataFrame:
    return frame.assign(**{name: values})


def rules_found(frame: pd.DataFrame, context: HealthContext = CONTEXT) -> set[str]:
    return {finding.rule for finding in diagnose(frame, context)}


def test_a_healthy_run_has_no_findings() -> None:
    assert diagnose(healthy(), CONTEXT) == []
    assert worst([]) == "ok"


def test_kl_above_threshold_is_critical_with_the_update_and_numbers() -> None:
    kl = np.linspace(0.5, 25.0, N)
    (finding,) = [f for f in diagnose(with_column(healthy(), "objective/kl", kl), CONTEXT) if f.rule == "kl_blow_up"]
    first_above = int(np.argmax(kl > 20.0)) + 1
    assert finding.severity == CRITICAL and finding.update == first_above
    assert "threshold 20" in finding.evidence and f"update {first_above}" in finding.evidence
    assert "Lower the learning rate or raise β" in finding.advice
    # The study's own threshold counts, not a fixed one.
    assert "kl_blow_up" not in rules_found(with_column(healthy(), "objective/kl", kl), HealthContext(kl_threshold=30))


def test_kl_consistently_high_warns_unless_an_adaptive_target_asks_for_it() -> None:
    high = with_column(healthy(), "objective/kl", np.full(N, 12.0))
    (finding,) = diagnose(high, CONTEXT)
    assert finding.rule == "kl_high" and finding.severity == WARNING and "12.00 nats" in finding.evidence
    assert rules_found(high, HealthContext(kl_threshold=20.0, kl_target=12.0)) == set()
    assert "kl_high" not in rules_found(with_column(healthy(), "objective/kl", np.full(N, 8.0)))


def test_kl_collapsing_to_zero_or_far_below_its_peak() -> None:
    zero = with_column(healthy(), "objective/kl", np.full(N, 0.001))
    (finding,) = diagnose(zero, CONTEXT)
    assert finding.rule == "kl_collapse" and "Lower β" in finding.advice
    peaked = np.concatenate([np.linspace(0, 6, N // 2), np.full(N - N // 2, 0.05)])
    (finding,) = diagnose(with_column(healthy(), "objective/kl", peaked), CONTEXT)
    assert finding.rule == "kl_collapse" and "peak of 6.00" in finding.evidence
    assert "kl_collapse" not in rules_found(with_column(healthy(), "objective/kl", np.full(N, 0.5)))
    assert "kl_collapse" not in rules_found(healthy(n=6).assign(**{"objective/kl": 0.0}))  # too early to say


def test_value_loss_diverging() -> None:
    growing = 0.1 * np.exp(np.arange(N) * 0.15)
    (finding,) = diagnose(with_column(healthy(), "loss/value_avg", growing), CONTEXT)
    assert finding.rule == "value_loss_diverging" and "value_learning_rate" in finding.advice
    assert "rose from" in finding.evidence and "×" in finding.evidence
    # Grown but settled (no longer rising) is not flagged; neither is a loss that falls.
    settled = np.concatenate([np.linspace(0.1, 1.0, N // 2), np.full(N - N // 2, 1.0)])
    assert "value_loss_diverging" not in rules_found(with_column(healthy(), "loss/value_avg", settled))


def test_entropy_collapse() -> None:
    collapsing = 2.0 * np.exp(-np.arange(N) / 5)
    (finding,) = diagnose(with_column(healthy(), "policy/entropy_avg", collapsing), CONTEXT)
    assert finding.rule == "entropy_collapse" and "% lower" in finding.evidence
    # Without the per-token entropy the sequence entropy is used.
    frame = healthy().drop(columns="policy/entropy_avg").assign(**{"objective/entropy": collapsing})
    assert rules_found(frame) == {"entropy_collapse"}


@pytest.mark.parametrize(("column", "value", "rule"), [
    ("policy/clipfrac_avg", 0.45, "clipfrac_high"),
    ("policy/approxkl_avg", 0.3, "approxkl_high"),
])
def test_step_size_signs_advise_fewer_epochs_or_a_tighter_clip(column: str, value: float, rule: str) -> None:
    (finding,) = diagnose(with_column(healthy(), column, np.full(N, value)), CONTEXT)
    assert finding.rule == rule and f"{value:.3g}" in finding.evidence
    assert "fewer PPO epochs" in finding.advice and "tighter clip range" in finding.advice


def test_proxy_up_gold_down_is_over_optimisation() -> None:
    steps = np.arange(1, N + 1, dtype=float)
    gold = np.where(steps <= 15, steps / 15, 1 - (steps - 15) / 20)
    frame = healthy().assign(**{"objective/scores": steps / 10, "objective/gold_score": gold})
    (finding,) = diagnose(frame, CONTEXT)
    assert finding.rule == "over_optimisation" and "proxy score rose" in finding.evidence
    assert "gold score fell" in finding.evidence and "update" in finding.advice
    # Both rising, or gold falling while the proxy falls too, is not over-optimisation.
    assert "over_optimisation" not in rules_found(healthy())
    falling_both = frame.assign(**{"objective/scores": gold})
    assert "over_optimisation" not in rules_found(falling_both)
    # Without a gold score (a reward model of one's own) the rule says nothing.
    assert "over_optimisation" not in rules_found(frame.drop(columns="objective/gold_score"))


@pytest.mark.parametrize("judge", ["eval/judge_score", "eval/judge_win_rate", "eval/gold_score"])
def test_proxy_up_judge_down_on_the_evaluations_is_a_warning(judge: str) -> None:
    # Evaluations at updates 10, 20, 30 only; NaN elsewhere, as a run's evaluation metrics are.
    def every_tenth(values: list[float]) -> np.ndarray:
        column = np.full(N, math.nan)
        column[[9, 19, 29]] = values
        return column

    turned = healthy().assign(**{"eval/score": every_tenth([0.2, 0.5, 0.9]), judge: every_tenth([0.3, 0.6, 0.4])})
    (finding,) = diagnose(turned, CONTEXT)
    assert finding.rule == "judge_turned" and finding.update == 20 and judge in finding.sign
    assert "0.6 → 0.4" in finding.evidence and "67% of its gain" in finding.evidence
    # Held (a fall under a fifth of the gain), both rising, or the proxy falling too: no finding.
    for proxy, verdict in (([0.2, 0.5, 0.9], [0.3, 0.6, 0.55]), ([0.2, 0.5, 0.9], [0.3, 0.6, 0.7]),
                           ([0.2, 0.5, 0.4], [0.3, 0.6, 0.4])):
        calm = healthy().assign(**{"eval/score": every_tenth(proxy), judge: every_tenth(verdict)})
        assert "judge_turned" not in rules_found(calm)
    assert "judge_turned" not in rules_found(turned.drop(columns=judge))  # no judge: nothing to read


@pytest.mark.parametrize(("distinct", "repeats", "named"), [
    ([0.95, 0.8, 0.4], [0.0, 0.01, 0.02], "distinct word pairs fell 0.95 → 0.40"),
    ([0.95, 0.9, 0.9], [0.01, 0.05, 0.13], "repeated word triples rose 0.01 → 0.13"),
])
def test_answers_that_lose_their_variety_are_a_sign_of_hacking(distinct: list[float], repeats: list[float],
                                                                named: str) -> None:
    def every_tenth(values: list[float]) -> np.ndarray:
        column = np.full(N, math.nan)
        column[[9, 19, 29]] = values
        return column

    signs = healthy().assign(**{"eval/distinct_2grams": every_tenth(distinct),
                                "eval/repeated_3grams": every_tenth(repeats)})
    (finding,) = diagnose(signs, CONTEXT)
    assert finding.rule == "hacking_signs" and finding.update == 30 and named in finding.evidence
    assert "hacking_guard" in finding.advice
    kept = healthy().assign(**{"eval/distinct_2grams": every_tenth([0.95, 0.9, 0.6]),
                               "eval/repeated_3grams": every_tenth([0.01, 0.05, 0.1])})
    assert "hacking_signs" not in rules_found(kept)  # above half its share, and under a tenth more repeats


def test_non_finite_metrics_are_critical() -> None:
    values = healthy()["loss/value_avg"].to_numpy().copy()
    values[-1] = math.inf
    (finding, *_) = diagnose(with_column(healthy(), "loss/value_avg", values), CONTEXT)
    assert finding.rule == "non_finite" and finding.severity == CRITICAL and finding.update == N
    # A one-update run whose score was NaN (stored as "nan", read back as missing).
    nan_run = metrics(**{"objective/scores": [math.nan], "objective/kl": [0.0]})
    assert rules_found(nan_run) == {"non_finite"}
    # A metric this run never reports is not a divergence.
    assert "non_finite" not in rules_found(healthy().assign(**{"objective/gold_score": math.nan}))
    # Evaluation metrics are reported on evaluation updates only: missing in between is not a divergence, infinity is.
    every_fourth = np.where(np.arange(N) % 4 == 3, 0.5, math.nan)
    sparse = healthy().assign(**{"eval/score": every_fourth, "time/eval_s": every_fourth})
    assert "non_finite" not in rules_found(sparse)
    inf_at_8 = np.where(np.arange(N) == 7, math.inf, every_fourth)
    assert "non_finite" in rules_found(sparse.assign(**{"eval/score": inf_at_8}))


def test_findings_are_sorted_worst_first_and_per_trial() -> None:
    frame = with_column(healthy(), "objective/kl", np.linspace(0, 30, N))
    frame = with_column(frame, "policy/clipfrac_avg", np.full(N, 0.5))
    findings = diagnose(frame, CONTEXT)
    severities = [f.severity for f in findings]
    assert severities == sorted(severities, key=health_rules.SEVERITY_RANK.__getitem__)
    assert worst(findings) == CRITICAL
    both = pd.concat([healthy(), frame.assign(trial_number=1)], ignore_index=True)
    by_trial = diagnose_trials(both, {0: CONTEXT, 1: CONTEXT, 2: CONTEXT})
    assert by_trial[0] == [] and worst(by_trial[1]) == CRITICAL and by_trial[2] == []


def test_critic_free_trials_are_not_flagged_for_the_value_loss_they_never_report() -> None:
    """The real estimators study (tools.real_studies): grpo, rloo and reinforce_pp_baseline train no value network,
    so loss/value_avg is absent from every update of theirs; that is not a value loss gone non-finite."""
    from helpers.dashboard_fixtures import real_studies_url

    from dashboard.frames import health_contexts
    from dashboard.study_reader import StudyRef, build_study_view, open_reader
    from tools.real_studies import ESTIMATORS

    ref = StudyRef(real_studies_url(), ESTIMATORS)
    reader = open_reader(ref)
    view = build_study_view(ref, reader.refresh())
    estimators = {n: config.get("advantage_estimator") for n, config in view.configs.items()}
    assert {"gae", "grpo", "rloo"} <= set(estimators.values())
    findings = diagnose_trials(reader.metrics(), health_contexts(view))
    flagged = {n: [f.evidence for f in found if f.rule == "non_finite"] for n, found in findings.items()}
    assert {n: e for n, e in flagged.items() if e} == {}
    # A value network's own metric still counts: missing from a gae trial it is a run gone wrong.
    gae = next(n for n, e in estimators.items() if e == "gae")
    assert "loss/value_avg" in health_contexts(view)[gae].reported


@pytest.mark.parametrize("seed", range(20))
def test_a_flat_noisy_run_is_not_flagged_for_over_optimisation(seed: int) -> None:
    # Per-update gold swinging 0.4-0.8 around a flat level, the proxy drifting up by less than its
    # noise. A trend no larger than the run's own noise is no finding.
    rng = np.random.default_rng(seed)
    n = 96
    frame = healthy(n).assign(**{
        "objective/scores": 1.3 + rng.normal(0.0, 0.1, n) + np.linspace(0.0, 0.02, n),
        "objective/gold_score": 0.6 + rng.normal(0.0, 0.1, n),
    })
    assert "over_optimisation" not in rules_found(frame)


def test_over_optimisation_states_the_noise_test_it_passed() -> None:
    rng = np.random.default_rng(0)
    steps = np.arange(1, 97, dtype=float)
    gold = np.where(steps <= 40, 0.4 + steps / 100, 0.8 - (steps - 40) / 100) + rng.normal(0.0, 0.05, 96)
    frame = healthy(96).assign(**{"objective/scores": steps / 50 + rng.normal(0.0, 0.05, 96),
                                  "objective/gold_score": gold})
    (finding,) = [f for f in diagnose(frame, CONTEXT) if f.rule == "over_optimisation"]
    assert "times its noise" in finding.evidence  # the test it used, in the finding
