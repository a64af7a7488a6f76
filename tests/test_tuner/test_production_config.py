"""``ppo-tune best --total-episodes N [--rule R]``: the chosen trial's configuration for a longer production run, on a
stored study with known answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from ppo_core.config.ppo_config import PPOConfig
from ppo_tune.cli import main
from tuner.production.horizon import PRODUCTION_RULE
from tuner.store.attrs import CONFIG_ATTR
from tuner.store.database import create_engine
from tuner.store.records import TrialStore, create_tables

TUNED_LR = 4e-5
FINAL_KL = 1.6


@pytest.fixture(scope="module")
def study_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A study as `ppo-tune run` leaves it: completed trials of 1,536 episodes in updates of 16, the best (trial 1)
    with held-out KL along its run, ending at FINAL_KL."""
    url = f"sqlite:///{tmp_path_factory.mktemp('study') / 'production.db'}"
    study = optuna.create_study(storage=url, study_name="production", direction="maximize")
    for number, (value, lr) in enumerate([(0.5, 1e-5), (0.8, TUNED_LR)]):
        config = PPOConfig(learning_rate=lr, total_episodes=1536, per_device_train_batch_size=16, kl_coef=0.05,
                           seed=number).to_dict()
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=value, params={"learning_rate": lr},
                                     distributions={"learning_rate": FloatDistribution(1e-7, 1e-4, log=True)},
                                     user_attrs={CONFIG_ATTR: config}))
    engine = create_engine(url)
    create_tables(engine)
    best = study.get_trials()[1]
    store = TrialStore(engine, "production", best._trial_id, best.number)
    for update, kl in ((48, 0.7), (96, FINAL_KL)):
        store.write_metrics(update, {"episode": update * 16, "eval/kl": kl, "objective/kl": kl + 0.3})
        store.write_metrics(update + 1, {"episode": update * 16 + 16, "objective/kl": 9.0})  # no held-out KL here
    return url


