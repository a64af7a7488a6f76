"""Searching the advantage estimator: each point draws only the knobs its estimator reads and the KL coefficient in
force where it is placed, on real Optuna trials; study files whose groups cannot fill a rollout batch, or that name an
estimator that does not exist, fail with one line; the shipped studies/estimators.yaml parses and every point it
draws builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from ppo_core.config.estimator_traits import (
    default_generations,
    default_kl_in_reward,
    estimator_fields,
    estimator_names,
    group_estimators,
    readers,
)
from ppo_core.config.io import build_config
from ppo_core.config.ppo_config import settable_fields
from tuner.search.space import KL_PLACEMENT_PARAMS, suggest_params
from tuner.study.study_file import StudySpec, StudySpecError, load_study_spec, parse_study

ROOT = Path(__file__).resolve().parents[2]
ESTIMATORS_STUDY = ROOT / "studies" / "estimators.yaml"
BASE = {"task": "shortest_path", "per_device_train_batch_size": 16, "total_episodes": 64}
ALL_ESTIMATORS = {"type": "categorical", "choices": list(estimator_names())}
GAE_KNOBS = ("lam", "value_learning_rate", "vf_coef", "cliprange_value", "whiten_advantages", "whiten_rewards")
ESTIMATOR_SPACE = {
    "advantage_estimator": ALL_ESTIMATORS,
    "learning_rate": {"type": "float", "low": 1e-6, "high": 1e-4, "log": True},
    "lam": {"type": "float", "low": 0.9, "high": 1.0},
    "value_learning_rate": {"type": "float", "low": 1e-5, "high": 1e-4, "log": True},
    "vf_coef": {"type": "float", "low": 0.05, "high": 0.5},
    "cliprange_value": {"type": "float", "low": 0.1, "high": 0.3},
    "whiten_advantages": {"type": "categorical", "choices": [True, False]},
    "whiten_rewards": {"type": "categorical", "choices": [True, False]},
    "gamma": {"type": "float", "low": 0.9, "high": 1.0},
    "num_generations": {"type": "categorical", "choices": [2, 4, 8]},
    "scale_rewards": {"type": "categorical", "choices": ["group", "batch", "none"]},
    "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
    "beta": {"type": "float", "low": 0.005, "high": 0.2, "log": True},
}


def spec_of(search_space: dict[str, Any], base: dict[str, Any] | None = None, **extra: Any) -> StudySpec:
    """A study parsed (and checked, example configs included) as a study file is, on the built-in task."""
    data = {"name": "estimators-test", "storage": "sqlite:///:memory:",
            "objectives": [{"metric": "objective/scores", "reduce": "mean_last_k", "k": 2}],
            "base": {**BASE, **(base or {})}, "search_space": search_space, **extra}
    return parse_study(data, Path("estimators-test.yaml"))


def walk(spec: StudySpec, trials: int = 200, seed: int = 0) -> list[tuple[dict[str, Any], Any]]:
    """``trials`` random trials of a real study: each one's params and the config it builds."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    walked = []
    for _ in range(trials):
        trial = study.ask()
        config = build_config({**spec.base, **suggest_params(trial, spec.search_space, spec.base)})
        walked.append((dict(trial.params), config))
        study.tell(trial, 0.0)
    return walked


