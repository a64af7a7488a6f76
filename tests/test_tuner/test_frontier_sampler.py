"""The frontier-guided sampler on a synthetic landscape with a known answer: an objective that peaks at a known KL,
and knobs whose KL follows a known power law. The trials run in no time (their metrics are computed, then stored
in a real study database as a trial's are), so the search itself is what is tested."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
import pytest

from ppo_core.metric_names import EVAL_GOLD_SCORE, EVAL_KL, EVAL_SCORE
from tuner.search.frontier_aim import AIM_KINDS, KEEP_BUDGET, Aim, budget_weights, keep_probability, within_budget
from tuner.search.frontier_sampler import AIM_ATTR, FrontierSampler
from tuner.search.kl_model import design_row
from tuner.search.space import ParamSpec, choose_point, suggest_value
from tuner.store.database import create_engine
from tuner.store.records import TrialStore, create_tables, read_metrics

SPACE = {
    "learning_rate": ParamSpec("learning_rate", "float", 1e-6, 1e-3, log=True),
    "num_ppo_epochs": ParamSpec("num_ppo_epochs", "int", 1, 8),
    "cliprange": ParamSpec("cliprange", "float", 0.1, 0.3),
    "mini_batch_size": ParamSpec("mini_batch_size", "categorical", choices=(4, 8, 16)),
}
BASE = {"total_episodes": 1536, "per_device_train_batch_size": 16}
EVALUATIONS = (24, 48, 72, 96)  # updates at which a run is evaluated; 96 is the whole run
TRIALS = 24
NEAR = 0.5  # "at the peak": final ln KL within 0.5 of the peak's (a factor of 1.65 in KL)


def true_ln_kl(point: dict[str, Any], updates: int) -> float:
    """The known law: ln KL = 2.6 + 0.9 ln M - 0.3 ln N (more mini-batches buy less KL), M the step mass."""
    row = design_row(SPACE, point, BASE, updates)
    return 2.6 + 0.9 * float(row[1]) - 0.3 * float(row[5])


def gold(ln_kl: float, peak_kl: float) -> float:
    """Peaks at ``peak_kl``: 0.8 there, falling quadratically in ln KL on either side."""
    return 0.8 - 0.12 * (ln_kl - math.log(peak_kl)) ** 2


def synthetic_objective(engine: Any, peak_kl: float, seed: int) -> Callable[[optuna.Trial], float]:
    def objective(trial: optuna.Trial) -> float:
        point = choose_point(SPACE, lambda spec: suggest_value(trial, spec), BASE)
        rng = np.random.default_rng([seed, trial.number])
        luck = rng.normal(0, 0.2)  # the run's own seed: shared by its evaluations
        store = TrialStore(engine, trial.study.study_name, trial._trial_id, trial.number)
        golds = []
        for updates in EVALUATIONS:
            ln_kl = true_ln_kl(point, updates) + luck
            golds.append(gold(ln_kl, peak_kl) + rng.normal(0, 0.01))
            store.write_metrics(updates, {EVAL_KL: math.exp(ln_kl), EVAL_GOLD_SCORE: golds[-1],
                                          EVAL_SCORE: math.exp(ln_kl) / 10})
        return float(np.mean(golds[-2:]))

    return objective


def run_study(tmp_path: Path, peak_kl: float, seed: int, sampler: optuna.samplers.BaseSampler | None = None,
              trials: int = TRIALS, kl_budget: float | None = None,
              within_budget: bool = False) -> tuple[optuna.Study, Any]:
    url = f"sqlite:///{tmp_path / f'synthetic-{peak_kl}-{seed}.db'}"
    engine = create_engine(url)
    create_tables(engine)
    sampler = sampler or FrontierSampler(seed=seed, within_budget=within_budget).attach(
        SPACE, BASE, lambda name: read_metrics(engine, name), kl_budget)
    study = optuna.create_study(study_name="synthetic", storage=url, direction="maximize", sampler=sampler)
    study.optimize(synthetic_objective(engine, peak_kl, seed), n_trials=trials)
    return study, engine


def chosen_point(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The point ``trial`` ran, virtual parameters included, as its objective chose it."""
    return choose_point(SPACE, lambda spec: trial.params[spec.name], BASE)


