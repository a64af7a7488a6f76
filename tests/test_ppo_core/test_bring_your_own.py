"""Your own policy, prompt dataset and rewards, end to end, offline, in TRL's conventions, and the trained model saved.

Tiny random models of four architectures with real tokenizers of several kinds (byte-level BPE, SentencePiece-style
Metaspace without a pad token, ChatML), saved with ``save_pretrained`` and loaded by the code users run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.config.ppo_config import ConfigError
from ppo_core.models.loading import load_tokenizer
from ppo_core.models.prompt_data import load_prompt_sets
from ppo_core.rollout.collect import encode_prompts
from ppo_tune.cli import main
from tools import tiny_data, tiny_models

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

ROOT = Path(__file__).resolve().parents[2]
LETTER_REWARD = "examples.bring_your_own.rewards:letter_reward"


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One policy of each architecture, reward models on other tokenizers, and datasets in both formats."""
    root = tmp_path_factory.mktemp("zoo")
    paths: dict[str, Path] = {name: writer(root / name, seed=1) for name, writer in tiny_models.ARCHITECTURES.items()}
    paths["rm_word_level"] = tiny_models.write_reward_model(root / "rm_word_level", tokenizer="word_level")
    paths["rm_chatml"] = tiny_models.write_reward_model(root / "rm_chatml", architecture="qwen2", tokenizer="chatml")
    paths["standard"] = tiny_data.write_jsonl_splits(root / "standard", "standard", n_train=32, n_test=8)
    paths["conversational"] = tiny_data.write_jsonl_splits(root / "conversational", "conversational",
                                                           n_train=32, n_test=8)
    return paths


def run_config(path: Path, **values: Any) -> Path:
    base: dict[str, Any] = {
        "task": None, "response_length": 6, "per_device_train_batch_size": 8, "total_episodes": 16,
        "num_ppo_epochs": 1, "num_sample_generations": 1, "num_eval_prompts": 2, "learning_rate": 1e-3,
        "stop_token": "eos",
    }
    path.write_text(yaml.safe_dump({**base, **values}))
    return path


@pytest.mark.parametrize(("architecture", "prompt_format"), [
    ("gpt2", "standard"), ("gpt_neox", "standard"), ("llama", "conversational"), ("qwen2", "conversational"),
])
def test_each_architecture_trains_from_the_cli_and_saves_a_loadable_model(
    zoo: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], architecture: str, prompt_format: str,
) -> None:
    config = run_config(tmp_path / "run.yaml", sft_model_path=str(zoo[architecture]),
                        dataset_name=str(zoo[prompt_format]), reward_model_path=str(zoo["rm_word_level"]),
                        reward_funcs=[LETTER_REWARD], reward_weights=[0.5, 1.0])
    assert main(["train", str(config), "--output", str(tmp_path / "out"), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(tmp_path / "out" / "model")
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and {"rewards/letter_reward", "rewards/rm_word_level"} <= set(metrics[0])
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "model")
    initial = AutoModelForCausalLM.from_pretrained(zoo[architecture])
    assert type(trained) is type(initial)
    assert any(not torch.equal(a, b) for a, b in zip(trained.parameters(), initial.parameters(), strict=True))
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out" / "model")
    assert tokenizer.get_vocab() == AutoTokenizer.from_pretrained(zoo[architecture]).get_vocab()
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    if prompt_format == "conversational":  # what the policy read: the conversation through its chat template
        expected = tokenizer.apply_chat_template(
            tiny_data.prompt_splits("conversational", 32, 8)["test"][0]["prompt"],
            tokenize=False, add_generation_prompt=True)
        assert samples[0]["prompt"] == expected


def test_the_example_trains_a_llama_on_conversations_and_its_reward_rises(tmp_path: Path) -> None:
    # docs/models.md's "Bring your own model" section (and the README's two commands), as written, on a fresh
    # directory.
    assets = tmp_path / "assets"
    subprocess.run([sys.executable, str(ROOT / "examples/bring_your_own/make_assets.py"), str(assets)],
                   check=True, capture_output=True, cwd=ROOT)
    shipped = yaml.safe_load((ROOT / "examples/bring_your_own/train.yaml").read_text())
    shipped = {k: (v.replace("examples/bring_your_own/assets", str(assets)) if isinstance(v, str) else v)
               for k, v in shipped.items()}
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(shipped))
    assert main(["train", str(config), "--output", str(tmp_path / "out"), "--quiet"]) == 0
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    rewards = [m["rewards/letter_reward"] for m in metrics]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.05, (first, last)
    assert metrics[-1]["objective/kl"] < 10
    # The tokenizer is saved as it came: no borrowed pad token, no left padding, no truncation length.
    saved = json.loads((tmp_path / "out" / "model" / "tokenizer.json").read_text())
    original = json.loads((assets / "policy" / "tokenizer.json").read_text())
    assert (saved["padding"], saved["truncation"]) == (original["padding"], original["truncation"]) == (None, None)
    assert AutoTokenizer.from_pretrained(tmp_path / "out" / "model").pad_token is None


