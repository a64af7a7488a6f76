"""A TRL study written in GRPOConfig's and RLOOConfig's own names: read into ppo-tune's config, and printed back by
the export, field for field, with the values written; what TRL means otherwise by a shared name is read TRL's way;
what ppo-tune cannot carry is one line naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ppo_core.config.io import build_config
from ppo_tune.cli import main
from tuner.study.study_file import StudySpecError, parse_study
from tuner.trl_trial.arguments import trial_arguments

STUDY = {"name": "named", "n_trials": 1, "sampler": {"name": "grid"},
         "objectives": [{"metric": "objective/scores", "direction": "maximize"}]}
# A GRPOConfig, ModelConfig and ScriptArguments as a `trl grpo` user writes them.
GRPO_NAMED = {
    "model_name_or_path": "/models/policy", "dataset_name": "/data/prompts.jsonl",
    "reward_funcs": ["my_rewards.lengthy"], "learning_rate": 2e-5, "beta": 0.04, "num_generations": 4,
    "per_device_train_batch_size": 8, "steps_per_generation": 4, "gradient_accumulation_steps": 2,
    "num_iterations": 2, "max_steps": 40, "warmup_steps": 8, "epsilon": 0.2, "epsilon_high": 0.28,
    "max_completion_length": 24, "loss_type": "dr_grpo", "temperature": 0.9, "scale_rewards": "batch",
}


def spec_of(trainer: str, base: dict[str, Any], search_space: dict[str, Any] | None = None,
            tmp_path: Path = Path("/tmp")) -> Any:
    space = search_space or {"seed": {"type": "categorical", "choices": [0]}}
    return parse_study({**STUDY, "trainer": trainer, "base": base, "search_space": space}, tmp_path / "s.yaml",
                       storage=f"sqlite:///{tmp_path}/s.db")


def trl_arguments(trainer: str, spec: Any) -> dict[str, Any]:
    point = {**spec.base, **{name: param.choices[0] for name, param in spec.search_space.items()}}
    arguments = trial_arguments(trainer, build_config(point))
    return {**arguments.config, **arguments.model, **arguments.script}


def test_a_grpo_study_in_trls_names_runs_and_exports_exactly_what_it_wrote(tmp_path: Path) -> None:
    spec = spec_of("trl-grpo", dict(GRPO_NAMED), tmp_path=tmp_path)
    # ppo-tune's names for the same run: TRL's S micro-batches a generation, G a step, are our accumulation S and
    # S / G mini-batches; 40 optimizer steps of 2 mini-batches x 2 epochs are 10 updates of 32 episodes.
    assert {key: spec.base[key] for key in ("sft_model_path", "num_ppo_epochs", "cliprange", "cliprange_high",
                                             "response_length", "gradient_accumulation_steps", "num_mini_batches",
                                             "total_episodes", "warmup_steps", "loss_type", "reward_funcs",
                                             "advantage_estimator", "task")} == {
        "sft_model_path": "/models/policy", "num_ppo_epochs": 2, "cliprange": 0.2, "cliprange_high": 0.28,
        "response_length": 24, "gradient_accumulation_steps": 4, "num_mini_batches": 2, "total_episodes": 320,
        "warmup_steps": 2, "loss_type": "seq_mean_token_sum_norm", "reward_funcs": ["my_rewards:lengthy"],
        "advantage_estimator": "grpo", "task": None}
    printed = trl_arguments("trl-grpo", spec)
    for key, value in GRPO_NAMED.items():
        assert printed[key] == value, key  # the export gives back every field as written


def test_an_rloo_studys_beta_is_its_rewards_kl_penalty(tmp_path: Path) -> None:
    base = {"model_name_or_path": "/models/policy", "dataset_name": "/data/p.jsonl", "reward_funcs": ["my_rewards.f"],
            "beta": 0.05, "num_generations": 4, "num_iterations": 1}
    spec = spec_of("trl-rloo", base, tmp_path=tmp_path)
    assert spec.base["kl_coef"] == 0.05 and "beta" not in spec.base and spec.base["advantage_estimator"] == "rloo"
    assert trl_arguments("trl-rloo", spec)["beta"] == 0.05


def test_searched_trl_names_are_stored_under_ppo_tunes_and_loss_types_translated(tmp_path: Path) -> None:
    spec = spec_of("trl-grpo", {"num_generations": 4}, {
        "epsilon": {"type": "float", "low": 0.1, "high": 0.3},
        "num_iterations": {"type": "int", "low": 1, "high": 4},
        "loss_type": {"type": "categorical", "choices": ["grpo", "dapo", "bnpo"]},
        "gradient_accumulation_steps": {"type": "categorical", "choices": [1, 2]},
    }, tmp_path)
    assert set(spec.search_space) == {"cliprange", "num_ppo_epochs", "loss_type", "gradient_accumulation_steps"}
    assert spec.search_space["loss_type"].choices == ("seq_mean_token_mean", "token_mean", "bnpo")


def test_a_ppo_core_study_keeps_ppo_tunes_meaning_of_a_shared_name(tmp_path: Path) -> None:
    spec = spec_of("ppo_core", {"gradient_accumulation_steps": 4, "num_mini_batches": 2}, tmp_path=tmp_path)
    assert (spec.base["gradient_accumulation_steps"], spec.base["num_mini_batches"]) == (4, 2)


@pytest.mark.parametrize(("base", "space", "message"), [
    ({"top_p": 0.9}, None, "base.top_p: a field of TRL's GRPOConfig that ppo-tune does not carry to its trials"),
    ({}, {"use_vllm": {"type": "categorical", "choices": [True]}}, "search_space.use_vllm: a field of TRL's"),
    ({"epsilon": 0.2, "cliprange": 0.3}, None, "base.epsilon: TRL's name for cliprange, which the section also sets"),
    ({"steps_per_generation": 3, "gradient_accumulation_steps": 2}, None,
     "base.steps_per_generation: 3 is not a multiple of gradient_accumulation_steps 2"),
    ({"steps_per_generation": 4, "num_mini_batches": 2}, None, "base.num_mini_batches: a TRL study counts"),
    ({"max_steps": 10}, {"per_device_train_batch_size": {"type": "categorical", "choices": [4, 8]}},
     "base.max_steps: with the batch or the epochs searched"),
    ({"max_steps": 10, "num_iterations": 4}, None, "base.max_steps: 10 is not a whole number of PPO updates"),
    ({}, {"steps_per_generation": {"type": "categorical", "choices": [2, 4]}},
     "search_space.steps_per_generation: in TRL's meaning it sets two of ppo-tune's fields"),
    ({"warmup_steps": 3, "num_iterations": 2}, None, "base.warmup_steps: 3 optimizer steps is not a whole number"),
])
def test_what_a_trl_study_cannot_mean_is_one_line_naming_the_field(
        tmp_path: Path, base: dict[str, Any], space: dict[str, Any] | None, message: str) -> None:
    with pytest.raises(StudySpecError) as caught:
        spec_of("trl-grpo", {"num_generations": 4, **base}, space, tmp_path)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value), caught.value


def test_ppo_tune_run_refuses_a_field_trl_has_and_ppo_tune_cannot_carry(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "trainer": "trl-grpo", "storage": f"sqlite:///{tmp_path}/named.db",
                                    "base": {"num_generations": 4, "mask_truncated_completions": True},
                                    "search_space": {"epsilon": {"type": "float", "low": 0.1, "high": 0.3}}}))
    assert main(["run", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert "base.mask_truncated_completions: a field of TRL's GRPOConfig" in error and len(error.splitlines()) == 1
    assert not (tmp_path / "named.db").exists()