def near_peak_share(study: optuna.Study, peak_kl: float, first: int) -> float:
    """The share of trials from number ``first`` on whose final ln KL (without their luck) lies within NEAR of the
    peak's."""
    trials = [t for t in study.get_trials() if t.number >= first]
    point = [chosen_point(t) for t in trials]
    return float(np.mean([abs(true_ln_kl(p, EVALUATIONS[-1]) - math.log(peak_kl)) < NEAR for p in point]))


@pytest.mark.parametrize("peak_kl", [0.3, 8.0])
def test_the_search_finds_a_known_peak_and_keeps_trials_there(tmp_path: Path, peak_kl: float) -> None:
    """Two peaks 3.3 nats of ln KL apart: nothing in the sampler knows either. After its 4 start-up trials and 4
    more to read the peak, most trials land within a factor 1.65 of the peak's KL, where random search lands about
    1 in 7 (measured below on the same landscape), and the best trial is within 0.02 of the peak's gold."""
    shares, randoms, bests = [], [], []
    for seed in range(3):
        study, _ = run_study(tmp_path, peak_kl, seed)
        shares.append(near_peak_share(study, peak_kl, 8))
        bests.append(study.best_value)
        random_study, _ = run_study(tmp_path / "random", peak_kl, seed, optuna.samplers.RandomSampler(seed=seed))
        randoms.append(near_peak_share(random_study, peak_kl, 0))
    assert np.mean(shares) >= 0.5, (shares, randoms)
    assert np.mean(shares) >= 3 * np.mean(randoms), (shares, randoms)
    assert min(bests) >= 0.78, bests


@pytest.mark.parametrize(("aim", "budget", "target"), [
    (Aim("above", 3.0, 0.5, 3.4, "rising"), 10.0, math.log(10.0)),   # past the budget: drawn back to it
    (Aim("peak", 1.0, 0.3, 1.2, "peaks"), 10.0, 1.2),                # within it: kept
    (Aim("above", 3.0, 0.5, 3.4, "rising"), None, 3.4),              # no budget: kept
    (Aim("start", 0.9, 0.0, 0.9, "start-up"), 0.5, 0.9),             # a step-mass quantile, not a KL: kept
])
def test_an_aim_past_the_study_s_kl_budget_is_drawn_back_to_it(aim: Aim, budget: float | None,
                                                                  target: float) -> None:
    held = within_budget(aim, budget)
    assert held.target == pytest.approx(target) and held.kind == aim.kind
    assert held.center <= max(aim.center, target) and (held == aim) == (target == aim.target)
    if held != aim:
        assert held.reason.startswith("rising; drawn back from 30 to the study's KL budget of 10 nats")


@pytest.fixture(scope="module")
def held_within_budget(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[optuna.Study, Any]]:
    """Gold peaking at 8 nats, past the study's KL budget of 2, searched held within the budget (``within_budget``):
    the study and its engine by seed, run once for the two tests below that read them."""
    directory = tmp_path_factory.mktemp("held_within_budget")
    return {seed: run_study(directory, 8.0, seed, kl_budget=2.0, within_budget=True) for seed in range(3)}