@pytest.mark.parametrize("layout", ["save_to_disk", "jsonl", "json", "csv", "parquet", "jsonl_splits", "txt"])
def test_every_dataset_layout_loads_with_its_test_split_for_evaluation(
    zoo: dict[str, Path], tmp_path: Path, layout: str,
) -> None:
    if layout == "txt":
        path = tmp_path / "prompts.txt"
        path.write_text("first prompt\n\nsecond prompt\nthird prompt\n")
    else:
        path = tiny_data.write_all(tmp_path / "data", "standard")[layout]
    config = PPOConfig(task=None, sft_model_path=str(zoo["gpt2"]), dataset_name=str(path),
                       reward_funcs=[LETTER_REWARD], num_eval_prompts=3)
    train, evaluation = load_prompt_sets(config, load_tokenizer(str(zoo["gpt2"])))
    has_test_split = layout in ("save_to_disk", "jsonl_splits")
    if layout == "txt":
        assert train.texts == ["first prompt", "second prompt", "third prompt"] and train.columns == {}
    else:
        assert len(train) == 64 and set(train.columns) == {"letter"}
        assert all(isinstance(letter, str) for letter in train.columns["letter"])
    assert len(evaluation) == 3
    assert (evaluation.texts != train.texts[:3]) == has_test_split


def test_max_prompt_length_keeps_the_end_of_the_prompt(zoo: dict[str, Path]) -> None:
    tokenizer = load_tokenizer(str(zoo["llama"]))
    config = PPOConfig(task=None, sft_model_path=str(zoo["llama"]), dataset_name=str(zoo["conversational"]),
                       reward_funcs=[LETTER_REWARD])
    train, _ = load_prompt_sets(config, tokenizer)
    full = encode_prompts(tokenizer, train.select([0]), None)["input_ids"][0]
    cut = encode_prompts(tokenizer, train.select([0]), 5)["input_ids"][0]
    assert len(full) > 5 and cut.tolist() == full[-5:].tolist()  # the generation prompt survives


def test_several_rewards_are_weighted_and_each_is_reported(zoo: dict[str, Path]) -> None:
    config = PPOConfig(task=None, sft_model_path=str(zoo["qwen2"]), dataset_name=str(zoo["conversational"]),
                       reward_model_path=str(zoo["rm_chatml"]), reward_funcs=[LETTER_REWARD],
                       reward_weights=[0.5, 2.0], response_length=6, per_device_train_batch_size=8,
                       total_episodes=8, num_ppo_epochs=1, num_sample_generations=0)
    metrics = PPOTrainer(config).train().metrics[0]
    expected = 0.5 * metrics["rewards/rm_chatml"] + 2.0 * metrics["rewards/letter_reward"]
    assert metrics["objective/scores"] == pytest.approx(expected, abs=1e-5)


