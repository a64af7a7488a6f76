"""``ppo-tune validate / best --policy-model PATH``: a tuned winner carried to another policy, its learning rate
rescaled from a pilot run there (``tuner.production.pilot``), on a real tiny study and a real larger policy with the
tiny one's tokenizer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest
import yaml
from helpers.studies import TESTS_DIR, load, write_study
from optuna.trial import TrialState

from ppo_tune.cli import main
from tuner.production.carry import final_kl
from tuner.production.horizon import PILOT_SEEDS, POLICY_FIELD
from tuner.production.validation import validation_study_name
from tuner.run.worker import run_worker
from tuner.store.attrs import CONFIG_ATTR, PILOT_ATTR, SEED_ATTR
from tuner.store.database import create_engine, open_storage
from tuner.store.records import read_metrics
from tuner.study.study_file import load_study_spec

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def test_validate_pilots_the_winner_on_another_policy_and_best_carries_it_there(
    tmp_path: Path, tiny_lm_dir: Path, wider_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Learning rates high enough that every run ends at a KL well above zero, which the pilot rule inverts.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2,
                       search_space={"learning_rate": {"type": "float", "low": 3e-3, "high": 1e-2, "log": True}})
    run_worker(load_study_spec(path), n_trials=2, timeout=None, threads=None)
    url = load_study_spec(path).storage
    study = load(path)
    winner = max((t for t in study.get_trials() if t.state == TrialState.COMPLETE), key=lambda t: t.values[0])
    tuned = winner.user_attrs[CONFIG_ATTR]
    policy = str(wider_lm_dir)
    capsys.readouterr()

    # Before any pilot: the policy changes, the learning rate does not, and the command says how to pilot it.
    assert main(["best", "tiny", "--storage", url, "--policy-model", policy]) == 0
    captured = capsys.readouterr()
    config = yaml.safe_load(captured.out)
    assert config[POLICY_FIELD] == policy and config["learning_rate"] == tuned["learning_rate"]
    assert f"# {POLICY_FIELD}={policy} (tuned {tuned[POLICY_FIELD]})" in captured.out
    assert "no pilot has run there yet" in captured.err
    assert f"ppo-tune validate tiny --policy-model {policy}" in captured.err

    assert main(["validate", "tiny", "--storage", url, "--top-k", "1", "--seeds", "2", "--policy-model", policy,
                 "--format", "json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["trial"] == winner.number and result["n"] == 2
    assert result["policy_model"] == policy and result["rule"] == "kl_pilot"

    validation = optuna.load_study(study_name=validation_study_name("tiny"), storage=open_storage(url))
    runs = validation.get_trials()
    assert all(run.state == TrialState.COMPLETE for run in runs)
    pilots = [run for run in runs if run.user_attrs.get(PILOT_ATTR)]
    validated = [run for run in runs if not run.user_attrs.get(PILOT_ATTR)]
    assert len(pilots) == PILOT_SEEDS and len(validated) == 2
    for pilot in pilots:  # the winner as tuned, on the new policy
        assert pilot.user_attrs[CONFIG_ATTR] == {**tuned, POLICY_FIELD: policy, "seed": pilot.user_attrs[SEED_ATTR]}
    # The validated runs' learning rate brings the pilots' mean KL back to the KL the tuning trial ended at, KL ∝ lr.
    engine = create_engine(url)
    tuned_kl = final_kl(read_metrics(engine, "tiny", [winner.number]))
    pilot_metrics = read_metrics(engine, validation_study_name("tiny"), [run.number for run in pilots])
    pilot_kls = [final_kl(pilot_metrics[pilot_metrics["trial_number"] == run.number]) for run in pilots]
    assert tuned_kl > 0 and all(kl > 0 for kl in pilot_kls)
    rescaled = tuned["learning_rate"] * tuned_kl / (sum(pilot_kls) / len(pilot_kls))
    for run in validated:
        assert run.user_attrs[CONFIG_ATTR] == {**tuned, POLICY_FIELD: policy, "learning_rate": pytest.approx(rescaled),
                                               "seed": run.user_attrs[SEED_ATTR]}
    assert result["mean"] == pytest.approx(sum(run.values[0] for run in validated) / 2)

    # best now prints the configuration the runs validated, and names both changes with the measurement behind them.
    assert main(["best", "tiny", "--storage", url, "--policy-model", policy, "--format", "json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert best["config"] == {**tuned, POLICY_FIELD: policy, "learning_rate": pytest.approx(rescaled)}
    assert best["carried"]["rule"] == "kl_pilot" and best["notices"] == []
    assert [change["name"] for change in best["carried"]["changes"]] == [POLICY_FIELD, "learning_rate"]
    assert main(["best", "tiny", "--storage", url, "--policy-model", policy]) == 0
    out = capsys.readouterr().out
    assert "# carried to the production run by the rule kl_pilot: a larger policy moves further" in out
    assert f"# learning_rate={rescaled:g} (tuned {tuned['learning_rate']:g}): brings a pilot" in out
    # And without the flag it says where the winner was validated, on its own policy and on the other.
    assert main(["best", "tiny", "--storage", url, "--format", "json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)["held"]
    assert line.startswith(f"at {tuned['total_episodes']} episodes on {policy} (rule kl_pilot): validated "
                           f"{result['mean']:.4f}")

    # Done is done: a second validate queues nothing, and the tuned policy's validation is apart from it.
    assert main(["validate", "tiny", "--storage", url, "--top-k", "1", "--seeds", "2", "--policy-model", policy]) == 0
    assert len(validation.get_trials()) == len(runs)
    assert "(rule kl_pilot)" in capsys.readouterr().out  # the table of the same results
    assert main(["validate", "tiny", "--storage", url, "--top-k", "1", "--seeds", "2", "--format", "json"]) == 0
    (own,) = json.loads(capsys.readouterr().out)
    assert own["policy_model"] is None and own["n"] == 2
    assert all(run.user_attrs[CONFIG_ATTR][POLICY_FIELD] == tuned[POLICY_FIELD]
               for run in validation.get_trials()[len(runs):])


@pytest.mark.parametrize("command", ["best", "validate"])
def test_a_policy_that_is_not_there_is_one_line_and_exit_2_with_nothing_made(
    command: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1)
    run_worker(load_study_spec(path), n_trials=1, timeout=None, threads=None)
    url = load_study_spec(path).storage
    capsys.readouterr()
    missing = str(tmp_path / "no-such-model")
    assert main([command, "tiny", "--storage", url, "--policy-model", missing]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ppo-tune {command}: error: --policy-model: no model at {missing!r}"]
    assert validation_study_name("tiny") not in optuna.get_all_study_names(open_storage(url))
