"""A stored study read once (tuner.study.stored_spec): the definition a study carries, typed, as the worker, the CLI and
the dashboard read it; a TRL study's searched fields under the names its trials stored them; nothing parsed stored
a second time."""

from __future__ import annotations

from pathlib import Path

from tuner.run.worker import open_study
from tuner.store.attrs import KL_GUARD_ATTR, OBJECTIVES_ATTR, SPEC_ATTR
from tuner.study.stored_spec import read_stored_spec
from tuner.study.study_file import parse_study

DEFINITION = {
    "name": "stored", "trainer": "trl-grpo",
    "objectives": [{"metric": "eval/gold_score", "direction": "maximize", "reduce": "mean_last_k", "k": 2}],
    "constraints": [{"metric": "eval/kl", "reduce": "last", "max": 10.0},
                    {"metric": "eval/kl", "reduce": "max", "max": 8.0}],
    "kl_guard": {"threshold": 12.0, "window": 4},
    "seed_policy": {"name": "racing"},
    "base": {"num_generations": 4, "eval_steps": 0.5},
    "search_space": {"epsilon": {"type": "float", "low": 0.1, "high": 0.3},
                     "learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True}},
}


def test_a_definition_is_read_into_typed_parts() -> None:
    stored = read_stored_spec({SPEC_ATTR: DEFINITION}, 1)
    assert (stored.trainer, stored.target) == ("trl-grpo", "trl-grpo")  # a TRL trainer is its own target
    assert [(o.metric, o.reduce, o.k) for o in stored.objectives] == [("eval/gold_score", "mean_last_k", 2)]
    assert stored.upper_limit("eval/kl") == 8.0 and stored.upper_limit("objective/kl") is None
    assert (stored.kl_guard.threshold, stored.kl_guard.window) == (12.0, 4)
    assert stored.racing


def test_a_trl_studys_searched_fields_are_read_under_the_names_its_trials_stored() -> None:
    # The file searches GRPOConfig's `epsilon`; its trials store the parameter as ppo-tune's `cliprange`, so a
    # report of the search space (edge findings) must read it so, or it matches no trial.
    stored = read_stored_spec({SPEC_ATTR: DEFINITION}, 1)
    assert set(stored.search_space) == {"cliprange", "learning_rate"}
    assert stored.search_space["cliprange"].name == "cliprange"


def test_a_section_that_no_longer_parses_reads_as_its_default_and_the_rest_still_reads() -> None:
    stale = {**DEFINITION, "kl_guard": {"threshold": "high"}, "objectives": "gold"}
    stored = read_stored_spec({SPEC_ATTR: stale}, 1)
    assert stored.kl_guard.threshold == 20.0 and stored.objectives == ()
    assert stored.upper_limit("eval/kl") == 8.0 and set(stored.search_space) == {"cliprange", "learning_rate"}


def test_a_spec_stored_under_the_key_definition_still_reads() -> None:
    # Every study stored so far carries its spec under "definition" (tuner.store.attrs.SPEC_ATTR): a study read
    # under any other key would look as if it stored none.
    stored = read_stored_spec({"definition": DEFINITION}, 1)
    assert stored.trainer == "trl-grpo" and set(stored.search_space) == {"cliprange", "learning_rate"}


def test_a_study_stored_before_definitions_keeps_what_it_recorded_apart() -> None:
    recorded = {KL_GUARD_ATTR: {"threshold": 7.0, "metric": "eval/kl"},
                OBJECTIVES_ATTR: [{"metric": "objective/scores", "direction": "maximize", "reduce": "last", "k": 1}]}
    stored = read_stored_spec(recorded, 1)
    assert (stored.kl_guard.threshold, stored.kl_guard.metric) == (7.0, "eval/kl")
    assert [o.metric for o in stored.objectives] == ["objective/scores"] and not stored.racing


def test_a_new_study_stores_its_definition_once(tmp_path: Path) -> None:
    # The worker stored the parsed KL guard and objectives beside the definition: two records of one fact.
    space = {"learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True}}
    definition = {**DEFINITION, "trainer": "ppo_core", "base": {"eval_steps": 0.5, "advantage_estimator": "grpo"},
                  "search_space": space}
    spec = parse_study(definition, tmp_path / "stored.yaml", storage=f"sqlite:///{tmp_path}/stored.db")
    study, _ = open_study(spec, heartbeat=False)
    assert SPEC_ATTR in study.user_attrs
    assert KL_GUARD_ATTR not in study.user_attrs and OBJECTIVES_ATTR not in study.user_attrs
    assert study.metric_names == ["eval/gold_score"]
    assert read_stored_spec(study.user_attrs, 1).kl_guard.threshold == 12.0