def test_a_peak_past_the_budget_keeps_the_aims_within_the_budget(
        tmp_path: Path, held_within_budget: dict[int, tuple[optuna.Study, Any]]) -> None:
    """Gold peaks at 8 nats, the study's budget is 2: held within the budget (``within_budget``), the steered trials aim
    at most at 2 nats and most end within a factor 1.65 of it; aimed at the peak (off, the default), they aim past
    it."""
    held, free = [], []
    for seed in range(2):
        study, _ = held_within_budget[seed]
        aims = [t.user_attrs[AIM_ATTR] for t in study.get_trials() if t.user_attrs[AIM_ATTR]["kind"] != "start"]
        assert aims and all(aim["target"] <= math.log(2.0) + 1e-9 for aim in aims), aims
        held.append(near_peak_share(study, 2.0, 8))
        study, _ = run_study(tmp_path / "free", 8.0, seed, kl_budget=2.0, within_budget=False)
        free.append(max(t.user_attrs[AIM_ATTR]["target"] for t in study.get_trials()))
    assert np.mean(held) >= 0.5, held
    assert min(free) > math.log(2.0), free


def final_kl(study: optuna.Study, engine: Any, number: int) -> float:
    """Trial ``number``'s held-out KL at its last evaluation, its seed's luck included."""
    rows = read_metrics(engine, study.study_name).query(f"trial_number == {number}")
    return float(rows[EVAL_KL].iloc[-1])


def test_held_within_the_budget_most_steered_trials_keep_it_on_their_own_seed(
        held_within_budget: dict[int, tuple[optuna.Study, Any]]) -> None:
    """Gold peaks at 8 nats, past a budget of 2: held within it, a steered trial is a configuration the KL model
    predicts keeps the budget on a fresh seed with probability KEEP_BUDGET, so most trials' final KL, their seed's
    luck (SD 0.2 in ln KL) included, ends within it. Aimed at the budget's edge alone, about half did."""
    kept = []
    for seed in range(3):
        study, engine = held_within_budget[seed]
        steered = [t.number for t in study.get_trials() if t.user_attrs[AIM_ATTR]["kind"] != "start"]
        kept += [final_kl(study, engine, number) <= 2.0 for number in steered]
    assert np.mean(kept) >= 0.7, np.mean(kept)


def test_keep_probability_is_the_normal_cdf_of_the_budget_against_the_prediction() -> None:
    rng = np.random.default_rng(0)
    mean, sd, budget = np.array([math.log(5.0), 1.0, 2.5]), np.array([0.5, 0.3, 0.4]), 5.0
    drawn = rng.normal(mean, sd, size=(200_000, 3))  # the slow reference: a fresh seed's ln KL, drawn
    assert keep_probability(mean, sd, budget) == pytest.approx((drawn <= math.log(budget)).mean(axis=0), abs=0.005)
    assert keep_probability(np.array([math.log(5.0) - 0.8416212 * 0.5]), np.array([0.5]), budget)[0] == \
        pytest.approx(KEEP_BUDGET, abs=1e-6)


def test_budget_weights_keep_the_likely_keepers_and_fall_back_to_the_likeliest() -> None:
    weights = np.array([0.1, 0.2, 0.3, 0.4])
    mean, sd = np.log([1.0, 3.0, 6.0, 9.0]), np.full(4, 0.3)
    held = budget_weights(weights, mean, sd, 4.0)  # P = 1.0, 0.83, 0.09, 0.003
    assert held == pytest.approx([0.1 / 0.3, 0.2 / 0.3, 0.0, 0.0])
    assert budget_weights(weights, mean, sd, None) is weights
    none_keeps = budget_weights(weights, mean, sd, 0.5)  # every P < 0.8: the likeliest takes it all
    assert none_keeps == pytest.approx([1.0, 0.0, 0.0, 0.0])


