"""``trainer: trl-grpo``: trials run in TRL's own GRPOTrainer (the installed release), with the arguments the trl-grpo
export prints, and store what a ppo_core trial stores: ppo-tune's metric names, held-out evaluations with their KL
(also at beta 0, when TRL measures none), samples, and the KL guard's stop as a pruned trial with its reason."""

from __future__ import annotations

import importlib.metadata
import math
import os
from pathlib import Path

import pytest
import yaml
from helpers.studies import TESTS_DIR, load, write_study
from optuna.trial import TrialState

from ppo_core.config.checks import ConfigError
from ppo_core.config.io import build_config
from ppo_tune.cli import main
from tuner.exports import exported
from tuner.production.validation import validation_study_name
from tuner.run.worker import run_worker
from tuner.store.attrs import FAIL_REASON_ATTR, PRUNE_REASON_ATTR, TRAINED_BY_ATTR, TRL_SECONDS_ATTR
from tuner.store.database import create_engine
from tuner.store.records import read_metrics, read_samples
from tuner.study.study_file import StudySpecError, load_study_spec
from tuner.study.trainer_check import check_trainer
from tuner.trl_trial.arguments import MACHINE_FIELDS, TRIAL_OWNED, trial_arguments
from tuner.trl_trial.metrics import ppo_tune_metrics, response_kl
from tuner.trl_trial.run import trainer_config

pytestmark = pytest.mark.heavy  # starts studies: scheduled first

UPDATES = 8  # total_episodes 64 / 8 episodes an update
trl_version = importlib.metadata.version("trl")
GRPO_BASE = {"advantage_estimator": "grpo", "num_generations": 4, "eval_steps": 0.5, "num_eval_samples": 2,
             "learning_rate": 3e-3, "stop_token": "eos"}  # TRL stops at EOS: a run to the full length it cannot do

JUDGES = {"judge_funcs": ["judge_functions:count_letter_b"], "pairwise_judge": "judge_functions:LongerWins"}
"""Held-out judges (tests/judge_functions.py): a pointwise one and a pairwise one."""


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Trial processes import the test reward functions by name, as users' own modules would be.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def trl_study(tmp_path: Path, lm_dir: Path, prompts: Path, trainer: str = "trl-grpo", **overrides: object) -> Path:
    base = {**GRPO_BASE, **overrides.pop("base", {})}  # type: ignore[dict-item]
    settings = {"n_trials": 1, "search_space": {"cliprange": {"type": "categorical", "choices": [0.2]}}, **overrides}
    return write_study(tmp_path, lm_dir, prompts, name="trl", trainer=trainer, sampler={"name": "grid"}, base=base,
                       **settings)


def in_trl_names(path: Path) -> Path:
    """The study file rewritten as a ``trl grpo`` user writes it: GRPOConfig's, ModelConfig's and the script's names,
    and nothing of ppo-tune's for what TRL names (tuner.trl_trial.names)."""
    study = yaml.safe_load(path.read_text())
    base = study["base"]
    for ours, theirs in (("sft_model_path", "model_name_or_path"), ("response_length", "max_completion_length"),
                         ("num_ppo_epochs", "num_iterations")):
        base[theirs] = base.pop(ours)
    base["reward_funcs"] = [base.pop("reward_model_path").replace(":", ".")]  # the script's dotted import path
    base["max_steps"] = base.pop("total_episodes") // base["per_device_train_batch_size"]  # 1 step an update
    for implied in ("task", "advantage_estimator", "stop_token"):  # a dataset, GRPO's advantages, EOS: TRL's own
        base.pop(implied)
    study["search_space"] = {"epsilon": study["search_space"].pop("cliprange")}
    path.write_text(yaml.safe_dump(study))
    return path