def test_each_estimator_draws_only_the_knobs_it_reads() -> None:
    walked = walk(spec_of(ESTIMATOR_SPACE))
    assert {params["advantage_estimator"] for params, _ in walked} == set(estimator_names())
    for params, config in walked:
        estimator = params["advantage_estimator"]
        assert config.advantage_estimator == estimator
        # GAE's lambda and its value network: gae only.
        assert all((name in params) == (estimator == "gae") for name in GAE_KNOBS), params
        # Groups: grpo, rloo and reinforce_pp_baseline; the group's scaling: grpo only.
        assert ("num_generations" in params) == (estimator in ("grpo", "rloo", "reinforce_pp_baseline")), params
        assert ("scale_rewards" in params) == (estimator == "grpo"), params
        # The discount: per-token returns (GAE, REINFORCE++), not grpo's or rloo's whole-response scores.
        assert ("gamma" in params) == (estimator not in ("grpo", "rloo")), params
        # Unsearched placement: the estimator's own (GRPO's in the loss), and only its coefficient drawn.
        assert ("beta" in params) == (estimator == "grpo") and ("kl_coef" in params) != ("beta" in params), params
        assert config.kl_coefficient == params["beta" if estimator == "grpo" else "kl_coef"]
        assert config.generations_per_prompt == params.get("num_generations", 1)
        if estimator == "gae":
            assert config.effective_value_learning_rate == params["value_learning_rate"]
            assert config.lam == params["lam"]


def test_a_searched_kl_placement_decides_between_kl_coef_and_beta() -> None:
    spec = spec_of({
        "advantage_estimator": {"type": "categorical", "choices": ["gae", "grpo", "rloo"]},
        "kl_in_reward": {"type": "categorical", "choices": [True, False]},
        "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
        "beta": {"type": "float", "low": 0.005, "high": 0.2, "log": True},
        "kl_loss_estimator": {"type": "categorical", "choices": ["k1", "k3"]},
    })
    walked = walk(spec)
    assert {(p["advantage_estimator"], p["kl_in_reward"]) for p, _ in walked} == \
        {(e, placed) for e in ("gae", "grpo", "rloo") for placed in (True, False)}
    for params, config in walked:
        in_reward = params["kl_in_reward"]
        assert config.kl_penalty_in_reward is in_reward
        assert ("kl_coef" in params) is in_reward, params
        assert ("beta" in params) is ("kl_loss_estimator" in params) is (not in_reward), params
        assert config.kl_coefficient == params["kl_coef" if in_reward else "beta"]


def test_adaptive_control_draws_the_target_in_either_placement() -> None:
    spec = spec_of({
        "advantage_estimator": {"type": "categorical", "choices": ["gae", "grpo"]},
        "kl_control": {"type": "categorical", "choices": ["fixed", "adaptive"]},
        "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
        "beta": {"type": "float", "low": 0.005, "high": 0.2, "log": True},
        "kl_target": {"type": "float", "low": 3.0, "high": 12.0},
    })
    fields = settable_fields()
    seen = set()
    for params, config in walk(spec):
        estimator, mode = params["advantage_estimator"], params["kl_control"]
        seen.add((estimator, mode))
        coefficient = "beta" if estimator == "grpo" else "kl_coef"
        if mode == "adaptive":
            # The target is drawn; the coefficient in force starts the controller from the base's (here the default).
            assert "kl_target" in params and "kl_coef" not in params and "beta" not in params, params
            assert config.kl_target == params["kl_target"]
            assert config.kl_coefficient == fields[coefficient].default
        else:
            assert "kl_target" not in params and config.kl_target is None, params
            assert set(params) & {"kl_coef", "beta"} == {coefficient}
            assert config.kl_coefficient == params[coefficient]
    assert seen == {(e, m) for e in ("gae", "grpo") for m in ("fixed", "adaptive")}


def test_without_a_searched_estimator_the_bases_decides() -> None:
    spec = spec_of({"num_generations": {"type": "categorical", "choices": [2, 4]},
                    "scale_rewards": {"type": "categorical", "choices": ["group", "none"]},
                    "beta": {"type": "float", "low": 0.01, "high": 0.1}},
                   base={"advantage_estimator": "grpo"})
    for params, config in walk(spec, trials=20):
        assert set(params) == {"num_generations", "scale_rewards", "beta"}
        assert config.generations_per_prompt == params["num_generations"] and not config.kl_penalty_in_reward
    # PPOConfig's default estimator, gae, reads none of the group knobs: searching one would do nothing.
    with pytest.raises(StudySpecError, match=r"^search_space\.num_generations: never chosen: only "
                                             r"advantage_estimator grpo or rloo or reinforce_pp_baseline reads it, "
                                             r"and this study's is gae \(PPOConfig's default\)"):
        spec_of({"num_generations": {"type": "categorical", "choices": [2, 4]}})
    with pytest.raises(StudySpecError, match=r"^search_space\.scale_rewards: never chosen: .* this study's is rloo "
                                             r"\(the base's\)"):
        spec_of({"scale_rewards": {"type": "categorical", "choices": ["group"]}}, base={"advantage_estimator": "rloo"})