def best(url: str, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str, str]:
    status = main(["best", "production", "--storage", url, *flags])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_step_mass_rule_scales_the_learning_rate_and_says_so(study_url: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = best(study_url, capsys, "--total-episodes", "6144", "--rule", "step_mass")
    assert status == 0
    config = yaml.safe_load(out)
    assert config["total_episodes"] == 6144 and config["learning_rate"] == pytest.approx(TUNED_LR / 4)
    comments = [line for line in out.splitlines() if line.startswith("# ")]
    assert comments[0].startswith("# best trial 1")
    assert any(line.startswith("# carried to the production run by the rule step_mass") for line in comments)
    assert "# learning_rate=1e-05 (tuned 4e-05): keeps the step mass" in out
    assert "# total_episodes=6144 (tuned 1536)" in out
    assert "ppo-tune validate production" not in err  # the measured rule: nothing to warn of


def test_without_a_rule_a_longer_run_takes_the_measured_rule_and_cites_its_measurement(
        study_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    # benchmarks.horizon_transfer measured step_mass to keep a winner where it was tuned at 4x (benchmarks/README.md):
    # a longer run with no --rule keeps the step mass, cites that measurement, and tells of no unmeasured rule.
    status, out, err = best(study_url, capsys, "--total-episodes", "6144")
    assert status == 0
    assert PRODUCTION_RULE == "step_mass"
    assert yaml.safe_load(out)["learning_rate"] == pytest.approx(TUNED_LR / 4)
    carried = next(line for line in out.splitlines() if line.startswith("# carried to the production run"))
    assert "rule step_mass" in carried and "4x" in carried and "30-trial search" in carried
    # Its evidence is the graph task's: the next line says so, so that no graph-task figure reads as general.
    lines = out.splitlines()
    assert lines[lines.index(carried) + 1].startswith("# (the rule's evidence is measured on the graph task's")
    assert "no rule is measured" not in err and "validate production" not in err
    # Another rule, asked for by name, is applied, with a word that it is not the measured one and how to check it.
    status, out, err = best(study_url, capsys, "--total-episodes", "6144", "--rule", "power_law")
    assert status == 0 and "the measured rule is step_mass, not power_law" in err
    assert "ppo-tune validate production --total-episodes 6144" in err


def test_kl_held_aims_at_the_held_out_kl_the_trial_ended_at(study_url: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = best(study_url, capsys, "--total-episodes", "3072", "--rule", "kl_held", "--format", "json")
    assert status == 0
    shown = json.loads(out)
    assert shown["trial"] == 1 and shown["config"]["kl_target"] == FINAL_KL
    assert shown["config"]["kl_horizon"] == math.ceil(0.1 * 3072) and shown["config"]["learning_rate"] == TUNED_LR
    assert shown["carried"]["rule"] == "kl_held"
    assert {c["name"] for c in shown["carried"]["changes"]} == {"total_episodes", "kl_target", "kl_horizon"}
    # verl has an adaptive controller, but its target is a per-token mean, which the trial's summed KL does not
    # give without the response length: the export cannot carry the rule's target, and says so.
    status, out, err = best(study_url, capsys, "--total-episodes", "3072", "--rule", "kl_held", "--format", "verl")
    assert status == 2 and not out
    assert "--format verl: cannot carry kl_target, which the rule kl_held sets" in err and "per-token" in err
    # Another rule's settings verl does carry: the learning rate.
    status, out, _ = best(study_url, capsys, "--total-episodes", "3072", "--rule", "step_mass", "--format", "verl")
    assert status == 0 and "actor_rollout_ref.actor.optim.lr=2e-05" in out
    assert "# learning_rate=2e-05 (tuned 4e-05)" in out


def test_without_a_rule_the_default_rule_applies_and_the_length_changes(study_url: str,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = best(study_url, capsys, "--total-episodes", "1536")
    assert status == 0 and yaml.safe_load(out)["total_episodes"] == 1536
    assert f"rule {PRODUCTION_RULE}" in out and "no rule is measured" not in err
    status, out, _ = best(study_url, capsys)  # no flag: the trial's own config, no comment about carrying
    assert status == 0 and "carried" not in out and yaml.safe_load(out)["total_episodes"] == 1536


@pytest.mark.parametrize(("flags", "named"), [
    (["--total-episodes", "0"], "--total-episodes: must be at least 1, got 0"),
    (["--total-episodes", "-5"], "--total-episodes: must be at least 1, got -5"),
    (["--total-episodes", "1e4"], "--total-episodes: expected a whole number of episodes, got '1e4'"),
    (["--total-episodes", "1000"], "--total-episodes: 1000 is below the trial's own 1536"),
    (["--rule", "step_mass"], "--rule: only with --total-episodes N"),
    (["--total-episodes", "3072", "--rule", "kl_held", "--format", "trl-ppo"],
     "--format trl-ppo: cannot carry kl_target, kl_horizon, which the rule kl_held sets (TRL has no adaptive KL"),
])
def test_bad_input_is_one_line_and_exit_2_with_nothing_changed(study_url: str, flags: list[str], named: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(study_url.removeprefix("sqlite:///"))
    before = path.read_bytes()
    status, out, err = best(study_url, capsys, *flags)
    assert status == 2 and not out
    assert len(err.strip().splitlines()) == 1 and named in err, err
    assert path.read_bytes() == before


def test_a_trial_that_ended_at_no_kl_cannot_be_held_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'flat.db'}"
    study = optuna.create_study(storage=url, study_name="production", direction="maximize")
    study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.5, user_attrs={
        CONFIG_ATTR: PPOConfig(total_episodes=64, per_device_train_batch_size=16).to_dict()}))
    status, _, err = best(url, capsys, "--total-episodes", "128", "--rule", "kl_held")
    assert status == 2 and "--rule kl_held: kl_held needs the tuned run's final KL as a positive number, got nan" in err
