"""A study that names its target trainer (``target:``): its trials compute what that trainer computes, so its winner
exports exactly; a study whose fixed or searched values the target cannot compute is refused when the file loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.studies import write_study

from ppo_core import PPOConfig
from ppo_tune.cli import main
from tuner.exports import differences
from tuner.study.study_file import load_study_spec
from tuner.study.target import target_problem

GROUP = {"advantage_estimator": "grpo", "num_generations": 4}


def test_the_targets_profile_fills_the_base_and_its_winner_exports_exactly(tmp_path: Path, tiny_lm_dir: Path,
                                                                             prompts_file: Path) -> None:
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file, target="verl", base=GROUP))
    assert spec.target == "verl" and spec.base["scale_rewards_epsilon"] == 1e-6  # verl's fixed GRPO epsilon
    assert spec.mapping["target"] == "verl"  # stored with the study, for a resume and the dashboard
    config = PPOConfig(**{**spec.base, "learning_rate": 3e-4}).to_dict()
    assert target_problem("verl", config) is None
    # The same trial without the target would not have been exact there.
    assert any("scale_rewards_epsilon" in line for line in differences("verl", {**config,
                                                                               "scale_rewards_epsilon": 1e-4}))


def test_trl_rloo_study_trains_with_its_whole_response_ratio(tmp_path: Path, tiny_lm_dir: Path,
                                                             prompts_file: Path) -> None:
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file, target="trl-rloo",
                                       base={"advantage_estimator": "rloo", "num_generations": 4}))
    assert spec.base["importance_sampling_level"] == "sequence_sum"
    assert spec.base["loss_type"] == "seq_mean_token_mean"


@pytest.mark.parametrize(("target", "base", "search_space", "message"), [
    ("verl", {**GROUP, "scale_rewards_epsilon": 1e-4}, {},
     "target verl: at the base, scale_rewards_epsilon=0.0001: verl's grpo adds 1e-06"),
    ("trl-rloo", {"advantage_estimator": "rloo", "num_generations": 4},
     {"loss_type": {"type": "categorical", "choices": ["seq_mean_token_mean", "token_mean"]}},
     "target trl-rloo: at search_space.loss_type token_mean, importance_sampling_level=sequence_sum, "
     "loss_type=token_mean: RLOOTrainer clips"),
    ("verl", {"advantage_estimator": "reinforce_pp_baseline", "num_generations": 4},
     {"kl_coef": {"type": "float", "low": 0.01, "high": 0.1}},
     "advantage_estimator=reinforce_pp_baseline with the KL in the reward"),
    ("trl-grpo", GROUP, {"dual_clip": {"type": "float", "low": 2.0, "high": 4.0}},
     "target trl-grpo: at search_space.dual_clip 2.0, dual_clip=2.0: GRPOTrainer has no dual clip"),
    ("deepspeed", {}, {}, "target: unknown trainer 'deepspeed' (expected one of trl-ppo, trl-grpo, trl-rloo, verl, "
                          "openrlhf)"),
])
def test_a_study_its_target_cannot_compute_exits_2_naming_the_difference(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str], target: str,
    base: dict, search_space: dict, message: str,
) -> None:
    space = {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True}, **search_space}
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, target=target, base=base, search_space=space)
    assert main(["run", str(path), "--storage", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and message in error, error
    assert not (tmp_path / "x.db").exists()


def test_differences_only_at_extremes_do_not_refuse_a_target(tmp_path: Path, tiny_lm_dir: Path,
                                                             prompts_file: Path) -> None:
    # verl clamps its k3 KL at 10 per token: said by the export, not a reason to refuse a GRPO study with a KL loss.
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file, target="verl", base={**GROUP,
                                                                                                "beta": 0.04}))
    config = PPOConfig(**spec.base).to_dict()
    assert any("clamps" in line for line in differences("verl", config))
    assert target_problem("verl", config) is None