@pytest.mark.parametrize(("search_space", "base", "message"), [
    ({"advantage_estimator": {"type": "categorical", "choices": ["grpo", "rloo"]}, "lam": ESTIMATOR_SPACE["lam"]},
     {}, "search_space.lam: never chosen: only advantage_estimator gae reads it, and this study's is grpo or rloo "
         "(searched)"),
    ({"advantage_estimator": {"type": "categorical", "choices": ["grpo"]}, "kl_coef": ESTIMATOR_SPACE["kl_coef"]},
     {}, "search_space.kl_coef: never chosen: it acts only with the KL penalty in the reward, and every point puts it "
         "in the loss"),
    ({"kl_control": {"type": "categorical", "choices": ["adaptive"]}, "kl_target": {"type": "float", "low": 3,
                                                                                   "high": 6},
      "kl_coef": ESTIMATOR_SPACE["kl_coef"]},
     {}, "search_space.kl_coef: never chosen: kl_control is adaptive at every point"),
    # Every combination's example config is built: with the penalty in the loss, the base's beta of 0 leaves the
    # adaptive controller nothing to scale (with it in the reward, the drawn kl_coef is in force and fine).
    ({"kl_in_reward": {"type": "categorical", "choices": [True, False]}, "kl_coef": ESTIMATOR_SPACE["kl_coef"]},
     {"advantage_estimator": "grpo", "kl_target": 6.0, "beta": 0.0},
     "base.beta: must be > 0 when kl_target is set (the adaptive controller scales it), got 0.0 (at kl_in_reward "
     "false)"),
    # Every num_generations choice against every rollout_batch_size choice: 8 cannot split a rollout of 4.
    ({"advantage_estimator": ALL_ESTIMATORS, "num_generations": {"type": "categorical", "choices": [2, 4, 8]},
      "rollout_batch_size": {"type": "categorical", "choices": [16, 4]}}, {},
     "search_space.num_generations: num_generations 8 does not divide rollout_batch_size 4; each rollout batch must "
     "hold whole groups"),
    # The base's rollout batch when the rollout is not searched: 4 x 1.
    ({"advantage_estimator": ALL_ESTIMATORS, "num_generations": {"type": "categorical", "choices": [2, 8]}},
     {"per_device_train_batch_size": 4},
     "search_space.num_generations: num_generations 8 does not divide the base's rollout batch "
     "(per_device_train_batch_size x gradient_accumulation_steps) 4"),
    # An int range: 3 is among 2..4.
    ({"advantage_estimator": ALL_ESTIMATORS, "num_generations": {"type": "int", "low": 2, "high": 4}}, {},
     "search_space.num_generations: num_generations 3 does not divide the base's rollout batch"),
    # num_generations unsearched: the group estimators' default group of 4 against a rollout of 2.
    ({"advantage_estimator": ALL_ESTIMATORS, "rollout_batch_size": {"type": "categorical", "choices": [8, 2]}}, {},
     "search_space.rollout_batch_size: num_generations 4 (PPOConfig's default for advantage_estimator grpo) does "
     "not divide rollout_batch_size 2"),
    ({"advantage_estimator": ALL_ESTIMATORS, "num_generations": {"type": "categorical", "choices": [4, 1]}}, {},
     "search_space.num_generations: num_generations 1 is too few for advantage_estimator grpo, which compares the "
     "responses to one prompt (>= 2)"),
    ({"advantage_estimator": ALL_ESTIMATORS, "num_generations": {"type": "float", "low": 2, "high": 4}}, {},
     "search_space.num_generations: must be int or categorical"),
    ({"advantage_estimator": {"type": "categorical", "choices": ["gae", "grpoo"]}}, {},
     "search_space.advantage_estimator: 'grpoo' is not an advantage estimator (did you mean 'grpo'?); expected one "
     "of gae, grpo, rloo, reinforce_pp, reinforce_pp_baseline"),
    ({"advantage_estimator": {"type": "categorical", "choices": ["gae", "ppo"]}}, {},
     "search_space.advantage_estimator: 'ppo' is not an advantage estimator; expected one of gae, grpo, rloo"),
    ({"advantage_estimator": {"type": "float", "low": 0, "high": 1}}, {},
     "search_space.advantage_estimator: must be categorical, with choices from gae, grpo"),
    ({"kl_in_reward": {"type": "categorical", "choices": ["yes", "no"]}}, {},
     "search_space.kl_in_reward: 'yes' is not a value of kl_in_reward; expected one of true, false, null"),
    ({"advantage_estimator": {"type": "categorical", "choices": ["grpo"]},
      "scale_rewards": {"type": "categorical", "choices": ["group", "std"]}}, {},
     "search_space.scale_rewards: 'std' is not a value of scale_rewards; expected one of group, batch, none"),
])
def test_study_files_that_cannot_run_fail_with_one_line(
    search_space: dict[str, Any], base: dict[str, Any], message: str,
) -> None:
    with pytest.raises(StudySpecError) as raised:
        spec_of(search_space, base)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value), str(raised.value)