def test_a_reward_model_with_a_chat_template_reads_the_rendered_conversation(zoo: dict[str, Path]) -> None:
    config = PPOConfig(task=None, sft_model_path=str(zoo["llama"]), dataset_name=str(zoo["conversational"]),
                       reward_model_path=str(zoo["rm_chatml"]), response_length=6, per_device_train_batch_size=8,
                       total_episodes=8, num_ppo_epochs=1, num_sample_generations=0)
    trainer = PPOTrainer(config)
    batch = trainer.setup.train_prompts.select(range(4))
    rollout = trainer._rollout(batch)
    model = AutoModelForSequenceClassification.from_pretrained(zoo["rm_chatml"]).eval()
    rm_tokenizer = AutoTokenizer.from_pretrained(zoo["rm_chatml"])
    for row, (prompt, completion) in enumerate(zip(batch.prompts, rollout.response_texts, strict=True)):
        conversation = [*prompt, {"role": "assistant", "content": completion}]
        ids = rm_tokenizer(rm_tokenizer.apply_chat_template(conversation, tokenize=False),
                           add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            hidden = model.base_model(input_ids=torch.tensor([ids])).last_hidden_state
            assert float(rollout.scores[row]) == pytest.approx(float(model.score(hidden)[0, -1, 0]), abs=1e-5)


def test_tensorboard_receives_metrics_and_sample_tables(zoo: dict[str, Path], tmp_path: Path) -> None:
    # tensorboard ships no type information (no py.typed marker, no stubs).
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # type: ignore[import-untyped]

    config = run_config(tmp_path / "run.yaml", sft_model_path=str(zoo["gpt2"]), dataset_name=str(zoo["standard"]),
                        reward_funcs=[LETTER_REWARD], report_to="tensorboard", total_episodes=24)
    assert main(["train", str(config), "--output", str(tmp_path / "out"), "--quiet"]) == 0
    event_files = list((tmp_path / "out" / "trackers").rglob("events.out.tfevents.*"))
    assert event_files
    events = EventAccumulator(str(event_files[0].parent), size_guidance={"scalars": 0, "tensors": 0}).Reload()
    scores = events.Scalars("objective/scores")
    assert [event.step for event in scores] == [1, 2, 3]
    written = [json.loads(line)["objective/scores"] for line in (tmp_path / "out" / "metrics.jsonl").open()]
    assert [event.value for event in scores] == pytest.approx(written, rel=1e-6)
    assert any(tag.startswith("samples") for tag in events.Tags()["tensors"])


def test_save_model_from_python_and_bf16_loading(zoo: dict[str, Path], tmp_path: Path) -> None:
    config = PPOConfig(task=None, sft_model_path=str(zoo["llama"]), dataset_name=str(zoo["standard"]),
                       reward_funcs=[LETTER_REWARD], dtype="bfloat16", response_length=4,
                       per_device_train_batch_size=8, total_episodes=8, num_ppo_epochs=1, num_sample_generations=0)
    trainer = PPOTrainer(config)
    assert trainer.setup.models.reference.dtype == torch.bfloat16
    trainer.train()
    saved = trainer.save_model(tmp_path / "model")
    assert AutoModelForCausalLM.from_pretrained(saved).config.architectures == ["LlamaForCausalLM"]


def bad_dataset(zoo: dict[str, Path], tmp_path: Path, kind: str) -> dict[str, Any]:
    if kind == "no prompt column":
        path = tmp_path / "rows.jsonl"
        path.write_text('{"question": "hi", "letter": "a"}\n')
        return {"dataset_name": str(path)}
    if kind == "chat without template":
        return {"dataset_name": str(zoo["conversational"]), "sft_model_path": str(zoo["gpt2"])}
    return {}


@pytest.mark.parametrize(("kind", "values", "message"), [
    ("missing dataset", {"dataset_name": "/no/such/prompts.jsonl"},
     "dataset_name: no such file or directory '/no/such/prompts.jsonl'"),
    ("missing split", {"dataset_train_split": "training"}, "dataset_train_split: "),
    ("no prompt column", {}, "has no 'prompt' column (its columns: question, letter)"),
    ("chat without template", {}, "dataset_name: the prompts are conversations but the policy's tokenizer has no"),
    ("unimportable reward", {"reward_funcs": ["no_such_module_xyz:f"]}, "reward_funcs: cannot import module"),
    ("raising reward", {"reward_funcs": ["reward_functions:raises"]},
     "reward reward_functions:raises raised ValueError: this reward is broken"),
    ("wrong length", {"reward_funcs": ["reward_functions:wrong_length"]},
     "reward reward_functions:wrong_length returned 1 scores for "),
    ("not numbers", {"reward_funcs": ["reward_functions:words"]},
     "reward reward_functions:words returned 'high' for completion 0, expected a number or None"),
])
def test_bad_input_exits_2_with_one_line(
    zoo: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, values: dict[str, Any],
    message: str,
) -> None:
    settings: dict[str, Any] = {"sft_model_path": str(zoo["llama"]), "dataset_name": str(zoo["standard"]),
                                "reward_funcs": [LETTER_REWARD]}
    settings.update(bad_dataset(zoo, tmp_path, kind))
    settings.update(values)
    config = run_config(tmp_path / "run.yaml", **settings)
    assert main(["train", str(config), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("ppo-tune train: error: ") and "\n" not in error, error
    assert message in error, error
    if kind == "missing split":
        assert "(it has train, test)" in error


def test_a_reward_that_returns_none_leaves_the_row_to_the_others(zoo: dict[str, Path]) -> None:
    config = PPOConfig(task=None, sft_model_path=str(zoo["gpt2"]), dataset_name=str(zoo["standard"]),
                       reward_funcs=["reward_functions:none_for_odd_rows", LETTER_REWARD], response_length=4,
                       per_device_train_batch_size=8, total_episodes=8, num_ppo_epochs=1, num_sample_generations=0)
    trainer = PPOTrainer(config)
    rollout = trainer._rollout(trainer.setup.train_prompts.select(range(8)))
    partial = rollout.reward_scores["none_for_odd_rows"]
    assert bool(torch.isnan(partial[1::2]).all()) and not bool(torch.isnan(partial[::2]).any())
    letter = rollout.reward_scores["letter_reward"]
    torch.testing.assert_close(rollout.scores[1::2], letter[1::2])
    torch.testing.assert_close(rollout.scores[::2], letter[::2] + partial[::2])


def test_a_reward_out_of_memory_is_not_reported_as_bad_input(zoo: dict[str, Path]) -> None:
    # Running out of memory is the machine's limit, not the user's mistake: it must not become a one-line
    # "bad input" (exit 2); the tuner records it on the trial as "out of memory".
    config = PPOConfig(task=None, sft_model_path=str(zoo["gpt2"]), dataset_name=str(zoo["standard"]),
                       reward_funcs=["reward_functions:out_of_memory"], response_length=4,
                       per_device_train_batch_size=8, total_episodes=8, num_ppo_epochs=1, num_sample_generations=0)
    with pytest.raises(MemoryError, match="more memory than there is"):
        PPOTrainer(config).train()


def test_trust_remote_code_is_off_unless_asked() -> None:
    assert PPOConfig().trust_remote_code is False
    with pytest.raises(ConfigError, match="reward_weights: 1 weights for 2 rewards"):
        PPOConfig(task=None, sft_model_path="x", dataset_name="y", reward_model_path="m", reward_funcs=["a:b"],
                  reward_weights=[1.0])
