"""Warm starts: TRL's defaults, the seed guidance's starting point and explicit values as points of a search space,
fitted to it with notes, and queued as the first trials of a new study only."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import optuna
import pytest
from helpers.studies import TESTS_DIR, load, write_study
from optuna.trial import TrialState

from ppo_core.config.ppo_config import settable_fields
from tuner.run.worker import run_worker
from tuner.search.space import ParamSpec, batch_hierarchy, suggest_params
from tuner.search.warm_start import (
    UnfitValue,
    WarmStart,
    WarmStartError,
    enqueue_warm_starts,
    fit_value,
    geometric_middle,
    guidance_values,
    space_values,
    trl_default_values,
    warm_start_points,
)
from tuner.store.attrs import KL_HISTORY_ATTR, WARM_START_ATTR
from tuner.store.database import open_storage
from tuner.study.spec_record import record_spec
from tuner.study.study_file import load_study_spec, parse_param

# The quickstart's space, as the study file's parser reads it.
QUICKSTART_SPACE = {
    name: parse_param(name, raw) for name, raw in {
        "learning_rate": {"type": "float", "low": 1e-6, "high": 3e-4, "log": True},
        "value_learning_rate": {"type": "float", "low": 1e-5, "high": 1e-4, "log": True},
        "kl_control": {"type": "categorical", "choices": ["fixed", "adaptive"]},
        "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
        "kl_target": {"type": "float", "low": 3.0, "high": 12.0},
        "cliprange": {"type": "float", "low": 0.1, "high": 0.3},
        "num_ppo_epochs": {"type": "int", "low": 2, "high": 10},
        "rollout_batch_size": {"type": "categorical", "choices": [16, 32]},
        "mini_batch_size": {"type": "categorical", "choices": [4, 8, 16, 32, 64]},
    }.items()
}


@pytest.mark.parametrize(("low", "high", "middle"), [
    (1e-6, 5e-5, 7.0710678e-6), (1e-5, 1e-4, 3.1622777e-5), (0.01, 0.2, 0.04472136), (4, 64, 16), (64, 1024, 256),
    (2, 10, 4.472136), (3.0, 3.0, 3.0),
])
def test_geometric_middle(low: float, high: float, middle: float) -> None:
    assert math.isclose(geometric_middle(low, high), middle, rel_tol=1e-7)
    # As many times low as high is times it.
    assert math.isclose(geometric_middle(low, high) / low, high / geometric_middle(low, high))


def test_seed_guidance_starts_at_its_stated_values_and_the_middles_of_its_ranges() -> None:
    values = guidance_values()
    assert {k: values[k] for k in ("cliprange", "lam", "vf_coef", "kl_control")} == \
        {"cliprange": 0.2, "lam": 0.95, "vf_coef": 0.5, "kl_control": "fixed"}
    assert math.isclose(values["learning_rate"], 7.07e-6, rel_tol=1e-3)
    assert math.isclose(values["value_learning_rate"], 3.16e-5, rel_tol=1e-3)
    assert math.isclose(values["kl_coef"], 0.0447, rel_tol=1e-3)
    # sqrt(2 * 10) = 4.47 rounds down; the batch sizes' middles are whole, and stay ints.
    assert (values["num_ppo_epochs"], values["mini_batch_size"], values["rollout_batch_size"]) == (4, 16, 256)
    assert all(type(values[k]) is int for k in ("num_ppo_epochs", "mini_batch_size", "rollout_batch_size"))


def test_trl_defaults_are_ppo_configs_defaults_in_search_space_names() -> None:
    values = trl_default_values()
    fields = settable_fields()
    for name in ("learning_rate", "kl_coef", "cliprange", "num_ppo_epochs", "vf_coef", "lam"):
        assert values[name] == fields[name].default, name
    # TRL 1.12's PPOConfig: lr 3e-6, beta 0.05, 8 episodes a device in one mini-batch, no accumulation.
    assert (values["learning_rate"], values["kl_coef"], values["num_ppo_epochs"]) == (3e-6, 0.05, 4)
    assert values["value_learning_rate"] == values["learning_rate"]  # None: the policy's rate
    assert (values["kl_control"], values["rollout_batch_size"], values["mini_batch_size"]) == ("fixed", 8, 8)


def test_space_values_inverts_the_batch_hierarchy() -> None:
    fields = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8, "num_mini_batches": 4,
              "kl_target": 6.0, "learning_rate": 1e-5, "value_learning_rate": None}
    values = space_values(fields)
    assert (values["rollout_batch_size"], values["mini_batch_size"]) == (32, 8)
    assert values["kl_control"] == "adaptive" and values["value_learning_rate"] == 1e-5
    assert batch_hierarchy(32, 8, micro_batch_cap=4) == {k: fields[k] for k in (
        "per_device_train_batch_size", "gradient_accumulation_steps", "num_mini_batches")}


def spec(**raw: Any) -> ParamSpec:
    return parse_param("x", raw)


@pytest.mark.parametrize(("param", "value", "fitted", "note"), [
    (spec(type="float", low=1e-5, high=1e-4, log=True), 3e-6, 1e-5, "x 3e-06 is below the range's low 1e-05; "
                                                                     "clipped to 1e-05"),
    (spec(type="float", low=0.1, high=0.3), 0.5, 0.3, "x 0.5 is above the range's high 0.3; clipped to 0.3"),
    (spec(type="float", low=0.1, high=0.3), 0.2, 0.2, None),
    (spec(type="float", low=0.1, high=0.3, step=0.05), 0.22, 0.2, "x 0.22 rounded to 0.2 (the step 0.05)"),
    (spec(type="float", low=0.1, high=0.3, step=0.05), 0.3, 0.3, None),  # 0.1 + 4 * 0.05 is 0.30000000000000004
    (spec(type="float", low=0.0, high=1.0, step=0.3), 1.0, 0.9, "x 1 rounded to 0.9 (the step 0.3)"),  # top of grid
    (spec(type="int", low=2, high=10), 4.5, 5, "x 4.5 rounded to 5 (whole numbers only)"),
    (spec(type="int", low=2, high=10), 12, 10, "x 12 is above the range's high 10; clipped to 10"),
    (spec(type="int", low=2, high=10, step=4), 7, 6, "x 7 rounded to 6 (the step 4)"),
    (spec(type="categorical", choices=[16, 32]), 8, 16, "x 8 is not among the choices [16, 32]; the nearest, 16, "
                                                        "taken"),
    (spec(type="categorical", choices=[16, 32]), 256, 32, "x 256 is not among the choices [16, 32]; the nearest, "
                                                          "32, taken"),
    (spec(type="categorical", choices=[4, 16]), 8, 4, "x 8 is not among the choices [4, 16]; the nearest, 4, taken"),
    (spec(type="categorical", choices=[4, 8]), 8.0, 8, None),  # 8.0 is the choice 8
    (spec(type="categorical", choices=["fixed", "adaptive"]), "adaptive", "adaptive", None),
])
def test_fit_value(param: ParamSpec, value: Any, fitted: Any, note: str | None) -> None:
    result, said = fit_value(param, value)
    assert math.isclose(result, fitted) if isinstance(fitted, float) else (result == fitted
                                                                          and type(result) is type(fitted))
    assert said == note


@pytest.mark.parametrize(("param", "value"), [
    (spec(type="categorical", choices=["fixed", "adaptive"]), "fixd"),
    (spec(type="categorical", choices=[1, 2]), True),  # True == 1 in Python, but it is no choice here
    (spec(type="categorical", choices=[1, "two"]), 3),  # nearest needs every choice a number
    (spec(type="float", low=0.1, high=0.3), "high"),
])
def test_values_no_choice_can_stand_for(param: ParamSpec, value: Any) -> None:
    with pytest.raises(UnfitValue):
        fit_value(param, value)


def test_presets_on_the_quickstart_space() -> None:
    trl, guidance = warm_start_points(QUICKSTART_SPACE, ["trl_defaults", "seed_guidance"])
    assert trl == WarmStart("trl_defaults", {
        "kl_control": "fixed", "learning_rate": 3e-6, "value_learning_rate": 1e-5, "kl_coef": 0.05,
        "cliprange": 0.2, "num_ppo_epochs": 4, "rollout_batch_size": 16, "mini_batch_size": 8,
    }, notes=(
        "trl_defaults: value_learning_rate 3e-06 is below the range's low 1e-05; clipped to 1e-05",
        "trl_defaults: rollout_batch_size 8 is not among the choices [16, 32]; the nearest, 16, taken",
    ))
    assert guidance.params["rollout_batch_size"] == 32 and guidance.params["mini_batch_size"] == 16
    assert "kl_target" not in guidance.params and guidance.params["kl_control"] == "fixed"
    assert guidance.notes == ("seed_guidance: rollout_batch_size 256 is not among the choices [16, 32]; the "
                              "nearest, 32, taken",)


def test_a_preset_the_space_cannot_hold_is_skipped_with_the_reason() -> None:
    space = {"kl_control": parse_param("kl_control", {"type": "categorical", "choices": ["adaptive"]}),
             "kl_target": parse_param("kl_target", {"type": "float", "low": 3.0, "high": 12.0})}
    (start,) = warm_start_points(space, ["trl_defaults"])
    assert start.params == {} and start.skipped == "kl_control: 'fixed' is not among the choices ['adaptive']"
    # Without kl_control the space is adaptive throughout, and TRL's PPOConfig sets no target.
    (start,) = warm_start_points({"kl_target": space["kl_target"]}, ["seed_guidance"])
    assert start.skipped == "kl_target: seed_guidance sets none"


def test_explicit_values_with_what_they_imply_and_trl_defaults_for_the_rest() -> None:
    # PyYAML reads 1e-5 (no dot) as a string; the study file means a number.
    (start,) = warm_start_points(QUICKSTART_SPACE, [{"learning_rate": "1e-5", "kl_target": 6}])
    assert start.label == "enqueue[0]"
    assert start.params == {"kl_control": "adaptive", "learning_rate": 1e-5, "value_learning_rate": 1e-5,
                            "kl_target": 6.0, "cliprange": 0.2, "num_ppo_epochs": 4, "rollout_batch_size": 16,
                            "mini_batch_size": 8}
    assert start.notes[0].startswith("enqueue[0]: gives no value for cliprange, num_ppo_epochs, rollout_batch_size, "
                                     "mini_batch_size; TRL's PPOConfig defaults used (cliprange 0.2,")
    assert start.notes[1] == "enqueue[0]: kl_control adaptive, value_learning_rate 1e-05, as a PPOConfig with the " \
                             "values given would have"
    # A rollout alone is one mini-batch, as TRL's num_mini_batches 1 has it.
    (start,) = warm_start_points(QUICKSTART_SPACE, [{"rollout_batch_size": 32}])
    assert start.params["mini_batch_size"] == 32


@pytest.mark.parametrize(("entry", "message"), [
    ("trl", "enqueue[0]: expected trl_defaults or seed_guidance, or a mapping of searched parameters to values, "
            "got 'trl'"),
    ({"lam": 0.9}, "enqueue[0].lam: not a searched parameter (the search space has learning_rate, "),
    ({"learning_rate": "fast"}, "enqueue[0].learning_rate: expected a number, got 'fast'"),
    ({"kl_control": "fixd"}, "enqueue[0].kl_control: 'fixd' is not among the choices ['fixed', 'adaptive']"),
    ({"kl_target": 6.0, "kl_coef": 0.1}, "enqueue[0].kl_coef: not used when kl_control is adaptive"),
    ({"kl_control": "fixed", "kl_target": 6.0}, "enqueue[0].kl_target: not used when kl_control is fixed"),
])
def test_wrong_entries_name_themselves(entry: Any, message: str) -> None:
    with pytest.raises(WarmStartError) as raised:
        warm_start_points(QUICKSTART_SPACE, [entry])
    assert str(raised.value).startswith(message), str(raised.value)


def test_warm_starts_are_queued_on_a_new_study_only(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'w.db'}", direction="maximize")
    starts = warm_start_points(QUICKSTART_SPACE, ["trl_defaults", "seed_guidance", {}])
    lines = enqueue_warm_starts(study, starts)
    assert "trl_defaults: queued as a first trial (kl_control fixed, learning_rate 3e-06, " in "\n".join(lines)
    assert lines[-1] == "enqueue[2]: the same point as trl_defaults; not queued twice"  # {}: all TRL's defaults
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [t.user_attrs[WARM_START_ATTR] for t in waiting] == ["trl_defaults", "seed_guidance"]
    # The sampler hands out the queued points first, exactly as fitted.
    for start in starts[:2]:
        trial = study.ask()
        suggest_params(trial, QUICKSTART_SPACE, {"per_device_train_batch_size": 16})
        assert trial.params == start.params
        study.tell(trial, 0.0)
    assert enqueue_warm_starts(study, starts) == []  # a resume: queued when the study began
    assert len(study.trials) == 2


@pytest.fixture
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Trial processes import the test reward functions by name, as users' own modules would be.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


@pytest.mark.usefixtures("reward_functions_importable")
def test_a_study_runs_its_warm_starts_first_and_sets_its_constraints(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    path = write_study(
        tmp_path, tiny_lm_dir, prompts_file, n_trials=2,
        search_space={"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True},
                      "cliprange": {"type": "float", "low": 0.1, "high": 0.3}},
        enqueue=["trl_defaults", {"learning_rate": 5e-4, "cliprange": 0.25}],
        constraints=[{"metric": "objective/kl", "reduce": "max", "max": 0.5}],
    )
    spec = load_study_spec(path)
    assert spec.enqueue[0].notes == ("trl_defaults: learning_rate 3e-06 is below the range's low 0.0001; clipped "
                                     "to 0.0001",)
    study = optuna.create_study(study_name=spec.name, storage=open_storage(spec.storage), directions=spec.directions)
    record_spec(study, spec, allow_changes=False)  # as ppo-tune marks a study it creates, before queuing
    # The worker may queue them itself as it opens the study; then it finds these and queues nothing more.
    assert enqueue_warm_starts(study, spec.enqueue)[-1].startswith("enqueue[1]: queued as a first trial")
    run_worker(spec, n_trials=2, timeout=None, threads=None)
    first, second = load(path).get_trials()
    assert (first.params, second.params) == ({"learning_rate": 1e-4, "cliprange": 0.2},
                                             {"learning_rate": 5e-4, "cliprange": 0.25})
    assert (first.user_attrs[WARM_START_ATTR], second.user_attrs[WARM_START_ATTR]) == ("trl_defaults", "enqueue[1]")
    for trial in (first, second):
        assert trial.state == TrialState.COMPLETE
        # max KL over the run, minus the budget: what a feasible trial keeps <= 0.
        assert trial.constraints == {"objective/kl (max) <= 0.5": max(trial.user_attrs[KL_HISTORY_ATTR]) - 0.5}


# A space that searches the estimator and the KL placement, with the knobs only some estimators read.
ESTIMATOR_SPACE = {
    name: parse_param(name, raw) for name, raw in {
        "advantage_estimator": {"type": "categorical", "choices": ["gae", "grpo", "rloo"]},
        "learning_rate": {"type": "float", "low": 1e-6, "high": 1e-4, "log": True},
        "value_learning_rate": {"type": "float", "low": 1e-6, "high": 1e-4, "log": True},
        "lam": {"type": "float", "low": 0.9, "high": 1.0},
        "kl_in_reward": {"type": "categorical", "choices": [True, False]},
        "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
        "beta": {"type": "float", "low": 0.005, "high": 0.2, "log": True},
        "num_generations": {"type": "categorical", "choices": [2, 4, 8]},
        "scale_rewards": {"type": "categorical", "choices": ["group", "none"]},
    }.items()
}


def test_presets_on_an_estimator_space_are_ppo_with_gae() -> None:
    trl, guidance = warm_start_points(ESTIMATOR_SPACE, ["trl_defaults", "seed_guidance"])
    # TRL's PPOConfig and the guidance are PPO with GAE, the KL penalty in the reward: no group knob, no beta.
    assert trl == WarmStart("trl_defaults", {"advantage_estimator": "gae", "kl_in_reward": True, "learning_rate": 3e-6,
                                             "value_learning_rate": 3e-6, "lam": 0.95, "kl_coef": 0.05})
    assert {k: guidance.params[k] for k in ("advantage_estimator", "kl_in_reward", "lam")} == \
        {"advantage_estimator": "gae", "kl_in_reward": True, "lam": 0.95}
    assert math.isclose(guidance.params["kl_coef"], 0.0447, rel_tol=1e-3) and guidance.notes == ()
    assert not {"beta", "num_generations", "scale_rewards"} & (set(trl.params) | set(guidance.params))


def test_an_entry_for_a_critic_free_estimator_gets_its_own_knobs_with_a_note() -> None:
    (start,) = warm_start_points(ESTIMATOR_SPACE, [{"advantage_estimator": "grpo", "learning_rate": 1e-5}])
    assert start.params == {"advantage_estimator": "grpo", "kl_in_reward": False, "learning_rate": 1e-5, "beta": 0.04,
                            "num_generations": 4, "scale_rewards": "group"}
    assert start.notes == (
        "enqueue[0]: kl_in_reward false, as a PPOConfig with the values given would have",
        "enqueue[0]: gives no value for beta, num_generations, scale_rewards, which TRL's PPOConfig lacks; "
        "PPOConfig's defaults for advantage_estimator grpo used (beta 0.04, num_generations 4, scale_rewards group)",
    )


def test_a_preset_on_a_critic_free_base_notes_the_knobs_it_has_no_value_for() -> None:
    space = {name: ESTIMATOR_SPACE[name] for name in ("learning_rate", "num_generations", "scale_rewards", "beta")}
    (trl,) = warm_start_points(space, ["trl_defaults"], base={"advantage_estimator": "grpo"})
    assert trl.params == {"learning_rate": 3e-6, "num_generations": 4, "scale_rewards": "group", "beta": 0.04}
    assert trl.notes == ("trl_defaults: gives no value for num_generations, scale_rewards, beta, which TRL's "
                         "PPOConfig lacks; PPOConfig's defaults for advantage_estimator grpo used (num_generations 4, "
                         "scale_rewards group, beta 0.04)",)
    # The base's estimator decides, as for a trial: rloo's groups are drawn, grpo's scaling and the loss's beta not.
    (rloo,) = warm_start_points({**space, "kl_coef": ESTIMATOR_SPACE["kl_coef"]}, ["trl_defaults"],
                                base={"advantage_estimator": "rloo"})
    assert rloo.params == {"learning_rate": 3e-6, "num_generations": 4, "kl_coef": 0.05}


@pytest.mark.parametrize(("entry", "message"), [
    ({"advantage_estimator": "gae", "num_generations": 4},
     "enqueue[0].num_generations: not used by advantage_estimator gae (only by grpo, rloo, reinforce_pp_baseline)"),
    # Left out, the estimator is TRL's: gae.
    ({"num_generations": 4}, "enqueue[0].num_generations: not used by advantage_estimator gae"),
    ({"advantage_estimator": "rloo", "scale_rewards": "none"},
     "enqueue[0].scale_rewards: not used by advantage_estimator rloo (only by grpo)"),
    ({"advantage_estimator": "grpo", "lam": 0.9}, "enqueue[0].lam: not used by advantage_estimator grpo (only by gae)"),
    ({"advantage_estimator": "grpo", "kl_coef": 0.1},
     "enqueue[0].kl_coef: not used with the KL penalty in the loss (kl_in_reward false)"),
    ({"advantage_estimator": "grpo", "kl_in_reward": True, "beta": 0.1},
     "enqueue[0].beta: not used with the KL penalty in the reward (kl_in_reward true)"),
])
def test_an_entry_value_its_own_point_would_not_use_names_itself(entry: Any, message: str) -> None:
    with pytest.raises(WarmStartError) as raised:
        warm_start_points(ESTIMATOR_SPACE, [entry])
    assert str(raised.value).startswith(message), str(raised.value)