def test_a_study_of_two_objectives_is_aimed_alike(tmp_path: Path) -> None:
    """The sampler reads gold and KL from the stored evaluations, not the study's values: a study that maximises
    gold and minimises KL is aimed as a one-objective study is."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    engine = create_engine(url)
    create_tables(engine)
    sampler = FrontierSampler(seed=1).attach(SPACE, BASE, lambda name: read_metrics(engine, name))
    study = optuna.create_study(study_name="two", storage=url, directions=["maximize", "minimize"], sampler=sampler)
    one = synthetic_objective(engine, 1.0, 1)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        value = one(trial)
        kl = read_metrics(engine, "two").query(f"trial_number == {trial.number}")[EVAL_KL].iloc[-1]
        return value, float(kl)

    study.optimize(objective, n_trials=14)
    assert near_peak_share(study, 1.0, 6) >= 0.5
    assert {t.user_attrs[AIM_ATTR]["kind"] for t in study.get_trials()[6:]} & {"peak", "highest", "spread"}


def test_a_resumed_sampler_proposes_what_the_first_would_have(tmp_path: Path) -> None:
    """Everything a proposal depends on is in storage, its draws in the seed and the trial's number: a new process
    (a study resumed after kill -9) proposes the next trial as the killed one would have."""
    study, engine = run_study(tmp_path, 2.0, seed=5, trials=10)
    fresh = [FrontierSampler(seed=5).attach(SPACE, BASE, lambda name: read_metrics(engine, name)) for _ in range(2)]
    first, second = (sampler.propose(study, 10) for sampler in fresh)
    assert first == second and first[1]["kind"] in set(AIM_KINDS) - {"start"}
    # Another trial's number draws anew.
    assert fresh[0].propose(study, 11)[0] != first[0]


def test_each_trial_stores_its_aim_and_enqueued_trials_keep_their_values(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'aim.db'}"
    engine = create_engine(url)
    create_tables(engine)
    sampler = FrontierSampler(seed=0).attach(SPACE, BASE, lambda name: read_metrics(engine, name))
    study = optuna.create_study(study_name="synthetic", storage=url, direction="maximize", sampler=sampler)
    queued = {"learning_rate": 1e-5, "num_ppo_epochs": 2, "cliprange": 0.2, "mini_batch_size": 8}
    study.enqueue_trial(queued)
    study.optimize(synthetic_objective(engine, 1.0, 0), n_trials=7)
    trials = study.get_trials()
    assert trials[0].params == queued and AIM_ATTR not in trials[0].user_attrs
    kinds = [t.user_attrs[AIM_ATTR]["kind"] for t in trials[1:]]
    # The queued trial and one start-up trial are measured: with 2 trials the KL model exists, and their paths
    # already show the turn (found or not yet clear of the runs' noise), so the start-up ends there rather than after
    # its 4 trials.
    assert kinds[0] == "start" and kinds[1] in ("peak", "highest") and set(kinds) <= set(AIM_KINDS)
    for trial in trials[1:]:
        aim = trial.user_attrs[AIM_ATTR]
        assert aim["reason"] and math.isfinite(aim["target"]) and aim["trials_measured"] <= trial.number


def test_trials_queued_with_open_knobs_are_proposed_by_their_number_not_alike_in_every_worker(tmp_path: Path) -> None:
    # A population's first generation is queued with no value fixed. Its knobs came from a random sampler seeded alike
    # in every worker, so two workers starting together ran the same configuration: under `ppo-tune run --workers 2`
    # the population's 8 members were 4 pairs of twins.
    url = f"sqlite:///{tmp_path / 'queued.db'}"
    engine = create_engine(url)
    create_tables(engine)
    workers = [FrontierSampler(seed=0).attach(SPACE, BASE, lambda name: read_metrics(engine, name)) for _ in range(2)]
    optuna.create_study(study_name="synthetic", storage=url, direction="maximize")
    studies = [optuna.load_study(study_name="synthetic", storage=url, sampler=sampler) for sampler in workers]
    for _ in range(2):
        studies[0].enqueue_trial({})
    studies[0].enqueue_trial({"learning_rate": 1e-5})  # a warm start that fixes one knob keeps it
    asked = [study.ask() for study in (*studies, studies[0])]
    points = [{name: suggest_value(trial, spec) for name, spec in SPACE.items()} for trial in asked]
    assert points[0] != points[1]
    # Each is what any worker proposes for that trial's number: a resumed or a second worker agrees.
    for trial, point in zip(asked[:2], points[:2], strict=True):
        proposed = FrontierSampler(seed=0).attach(SPACE, BASE, lambda name: read_metrics(engine, name)).propose(
            studies[0], trial.number)[0]
        assert point == {name: proposed[name] for name in SPACE}
        assert studies[0].trials[trial.number].user_attrs[AIM_ATTR]["kind"] == "start"
    assert points[2]["learning_rate"] == 1e-5


def test_a_study_it_cannot_read_is_explored_and_says_why(tmp_path: Path) -> None:
    def unreadable(name: str) -> Any:
        raise OSError("disk I/O error")

    url = f"sqlite:///{tmp_path / 'unreadable.db'}"
    engine = create_engine(url)
    create_tables(engine)
    study = optuna.create_study(storage=url, direction="maximize",
                                sampler=FrontierSampler(seed=0).attach(SPACE, BASE, unreadable))
    study.optimize(synthetic_objective(engine, 1.0, 0), n_trials=3)
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.COMPLETE] * 3
    assert all("could not read the study (OSError: disk I/O error)" in t.user_attrs[AIM_ATTR]["reason"]
               for t in study.get_trials())


@pytest.mark.parametrize("case", ["one_kl", "non_finite", "no_gold"])
def test_a_frontier_that_cannot_be_read_yet_falls_back_to_exploring_and_says_why(tmp_path: Path, case: str) -> None:
    """Evaluations all at one KL, with non-finite values, or without a gold score: the proposal still comes, from
    the exploring aim, with the reason; the trial runs."""
    def frame(name: str) -> Any:
        rows = []
        for trial in range(6):
            for update in EVALUATIONS:
                kl = {"one_kl": 1.0, "non_finite": math.nan if update == 96 else math.inf}.get(case, 0.1 * update)
                row = {"trial_number": trial, "update": update, EVAL_KL: kl, EVAL_SCORE: 0.5}
                if case != "no_gold":
                    row[EVAL_GOLD_SCORE] = 0.5 + 0.001 * trial
                rows.append(row)
        return pd.DataFrame(rows)

    url = f"sqlite:///{tmp_path / 'unfit.db'}"
    engine = create_engine(url)
    create_tables(engine)
    study = optuna.create_study(storage=url, direction="maximize",
                                sampler=FrontierSampler(seed=0, n_startup_trials=0).attach(SPACE, BASE, frame))
    for _ in range(6):  # trials the frame's rows belong to
        study.add_trial(optuna.trial.create_trial(value=0.5, params={"learning_rate": 1e-5, "num_ppo_epochs": 2,
                                                                     "cliprange": 0.2, "mini_batch_size": 8},
                                                  distributions={name: _distribution(spec)
                                                                 for name, spec in SPACE.items()}))
    study.optimize(synthetic_objective(engine, 1.0, 0), n_trials=2)
    aims = [t.user_attrs[AIM_ATTR] for t in study.get_trials()[6:]]
    assert [t.state for t in study.get_trials()[6:]] == [optuna.trial.TrialState.COMPLETE] * 2
    kind, words = {"one_kl": ("spread", "every evaluation is at about the same KL"),
                   "non_finite": ("start", "no KL model yet"),
                   "no_gold": ("spread", "the study records no gold score")}[case]
    assert all(aim["kind"] == kind and words in aim["reason"] for aim in aims), aims


def _distribution(spec: ParamSpec) -> optuna.distributions.BaseDistribution:
    if spec.type == "categorical":
        return optuna.distributions.CategoricalDistribution(list(spec.choices))
    assert spec.low is not None and spec.high is not None
    if spec.type == "int":
        return optuna.distributions.IntDistribution(int(spec.low), int(spec.high))
    return optuna.distributions.FloatDistribution(spec.low, spec.high, log=spec.log)


def test_preferring_gold_picks_the_knob_that_adds_gold_at_the_aimed_kl(tmp_path: Path) -> None:
    """The same landscape, with a clip range of 0.3 adding 0.1 of gold at any KL over one of 0.1. Among the
    candidates that hit its aim about as well, the sampler with ``prefer_gold`` takes the one whose drawn residual
    is highest: its aimed trials learn to clip wide. Without it (the method as frozen) the clip range is whatever the
    best-aimed candidate has."""
    def clipped(engine: Any, seed: int) -> Callable[[optuna.Trial], float]:
        def objective(trial: optuna.Trial) -> float:
            point = choose_point(SPACE, lambda spec: suggest_value(trial, spec), BASE)
            rng = np.random.default_rng([seed, trial.number])
            luck = rng.normal(0, 0.2)
            store = TrialStore(engine, trial.study.study_name, trial._trial_id, trial.number)
            golds = []
            for updates in EVALUATIONS:
                ln_kl = true_ln_kl(point, updates) + luck
                golds.append(gold(ln_kl, 1.5) + 0.5 * (point["cliprange"] - 0.2) + rng.normal(0, 0.01))
                store.write_metrics(updates, {EVAL_KL: math.exp(ln_kl), EVAL_GOLD_SCORE: golds[-1],
                                              EVAL_SCORE: math.exp(ln_kl) / 10})
            return float(np.mean(golds[-2:]))

        return objective

    clips: dict[bool, list[float]] = {True: [], False: []}
    shares: dict[bool, list[float]] = {True: [], False: []}
    for prefer in (True, False):
        for seed in range(3):
            url = f"sqlite:///{tmp_path / f'clip-{prefer}-{seed}.db'}"
            engine = create_engine(url)
            create_tables(engine)
            sampler = FrontierSampler(seed=seed, prefer_gold=prefer).attach(
                SPACE, BASE, functools.partial(read_metrics, engine))
            study = optuna.create_study(study_name="clip", storage=url, direction="maximize", sampler=sampler)
            study.optimize(clipped(engine, seed), n_trials=TRIALS)
            clips[prefer] += [t.params["cliprange"] for t in study.get_trials() if t.number >= 10]
            shares[prefer].append(near_peak_share(study, 1.5, 8))
    assert np.mean(clips[True]) >= 0.25 and np.mean(clips[True]) >= np.mean(clips[False]) + 0.03, clips
    assert np.mean(shares[True]) >= 0.5 and np.mean(shares[False]) >= 0.5, shares  # and both still aim in KL


def test_a_pilot_starts_the_study_at_a_high_step_mass(tmp_path: Path) -> None:
    from tuner.search.kl_model import log10_step_mass

    url = f"sqlite:///{tmp_path / 'pilot.db'}"
    engine = create_engine(url)
    create_tables(engine)
    sampler = FrontierSampler(seed=0, n_startup_trials=2, pilot=0.95).attach(
        SPACE, BASE, lambda name: read_metrics(engine, name))
    study = optuna.create_study(study_name="pilot", storage=url, direction="maximize", sampler=sampler)
    study.optimize(synthetic_objective(engine, 1.5, 0), n_trials=3)
    first = study.get_trials()[0]
    assert first.user_attrs[AIM_ATTR]["kind"] == "start" and first.user_attrs[AIM_ATTR]["target"] == 0.95
    masses = [log10_step_mass(chosen_point(t), BASE) for t in study.get_trials()]
    assert masses[0] == max(masses)
    # Without a pilot the first start-up trial takes the first van der Corput quantile (0.5, shifted per study).
    plain = FrontierSampler(seed=0).attach(SPACE, BASE, lambda name: read_metrics(engine, name))
    assert plain.propose(study, 0)[1]["target"] != 0.95
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="pilot"):
            FrontierSampler(pilot=bad)
