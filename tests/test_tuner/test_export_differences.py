"""What each export says its target computes differently from the trial (tuner.exports.computes): exact where the
target can be set to compute the same, one line naming the difference where it cannot; the CLI prints those lines
on stderr. The peer-equivalence tests run the targets' own code on the settings these exports write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from ppo_core import PPOConfig
from ppo_tune.cli import main
from tuner.exports import TARGETS, differences, exported
from tuner.store.attrs import CONFIG_ATTR, SPEC_ATTR

# PPOConfig's keyword arguments: typed Any, since each field has a type of its own that the union of the values (what
# a plain dict is inferred as) does not fit.
GROUP: dict[str, Any] = dict(advantage_estimator="grpo", num_generations=4, per_device_train_batch_size=4,
                             gradient_accumulation_steps=4, response_length=16)


def _differences(fmt: str, **overrides: Any) -> list[str]:
    return differences(fmt, PPOConfig(**overrides).to_dict())


def _settings(fmt: str, **overrides: Any) -> dict[str, Any]:
    return {key: value for key, value, _ in exported(fmt, PPOConfig(**overrides).to_dict()).settings}


def test_trl_grpo_turns_off_the_ratio_on_the_kl_term() -> None:
    # Row 1: TRL multiplies k3 by the importance ratio unless use_bias_correction_kl is off; ppo-tune's is beta k3.
    assert _settings("trl-grpo", **GROUP, beta=0.04)["use_bias_correction_kl"] is False
    assert "use_bias_correction_kl" not in _settings("trl-grpo", **GROUP, beta=0.0)
    assert not _differences("trl-grpo", **GROUP, beta=0.04)


@pytest.mark.parametrize(("mini_batches", "accumulation", "loss_type", "trl_loss", "exact"), [
    (2, 2, "token_mean", "bnpo", True),  # one micro-batch a step: its own mean is the step's
    (1, 4, "token_mean", "dapo", True),  # one step a rollout: dapo's rollout tokens are the step's
    (2, 4, "token_mean", "dapo", False),  # row 2: dapo divides by the rollout's mean tokens per step
    (2, 4, "bnpo", "bnpo", True),
    (2, 4, "seq_mean_token_mean", "grpo", True),
    (2, 4, "seq_mean_token_sum_norm", "dr_grpo", True),
])
def test_trl_grpo_loss_type_is_exact_where_grpotrainer_has_the_same(mini_batches: int, accumulation: int,
                                                                     loss_type: str, trl_loss: str,
                                                                     exact: bool) -> None:
    config = {**GROUP, "gradient_accumulation_steps": accumulation, "num_mini_batches": mini_batches,
              "loss_type": loss_type}
    assert _settings("trl-grpo", **config)["loss_type"] == trl_loss
    found = _differences("trl-grpo", **config)
    assert (not found) == exact, found
    if not exact:
        assert found[0].startswith("loss_type=token_mean: GRPOTrainer's dapo")


def test_verl_gets_the_dual_clip_the_trial_had_or_none_that_binds() -> None:
    # Row 3: verl dual-clips at 3.0 unless told; ppo-tune has no dual clip unless dual_clip is set.
    assert _settings("verl", dual_clip=3.0)["actor_rollout_ref.actor.clip_ratio_c"] == 3.0
    assert _settings("verl")["actor_rollout_ref.actor.clip_ratio_c"] >= 1e9
    assert _settings("openrlhf", dual_clip=2.5)["actor.dual_clip"] == 2.5
    assert any(line.startswith("dual_clip=3.0: GRPOTrainer has no dual clip")
               for line in _differences("trl-grpo", **GROUP, dual_clip=3.0))


@pytest.mark.parametrize(("gamma", "kl_coef", "differs"), [(1.0, 0.0, False), (0.9, 0.0, True), (1.0, 0.05, True)])
def test_verl_reinforce_pp_baseline_differs_with_kl_in_the_reward_or_discounting(gamma: float, kl_coef: float,
                                                                                 differs: bool) -> None:
    # Row 4: verl puts the group-centred summed reward on every token, undiscounted.
    found = _differences("verl", advantage_estimator="reinforce_pp_baseline", gamma=gamma, kl_coef=kl_coef,
                         num_generations=4)
    named = [line for line in found if line.startswith("advantage_estimator=reinforce_pp_baseline")]
    assert bool(named) == differs, found


@pytest.mark.parametrize(("level", "loss_type", "exact"), [("sequence_sum", "seq_mean_token_mean", True),
                                                           ("token", "token_mean", False),
                                                           ("sequence_sum", "token_mean", False)])
def test_trl_rloo_is_exact_only_with_its_whole_response_ratio(level: str, loss_type: str, exact: bool) -> None:
    # Row 5: RLOOTrainer clips the whole response's probability ratio and averages over responses.
    found = _differences("trl-rloo", advantage_estimator="rloo", num_generations=4, kl_coef=0.05,
                         importance_sampling_level=level, loss_type=loss_type)
    assert (not found) == exact, found


@pytest.mark.parametrize(("fmt", "theirs"), [("verl", 1e-6), ("openrlhf", 1e-9), ("trl-grpo", 1e-4)])
def test_grpo_scale_rewards_epsilon_is_exact_only_at_the_targets_constant(fmt: str, theirs: float) -> None:
    # Row 6: each target adds its own fixed epsilon to the group's standard deviation.
    def named(epsilon: float) -> list[str]:
        return [line for line in _differences(fmt, **GROUP, scale_rewards_epsilon=epsilon)
                if line.startswith("scale_rewards_epsilon=")]

    assert not named(theirs)
    other = 1e-3
    assert named(other) and f"{theirs!r}" in named(other)[0]
    assert not [line for line in _differences(fmt, **GROUP, scale_rewards="none", scale_rewards_epsilon=other)
                if line.startswith("scale_rewards_epsilon=")]  # nothing divides, so nothing differs


@pytest.mark.parametrize("fmt", sorted(TARGETS))
def test_every_difference_is_one_line_and_in_the_exported_file(fmt: str) -> None:
    config = PPOConfig(**GROUP, dual_clip=3.0, scale_rewards_epsilon=1e-3, entropy_coef=0.01,
                       importance_sampling_level="sequence").to_dict()
    export = exported(fmt, config)
    assert export.differences, fmt
    text = export.render(TARGETS[fmt].layout)
    for line in export.differences:
        assert "\n" not in line and f"#   {line}\n" in text


@pytest.fixture(scope="module")
def grpo_study(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('study') / 'differences.db'}"
    study = optuna.create_study(storage=url, study_name="differences", direction="maximize")
    study.set_user_attr(SPEC_ATTR, {"name": "differences", "target": "trl-grpo"})
    config = PPOConfig(**GROUP, beta=0.04).to_dict()
    study.add_trial(create_trial(state=TrialState.COMPLETE, value=1.0, params={"learning_rate": 1e-6},
                                 distributions={"learning_rate": FloatDistribution(1e-7, 1e-4, log=True)},
                                 user_attrs={CONFIG_ATTR: config}))
    return url


def test_best_prints_the_differences_on_stderr_and_nothing_when_exact(grpo_study: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["best", "differences", "--storage", grpo_study, "--format", "trl-grpo"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["best", "differences", "--storage", grpo_study, "--format", "verl"]) == 0
    captured = capsys.readouterr()
    first, *lines = captured.err.splitlines()
    assert first == "ppo-tune best: study 'differences' tuned for trl-grpo; verl computes differently:"
    assert lines and all(line.startswith("ppo-tune best: verl is not exact: ") for line in lines)
    assert any("scale_rewards_epsilon=0.0001" in line for line in lines)
    assert "# Not exact" in captured.out


def test_shipped_studies_winners_export_exactly_or_say_so() -> None:
    # Every shipped study's enqueued starts (the configurations it tries first) against every target: each export is
    # exact or names its differences, one line each, in the file as on stderr.
    import yaml

    from tuner.search.space import config_values
    from tuner.study.study_file import build_config, load_study_spec

    studies = [path for path in sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.yaml"))
               if "search_space" in yaml.safe_load(path.read_text())]  # train.yaml is a run config
    checked, exact = 0, set()
    for path in studies:
        spec = load_study_spec(path)
        for start in [start for start in spec.enqueue if start.skipped is None]:
            config = build_config({**spec.base, **config_values(start.params, spec.base)}).to_dict()
            for fmt, target in TARGETS.items():
                export = exported(fmt, config)
                text = export.render(target.layout)
                assert ("# Not exact" in text) == bool(export.differences), (path.name, fmt)
                checked += 1
                if not export.differences:
                    exact.add((config["advantage_estimator"], fmt))
    assert checked
    # The estimators study's GRPO and GAE starts run exactly as TRL's GRPOTrainer and verl's PPO would.
    assert {("grpo", "trl-grpo"), ("gae", "verl")} <= exact, exact


def test_docs_exactness_table_is_the_exports_own() -> None:
    from tuner.exports.table import BEGIN, END, block

    page = (Path(__file__).resolve().parents[2] / "docs" / "exports.md").read_text()
    assert page[page.index(BEGIN): page.index(END) + len(END)] == block(), \
        "regenerate with: python -m tuner.exports.table"


def test_gspo_exports_as_verl_and_openrlhf_gspo_where_it_computes_the_same() -> None:
    # verl's gspo weighs each token's gradient by its own advantage: GSPO where a response has one advantage.
    assert _settings("verl", **GROUP, importance_sampling_level="sequence")[
        "actor_rollout_ref.actor.policy_loss.loss_mode"] == "gspo"
    assert not [line for line in _differences("verl", **GROUP, importance_sampling_level="sequence")
                if line.startswith("importance")]
    assert any(line.startswith("importance_sampling_level=sequence with gae's per-token advantages")
               for line in _differences("verl", importance_sampling_level="sequence"))
    # OpenRLHF's gspo averages over responses whatever its loss_agg_mode.
    assert _settings("openrlhf", **GROUP, importance_sampling_level="sequence")["actor.policy_loss_type"] == "gspo"
    assert not [line for line in _differences("openrlhf", **GROUP, importance_sampling_level="sequence",
                                              loss_type="seq_mean_token_mean") if line.startswith("importance")]
    assert any(line.startswith("importance_sampling_level=sequence, loss_type=token_mean")
               for line in _differences("openrlhf", **GROUP, importance_sampling_level="sequence"))
