"""PPOConfig: TRL names and defaults, derived batch sizes, and one-line errors naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import HfArgumentParser
from transformers.hf_argparser import DataClassType

from ppo_core.config.io import build_config, load_config, parse_overrides
from ppo_core.config.ppo_config import ConfigError, PPOConfig, settable_fields

REPO = Path(__file__).resolve().parents[2]
# HfArgumentParser's parameter is typed as the NewType DataClassType, which a class matches only once wrapped in it
# (a no-op at run time).
PPO_CONFIG_CLASS = DataClassType(PPOConfig)


def test_trl_defaults() -> None:
    config = PPOConfig()
    assert (config.num_ppo_epochs, config.cliprange, config.vf_coef, config.cliprange_value) == (4, 0.2, 0.1, 0.2)
    assert (config.gamma, config.lam, config.kl_coef, config.kl_estimator) == (1.0, 0.95, 0.05, "k1")
    assert (config.temperature, config.per_device_train_batch_size, config.local_rollout_forward_batch_size) == (
        0.7, 8, 64,
    )
    assert config.learning_rate == 3e-6  # TRL 1.12's PPOConfig overrides TrainingArguments' 5e-5


def test_batch_hierarchy_computed_trls_way(monkeypatch: pytest.MonkeyPatch) -> None:
    config = PPOConfig(per_device_train_batch_size=4, gradient_accumulation_steps=8, num_mini_batches=2)
    assert config.local_batch_size == 32 and config.batch_size == 32 and config.micro_batch_size == 4
    assert config.mini_batch_size == 16 and config.local_mini_batch_size == 16
    monkeypatch.setenv("WORLD_SIZE", "2")  # what accelerate launch sets in each of 2 processes
    config = PPOConfig(per_device_train_batch_size=4, gradient_accumulation_steps=8, num_mini_batches=2)
    assert (config.batch_size, config.mini_batch_size, config.micro_batch_size) == (64, 32, 8)


def test_every_field_has_help_text() -> None:
    for name, config_field in settable_fields().items():
        assert config_field.metadata.get("help"), name


def test_hf_argument_parser_reads_flags_json_and_yaml(tmp_path: Path) -> None:
    parser = HfArgumentParser(PPO_CONFIG_CLASS)
    (from_flags,) = parser.parse_args_into_dataclasses(["--kl_coef", "0.1", "--kl_estimator", "k3"])
    assert from_flags.kl_coef == 0.1 and from_flags.kl_estimator == "k3"
    (tmp_path / "c.json").write_text(json.dumps({"cliprange": 0.1}))
    (tmp_path / "c.yaml").write_text("lam: 0.9\nkl_target: 6\n")
    assert parser.parse_json_file(tmp_path / "c.json")[0].cliprange == 0.1
    from_yaml = parser.parse_yaml_file(tmp_path / "c.yaml")[0]
    assert from_yaml.lam == 0.9 and from_yaml.adaptive_kl


@pytest.mark.parametrize("values", [
    {},
    {"kl_coef": 0.1, "kl_estimator": "k3", "lam": 0.9, "kl_target": 6, "learning_rate": "1e-5"},
    {"task": None, "sft_model_path": "policy", "reward_model_path": "reward", "dataset_name": "prompts.txt",
     "advantage_estimator": "grpo"},
    {"use_peft": True, "lora_r": 8, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
], ids=["defaults", "knobs", "bring your own", "lora"])
def test_build_config_builds_what_hf_argument_parser_builds(values: dict) -> None:
    # build_config does what HfArgumentParser.parse_dict does without importing transformers (a second of start-up in
    # every tuner process); the float text of YAML 1.1 ("1e-5") is read as a float first, as build_config does.
    coerced = {**values, **({"learning_rate": 1e-5} if "learning_rate" in values else {})}
    (expected,) = HfArgumentParser(PPO_CONFIG_CLASS).parse_dict(coerced, allow_extra_keys=False)
    assert build_config(values) == expected


def test_build_config_refuses_what_hf_argument_parser_refuses() -> None:
    for values in ({"cliprange": -0.1}, {"lam": 1.5}, {"kl_estimator": "k7"}, {"task": None}):
        with pytest.raises(ConfigError) as theirs:
            HfArgumentParser(PPO_CONFIG_CLASS).parse_dict(values, allow_extra_keys=False)
        with pytest.raises(ConfigError) as ours:
            build_config(values)
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError, match="not used by the HfArgumentParser"):
        HfArgumentParser(PPO_CONFIG_CLASS).parse_dict({"clip_range": 0.2}, allow_extra_keys=False)
    with pytest.raises(ConfigError, match="did you mean 'cliprange'"):  # the same refusal, and a hint
        build_config({"clip_range": 0.2})


def test_a_tuner_worker_and_the_cli_validate_a_study_without_importing_transformers() -> None:
    # Every worker and every `ppo-tune run` reads and checks the study (each trial's config is built there too);
    # transformers costs a second of CPU to import and torch more, which only the trial processes need.
    code = ("import json, sys; import ppo_tune.cli, tuner.run.runner, tuner.run.worker;"
            "from tuner.study.study_file import load_study_spec; from ppo_core.config.io import build_config;"
            "spec = load_study_spec('studies/quickstart.yaml'); build_config(spec.base);"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"clip_range": 0.2}, r"^clip_range: unknown config key \(did you mean 'cliprange'\?\)$"),
        ({"cliprange": 0.0}, r"^cliprange: must be > 0, got 0.0$"),
        ({"cliprange": -0.1}, r"^cliprange: must be > 0"),
        ({"lam": 1.5}, r"^lam: must be in \[0, 1\]"),
        ({"learning_rate": -1e-5}, r"^learning_rate: must be >= 0"),
        ({"value_learning_rate": -1.0}, r"^value_learning_rate: must be >= 0"),
        ({"learning_rate": "fast"}, r"^learning_rate: expected float, got 'fast'$"),
        ({"num_ppo_epochs": 2.5}, r"^num_ppo_epochs: expected int"),
        ({"whiten_rewards": "yes"}, r"^whiten_rewards: expected bool"),
        ({"kl_estimator": "k7"}, r"^kl_estimator: expected one of 'k1', 'k2', 'k3', 'abs'"),
        ({"kl_target": -3.0}, r"^kl_target: must be > 0"),
        ({"per_device_train_batch_size": 3, "gradient_accumulation_steps": 3, "num_mini_batches": 2},
         r"^num_mini_batches: 2 must divide the rollout batch"),
        ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_mini_batches": 4},
         r"^per_device_train_batch_size: 4 must divide the mini-batch 2"),
        ({"stop_token": "eos", "stop_token_id": 3}, r"^stop_token_id: cannot be set together"),
        ({"task": None}, r"^sft_model_path: required when task is null$"),
    ],
)
def test_bad_values_give_one_line_error_naming_the_field(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        build_config(values)
    assert "\n" not in str(caught.value)


def test_yaml_float_without_dot_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("learning_rate: 1e-5\nkl_coef: 0.1\n")
    config = load_config(path, ["kl_coef=0.2", "kl_target=null", "num_ppo_epochs=2"])
    assert config.learning_rate == 1e-5 and config.kl_coef == 0.2 and config.num_ppo_epochs == 2
    assert parse_overrides(["task=null"]) == {"task": None}
    with pytest.raises(ConfigError, match=r"^--set: expected key=value"):
        parse_overrides(["kl_coef"])


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("kl_coef: [0.1\n")
    with pytest.raises(ConfigError, match="is not valid yaml"):
        load_config(bad)


def test_docs_config_reference_is_in_step_with_the_dataclass() -> None:
    from ppo_core.config.doc import BEGIN, END, reference_block

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text()
    assert page[page.index(BEGIN): page.index(END) + len(END)] == reference_block(), \
        "regenerate with: python -m ppo_core.config.doc"