def test_the_defaults_the_tuner_assumes_are_ppo_configs() -> None:
    for estimator in estimator_names():
        config = build_config({"task": "shortest_path", "advantage_estimator": estimator})
        assert config.generations_per_prompt == default_generations(estimator)
        assert config.kl_penalty_in_reward == default_kl_in_reward(estimator)
        assert config.uses_critic == (estimator in (readers("value_learning_rate") or ()))
    fields = settable_fields()
    assert set(estimator_fields()) | set(KL_PLACEMENT_PARAMS) <= set(fields)
    assert readers("num_generations") == group_estimators()


def test_the_estimators_study_parses_and_every_point_it_draws_builds() -> None:
    spec = load_study_spec(ESTIMATORS_STUDY)
    estimators = spec.search_space["advantage_estimator"].choices
    assert spec.name == "estimators" and set(estimators) == {"gae", "grpo", "rloo", "reinforce_pp_baseline"}
    # One queued start per estimator, each a point of its own regime (grpo's beta, the others' kl_coef).
    assert [start.params["advantage_estimator"] for start in spec.enqueue] == list(estimators)
    assert all(start.skipped is None for start in spec.enqueue)
    for start in spec.enqueue:
        coefficient = "beta" if start.params["advantage_estimator"] == "grpo" else "kl_coef"
        assert set(start.params) & {"kl_coef", "beta"} == {coefficient}
    walked = walk(spec, trials=200, seed=3)
    assert {params["advantage_estimator"] for params, _ in walked} == set(estimators)
    for params, config in walked:
        assert config.advantage_estimator == params["advantage_estimator"]
        assert config.local_batch_size % config.generations_per_prompt == 0
        assert config.eval_steps == 0.25 and config.total_episodes == 1536


def test_queued_starts_on_an_estimator_space_are_handed_out_as_fitted(tmp_path: Path) -> None:
    from tuner.search.warm_start import enqueue_warm_starts

    spec = load_study_spec(ESTIMATORS_STUDY)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'e.db'}", direction="maximize")
    enqueue_warm_starts(study, spec.enqueue)
    for start in spec.enqueue:
        trial = study.ask()
        values = suggest_params(trial, spec.search_space, spec.base)
        assert trial.params == start.params
        assert build_config({**spec.base, **values}).advantage_estimator == start.params["advantage_estimator"]
        study.tell(trial, 0.0)