def test_a_trl_grpo_trial_runs_in_trl_and_stores_what_the_pages_read(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = in_trl_names(trl_study(tmp_path, tiny_lm_dir, prompts_file, base={"beta": 0.04}))
    assert main(["run", str(path)]) == 0
    (trial,) = load(path).get_trials()
    assert trial.state == TrialState.COMPLETE
    assert trial.user_attrs[TRAINED_BY_ATTR] == f"TRL {trl_version} GRPOTrainer"
    seconds = trial.user_attrs[TRL_SECONDS_ATTR]
    assert 0 < seconds["evaluation"] + seconds["samples"] + seconds["callbacks"] < seconds["train"]
    spec = load_study_spec(path)
    metrics = read_metrics(create_engine(spec.storage), spec.name).set_index("update")
    assert list(metrics.index) == list(range(1, UPDATES + 1))  # one row per PPO update, not per optimizer step
    # TRL's own logs, kept under trl/, and ppo-tune's names for the same quantities: the run was TRL's.
    assert metrics["objective/scores"].tolist() == metrics["trl/reward"].tolist()
    assert (metrics["objective/kl"] - metrics["trl/kl"] * metrics["trl/completions/mean_length"]).abs().max() < 1e-9
    assert metrics["objective/kl"].iloc[-1] > 0  # beta 0.04: TRL measures KL, and the policy moved
    evaluated = metrics["eval/kl"].dropna()
    assert list(evaluated.index) == [4, 8] and evaluated.abs().lt(1e3).all()  # the k1 estimate may dip below 0
    assert metrics.loc[8, "eval/score"] == pytest.approx(trial.value)  # the objective reads the stored metric
    samples = read_samples(create_engine(spec.storage), spec.name)
    assert sorted(set(samples["update"])) == [0, 4, 8] and samples["response"].str.len().gt(0).any()
    # Validation reruns the winner in TRL too, on a fresh seed.
    assert main(["validate", spec.name, "--storage", spec.storage, "--top-k", "1", "--seeds", "1"]) == 0
    rerun = read_metrics(create_engine(spec.storage), validation_study_name(spec.name))
    assert len(rerun) == UPDATES and rerun["trl/reward"].notna().all()
    # The export gives the study file's TRL names back, with the values it wrote.
    capsys.readouterr()
    assert main(["best", spec.name, "--storage", spec.storage, "--format", "trl-grpo"]) == 0
    printed = capsys.readouterr().out
    for flag in ("--num_iterations 1", "--max_steps 8", "--max_completion_length 5", "--epsilon 0.2",
                 "--reward_funcs reward_functions.count_letter_a", f"--model_name_or_path {tiny_lm_dir}"):
        assert flag in printed, flag


def test_a_trl_rloo_trial_runs_in_rloo_trainer_with_kl_in_the_reward(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    # RLOOTrainer's own computation, which the trl-rloo target holds the study to: the whole response's ratio, the
    # KL penalty in the reward (RLOOConfig's beta is kl_coef).
    path = trl_study(tmp_path, tiny_lm_dir, prompts_file, trainer="trl-rloo",
                     base={"advantage_estimator": "rloo", "kl_coef": 0.05})
    assert main(["run", str(path)]) == 0
    (trial,) = load(path).get_trials()
    assert trial.state == TrialState.COMPLETE and trial.user_attrs[TRAINED_BY_ATTR] == f"TRL {trl_version} RLOOTrainer"
    spec = load_study_spec(path)
    metrics = read_metrics(create_engine(spec.storage), spec.name).set_index("update")
    assert metrics["objective/kl_coef"].eq(0.05).all() and metrics["trl/kl"].notna().all()


def test_kl_is_measured_at_each_evaluation_when_beta_is_zero(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    path = trl_study(tmp_path, tiny_lm_dir, prompts_file, base={"beta": 0.0})
    assert main(["run", str(path)]) == 0
    spec = load_study_spec(path)
    metrics = read_metrics(create_engine(spec.storage), spec.name).set_index("update")
    assert "trl/kl" not in metrics and "objective/kl" not in metrics  # TRL logs no KL at beta 0 ...
    evaluated = metrics["eval/kl"].dropna()
    assert list(evaluated.index) == [4, 8] and evaluated.ne(0).all()  # ... the held-out evaluation does


@pytest.mark.parametrize(("trainer", "kl"), [("trl-grpo", {"beta": 0.04}),
                                             ("trl-rloo", {"advantage_estimator": "rloo", "kl_coef": 0.05})])
def test_a_trl_trial_that_cannot_move_reads_a_held_out_kl_of_zero(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, trainer: str, kl: dict[str, object]) -> None:
    # At learning rate 0 the policy is its reference, so every held-out evaluation's KL is 0 to float precision. The
    # evaluation once ran an update's rollout, which for one epoch of one mini-batch leaves the policy's
    # log-probabilities to an update that never comes, and read 60-90 nats here.
    # The trial's judges score each evaluation's answers as a ppo_core run's do.
    path = trl_study(tmp_path, tiny_lm_dir, prompts_file, trainer=trainer, base={**kl, "learning_rate": 0.0,
                                                                                 **JUDGES})
    assert main(["run", str(path)]) == 0
    spec = load_study_spec(path)
    metrics = read_metrics(create_engine(spec.storage), spec.name).set_index("update")
    evaluated = metrics["eval/kl"].dropna()
    assert list(evaluated.index) == [4, 8] and evaluated.abs().lt(1e-4).all(), evaluated.tolist()
    for judged in ("eval/judge_score", "eval/judge_win_rate"):
        assert list(metrics[judged].dropna().index) == [4, 8]
    assert metrics["eval/judge_win_rate"].dropna().between(0, 1).all()


def test_the_kl_guard_stops_a_trl_trial_and_stores_it_as_pruned_with_its_reason(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    path = trl_study(tmp_path, tiny_lm_dir, prompts_file, base={"beta": 0.04},
                     kl_guard={"threshold": 1e-6, "window": 2, "predict": False})
    assert main(["run", str(path)]) == 1  # no trial completed, and the command says so
    (trial,) = load(path).get_trials()
    assert trial.state == TrialState.PRUNED
    assert "objective/kl" in trial.user_attrs[PRUNE_REASON_ATTR]
    spec = load_study_spec(path)
    stored = read_metrics(create_engine(spec.storage), spec.name)
    assert len(stored) < UPDATES  # TRL's loop stopped at the update the guard named


def test_a_trl_trial_of_two_processes_runs_through_accelerate_as_trl_does(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    # processes_per_trial 2: the trial is launched by accelerate (gloo on the CPU), TRL's trainer runs in both
    # processes on its own share of each generation, and the main process alone stores the updates.
    # Its judges add their verdicts over both processes' answers.
    path = trl_study(tmp_path, tiny_lm_dir, prompts_file, base={"beta": 0.04, **JUDGES}, processes_per_trial=2)
    spec = load_study_spec(path)
    run_worker(spec, n_trials=1, timeout=None, threads=2)
    (trial,) = load(path).get_trials()
    assert trial.state == TrialState.COMPLETE, trial.user_attrs.get(FAIL_REASON_ATTR)
    metrics = read_metrics(create_engine(spec.storage), spec.name)
    # 64 episodes, 8 from each process an update: 4 updates of 16, each stored once.
    assert metrics["update"].tolist() == [1, 2, 3, 4] and metrics["episode"].tolist() == [16, 32, 48, 64]
    assert metrics["trl/reward"].notna().all() and metrics["eval/kl"].dropna().size == 2
    for judged in ("eval/judge_score", "eval/judge_win_rate", "eval/distinct_2grams"):
        assert metrics[judged].dropna().size == 2


def test_a_killed_or_exiting_trl_trial_fails_with_its_reason_and_the_study_goes_on(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    # The reward TRL calls kills its process (kill -9) or exits: the trial fails with how it ended, and the next
    # trial runs, as for a ppo_core trial.
    rewards = ["reward_functions:killed", "reward_functions:exits", "reward_functions:count_letter_a"]
    path = trl_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=len(rewards),
                     search_space={"reward_model_path": {"type": "categorical", "choices": rewards}})
    assert main(["run", str(path)]) == 0  # the worker outlived both faults
    trials = {t.params["reward_model_path"]: t for t in load(path).get_trials()}
    assert {reward: (t.state, t.user_attrs.get(FAIL_REASON_ATTR)) for reward, t in trials.items()} == {
        "reward_functions:killed": (TrialState.FAIL, "killed by signal SIGKILL"),
        "reward_functions:exits": (TrialState.FAIL, "exit status 1"),
        "reward_functions:count_letter_a": (TrialState.COMPLETE, None)}


def test_the_trial_runs_exactly_the_arguments_the_export_prints() -> None:
    config = build_config({**GRPO_BASE, "task": "shortest_path_tiny", "beta": 0.02, "total_episodes": 96,
                           "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2, "num_mini_batches": 2,
                           "num_ppo_epochs": 2, "use_peft": True, "lora_r": 4})
    arguments = trial_arguments("trl-grpo", config)
    settings = {key: value for key, value, _ in exported("trl-grpo", config.to_dict()).settings}
    assert settings["max_completion_length"] == 12  # the task's own length, not TRL's default of 512
    assert {**arguments.config, **arguments.model, **arguments.script} == {**settings, **TRIAL_OWNED}
    updates = math.ceil(96 / 16)
    built = trainer_config(arguments, __import__("torch").device("cpu"), "/tmp/unused", updates, steps_per_update=4)
    for key, value in arguments.config.items():
        assert key in (*MACHINE_FIELDS, *TRIAL_OWNED) or getattr(built, key) == value, key
    assert built.use_cpu and not built.bf16  # this GPU-less machine's
    # The trial's own length rule and the export's agree: 6 updates x 2 mini-batches x 2 epochs.
    assert built.max_steps == settings["max_steps"] == 24


def test_a_setting_trl_cannot_run_is_refused_not_dropped(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # An adaptive KL target is a comment in the export (TRL has none): a trial would run without it. The study is
    # refused before it is stored, naming the field and why.
    path = trl_study(tmp_path, tiny_lm_dir, prompts_file, base={"kl_target": 3.0})
    assert main(["run", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("ppo-tune run: error: kl_target: GRPOTrainer cannot run it (TRL has no adaptive KL "
                            "controller"), error
    assert error.endswith("; at the base") and len(error.splitlines()) == 1 and not (tmp_path / "trl.db").exists()


def test_trl_logs_map_to_ppo_tune_names_in_the_same_units() -> None:
    logs: dict[str, float | None] = {"reward": 0.5, "kl": 0.02, "completions/mean_length": 10.0, "entropy": 1.5,
                                     "loss": 0.1, "epoch": 0.3,
            "learning_rate": 1e-4, "clip_ratio/region_mean": 0.05, "note": None}
    metrics = ppo_tune_metrics(logs, update=3, episode=24, beta=0.02)
    assert metrics["objective/scores"] == 0.5 and metrics["policy/entropy_avg"] == 1.5 and metrics["lr"] == 1e-4
    assert metrics["objective/kl"] == pytest.approx(0.2) == response_kl(0.02, 10.0)
    assert metrics["policy/clipfrac_avg"] == 0.05 and metrics["update"] == 3 and metrics["episode"] == 24
    assert metrics["trl/loss"] == 0.1 and "trl/note" not in metrics  # TRL logs None for a mean with no values
    assert "objective/kl" not in ppo_tune_metrics({"reward": 0.5}, update=1, episode=8, beta=0.0)


def test_a_study_naming_an_unknown_trainer_or_another_target_is_refused(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, trainer="trl-dpo")
    assert main(["run", str(path)]) == 2
    error = capsys.readouterr().err
    assert "trainer: unknown trainer trl-dpo (expected one of ppo_core, trl-grpo, trl-rloo)" in error
    path = trl_study(tmp_path, tiny_lm_dir, prompts_file, target="verl")
    with pytest.raises(StudySpecError, match="target: verl with trainer trl-grpo"):
        load_study_spec(path)
    assert not (tmp_path / "trl.db").exists()


def test_a_missing_or_old_trl_is_named_with_its_install_command(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_study_spec(trl_study(tmp_path, tiny_lm_dir, prompts_file))
    check_trainer(spec)  # the installed TRL serves

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    # The one thing not real here: this environment has TRL, and the test cannot uninstall it.
    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(StudySpecError, match=r"trainer: trl-grpo runs TRL 1\.16\.x, which is not installed: "
                                             r"pip install 'ppo-tune\[trl\]'"):
        check_trainer(spec)
    for untested in ("1.12.0", "1.17.0"):
        monkeypatch.setattr(importlib.metadata, "version", lambda name, version=untested: version)
        with pytest.raises(StudySpecError, match=rf"tested with TRL 1\.16\.x, and TRL {untested} is installed"):
            check_trainer(spec)


def test_a_built_in_task_reports_the_training_responses_gold_each_update() -> None:
    # As a ppo_core run does (objective/gold_score): the Curves page's gold chart reads it. Regression: a TRL trial
    # on a built-in task had gold only from its held-out evaluations, and the page said "No gold score".
    from ppo_core.run.callbacks import TrainerCallback
    from tuner.trl_trial.run import run_trl_trial

    class Recorder(TrainerCallback):
        def __init__(self) -> None:
            self.metrics: list[dict[str, float]] = []

        def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
            self.metrics.append(metrics)
            return None

    recorder = Recorder()
    config = build_config({**GRPO_BASE, "task": "shortest_path_tiny", "total_episodes": 32,
                           "per_device_train_batch_size": 16, "num_sample_generations": 0, "beta": 0.04})
    run_trl_trial("trl-grpo", config, [recorder])
    golds = [metrics["objective/gold_score"] for metrics in recorder.metrics]
    assert len(golds) == 2 and all(0.0 <= gold <= 1.0 for gold in golds)


def test_a_trl_trial_runs_its_configs_schedule_update_by_update_and_one_without_is_unchanged() -> None:
    # Two optimizer steps an update (two mini-batches): the schedule counts updates, as a ppo_core trial does.
    # A constant scheduler, so TRL's logged learning rate is the peak in force.
    from ppo_core.run.callbacks import TrainerCallback
    from tuner.trl_trial.run import run_trl_trial

    class Recorder(TrainerCallback):
        def __init__(self) -> None:
            self.metrics: list[dict[str, float]] = []

        def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
            self.metrics.append(metrics)
            return None

    base = {**GRPO_BASE, "task": "shortest_path_tiny", "total_episodes": 64, "per_device_train_batch_size": 8,
            "gradient_accumulation_steps": 2, "num_mini_batches": 2, "lr_scheduler_type": "constant",
            "num_sample_generations": 0, "beta": 0.04}
    schedules = {"learning_rate_schedule": [[2, 1e-3], [4, 5e-3]], "kl_coef_schedule": [[2, 0.0], [3, 0.1]]}
    runs = {}
    for name, config in (("plain", base), ("scheduled", {**base, **schedules})):
        recorder = Recorder()
        run_trl_trial("trl-grpo", build_config(config), [recorder])
        runs[name] = recorder.metrics
    scheduled, plain = runs["scheduled"], runs["plain"]
    assert [m["update"] for m in scheduled] == [1, 2, 3, 4]
    assert [m["lr"] for m in scheduled] == [3e-3, 1e-3, 1e-3, 5e-3]  # TRL's own log of the rate its optimizer ran
    assert [m["objective/kl_coef"] for m in scheduled] == [0.04, 0.0, 0.1, 0.1]
    assert ["trl/kl" in m for m in scheduled] == [True, False, True, True]  # TRL measures KL while beta > 0
    assert [m["lr"] for m in plain] == [3e-3] * 4 and [m["objective/kl_coef"] for m in plain] == [0.04] * 4
    # Before its first pair the schedule changes nothing: the first update is the unscheduled run's, to the bit.
    assert scheduled[0]["trl/loss"] == plain[0]["trl/loss"] and scheduled[0]["trl/reward"] == plain[0]["trl/reward"]
    assert scheduled[1]["trl/loss"] != plain[1]["trl/loss"]


def test_a_kl_schedule_from_beta_zero_is_refused_before_the_trial_runs() -> None:
    # TRL loads no reference model at beta 0, so a later coefficient above 0 would have nothing to measure KL to;
    # under LoRA the policy with its adapter off is the reference, and the schedule runs.
    config = {**GRPO_BASE, "task": "shortest_path_tiny", "beta": 0.0, "kl_coef_schedule": [[3, 0.1]]}
    with pytest.raises(ConfigError, match=r"^kl_coef_schedule: TRL's trainer starts at beta 0 and so loads no "
                                          r"reference model"):
        trial_arguments("trl-grpo", build_config(config))
    assert trial_arguments("trl-grpo", build_config({**config, "use_peft": True})).config["beta"] == 0.0
