"""The offline builders of tiny models and prompt datasets (tools.tiny_models, tools.tiny_data) and the
bring-your-own example's reward function and asset script: what they write loads back through the Auto classes
and ``datasets`` the way a user's own checkpoint and data would."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest
import torch
from datasets import load_dataset, load_from_disk
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BatchEncoding,
    GenerationConfig,
)

from tools import tiny_data, tiny_models
from tools.tiny_models import (
    ARCHITECTURES,
    POISONED_GENERATION_DEFAULTS,
    Architecture,
    metaspace_tokenizer,
    poisoned_generation_defaults,
    write_llama,
    write_qwen2,
    write_reward_model,
)

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "bring_your_own"
SENTENCE = "write words with the letter e: tree see, Hello World 42!"
USER = [{"role": "user", "content": "Write words with the letter e."}]


def _example_module(name: str) -> ModuleType:
    # examples/ is not a package: load the file the way `python examples/...` would run it.
    spec = importlib.util.spec_from_file_location(f"bring_your_own_{name}", EXAMPLE_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def policy_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("policies")
    return {name: writer(root / name, seed=0) for name, writer in ARCHITECTURES.items()}


@pytest.fixture(scope="module")
def rewards() -> ModuleType:
    return _example_module("rewards")


# ------------------------------------------------------------------------------------------------------ policies


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_policy_loads_back_with_consistent_config(policy_dirs: dict[str, Path], architecture: Architecture) -> None:
    directory = policy_dirs[architecture]
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory)
    config = model.config
    assert type(model).__name__ == tiny_models.POLICY_CLASSES[architecture].__name__
    assert config.vocab_size == len(tokenizer)
    assert config.eos_token_id == tokenizer.eos_token_id is not None
    assert config.bos_token_id == tokenizer.bos_token_id
    assert config.pad_token_id == tokenizer.pad_token_id
    assert config.max_position_embeddings >= 128
    # torch types a submodule's attribute it does not declare (an Embedding's weight here) as Tensor | Module.
    input_weight = cast(torch.Tensor, model.get_input_embeddings().weight)
    assert model.get_output_embeddings().weight.data_ptr() == input_weight.data_ptr()
    assert sum(parameter.numel() for parameter in model.parameters()) < 200_000

    # GPT-2 and Llama have no pad token, so only the others can pad a batch.
    texts = [SENTENCE, "hello world"] if tokenizer.pad_token is not None else [SENTENCE]
    encoded = tokenizer(texts, return_tensors="pt", padding=tokenizer.pad_token is not None)
    with torch.no_grad():
        logits = model(**encoded).logits
    assert logits.shape == (*encoded["input_ids"].shape, len(tokenizer))
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_loaded_tokenizer_round_trips_text(policy_dirs: dict[str, Path], architecture: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(policy_dirs[architecture])
    ids = tokenizer(SENTENCE)["input_ids"]
    assert tokenizer.unk_token_id not in ids or tokenizer.unk_token_id == tokenizer.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == SENTENCE
    # Each lowercase letter is a token of its own, so a policy can learn to emit any one of them.
    vocab = tokenizer.get_vocab()
    assert all(letter in vocab for letter in tiny_data.LETTERS)


def test_same_seed_gives_identical_files(tmp_path: Path) -> None:
    first = tiny_models.write_gpt2(tmp_path / "a", seed=3)
    second = tiny_models.write_gpt2(tmp_path / "b", seed=3)
    other = tiny_models.write_gpt2(tmp_path / "c", seed=4)
    for name in ("model.safetensors", "tokenizer.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert (first / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()


def test_gpt2_and_gpt_neox_token_layouts(policy_dirs: dict[str, Path]) -> None:
    gpt2 = AutoTokenizer.from_pretrained(policy_dirs["gpt2"])
    assert gpt2.pad_token is None
    assert gpt2.eos_token == gpt2.bos_token == "<|endoftext|>"
    assert gpt2.eos_token_id == len(gpt2) - 1  # appended after the trained vocabulary, as in GPT-2
    neox = AutoTokenizer.from_pretrained(policy_dirs["gpt_neox"])
    assert (neox.eos_token, neox.eos_token_id, neox.pad_token, neox.pad_token_id) == (
        "<|endoftext|>",
        0,
        "<|padding|>",
        1,
    )


def test_llama_tokenizer_has_no_pad_and_prepends_bos(policy_dirs: dict[str, Path]) -> None:
    tokenizer = AutoTokenizer.from_pretrained(policy_dirs["llama"])
    assert tokenizer.pad_token is None and tokenizer.pad_token_id is None
    assert (tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    ids = tokenizer("hello world")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and tokenizer.eos_token_id not in ids
    assert tokenizer.convert_ids_to_tokens(ids)[1].startswith("▁")
    assert AutoConfig.from_pretrained(policy_dirs["llama"]).pad_token_id is None


def test_llama_chat_template_ends_the_prompt_where_the_reply_begins(policy_dirs: dict[str, Path]) -> None:
    tokenizer = AutoTokenizer.from_pretrained(policy_dirs["llama"])
    prompt = tokenizer.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    assert prompt == "<s>[INST] Write words with the letter e. [/INST]"
    # Without the flag the answer marker is missing: a trainer that forgets add_generation_prompt is visible.
    assert tokenizer.apply_chat_template(USER, tokenize=False) == "<s>[INST] Write words with the letter e."
    conversation = [*USER, {"role": "assistant", "content": "tree see"}]
    full = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert full == prompt + " tree see</s>"
    # apply_chat_template is typed with every return its options allow: text with tokenize=False, else an encoding.
    system = cast(str, tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}, *USER],
                                                     tokenize=False))
    assert system.startswith("<s>[INST] Be brief.\n\nWrite words")

    # The template writes <s> itself: tokenized by apply_chat_template (or with add_special_tokens=False) it
    # appears once, while the plain call adds a second, as with Llama-2's own files.
    chat_ids = cast(BatchEncoding, tokenizer.apply_chat_template(USER, add_generation_prompt=True))["input_ids"]
    assert chat_ids == tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert chat_ids.count(tokenizer.bos_token_id) == 1
    assert tokenizer(prompt)["input_ids"][:2] == [tokenizer.bos_token_id] * 2
    # Token boundaries fall at the reply's start, so prompt ids are a prefix of the whole conversation's ids.
    full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    assert full_ids[: len(chat_ids)] == chat_ids and full_ids[-1] == tokenizer.eos_token_id
    reply = tokenizer.decode(full_ids[len(chat_ids) : -1])
    assert reply == "tree see"


@pytest.mark.parametrize(("model", "scheme"), [("bpe", "always"), ("unigram", "first"), ("unigram", "always")])
def test_metaspace_variants_round_trip(model: Any, scheme: Any, tmp_path: Path) -> None:
    metaspace_tokenizer(model=model, prepend_scheme=scheme).save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    ids = tokenizer(SENTENCE)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == SENTENCE
    assert tokenizer.pad_token is None


def test_qwen2_renders_chatml_and_stops_at_both_tokens(policy_dirs: dict[str, Path]) -> None:
    tokenizer = AutoTokenizer.from_pretrained(policy_dirs["qwen2"])
    assert tokenizer.bos_token is None
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    prompt = tokenizer.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nWrite words with the letter e.<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.apply_chat_template(USER, tokenize=False) == prompt.removesuffix("<|im_start|>assistant\n")
    ids = tokenizer(prompt)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(tokenizer.eos_token_id) == 1
    generation = GenerationConfig.from_pretrained(policy_dirs["qwen2"])
    assert generation.eos_token_id == [tokenizer.eos_token_id, tokenizer.pad_token_id]
    assert AutoConfig.from_pretrained(policy_dirs["qwen2"]).eos_token_id == tokenizer.eos_token_id


def test_qwen2_default_system_prompt(tmp_path: Path) -> None:
    directory = write_qwen2(tmp_path, default_system="You're helpful.")
    tokenizer = AutoTokenizer.from_pretrained(directory)
    # apply_chat_template is typed with every return its options allow; with tokenize=False it returns the text.
    rendered = cast(str, tokenizer.apply_chat_template(USER, tokenize=False))
    assert rendered.startswith("<|im_start|>system\nYou're helpful.<|im_end|>\n<|im_start|>user\n")
    own_system = [{"role": "system", "content": "Mine."}, *USER]
    assert cast(str, tokenizer.apply_chat_template(own_system, tokenize=False)).count("<|im_start|>system") == 1


# ------------------------------------------------------------------------------------------ generation defaults


def test_poisoned_generation_config_is_written(tmp_path: Path) -> None:
    directory = write_qwen2(tmp_path, generation_defaults=POISONED_GENERATION_DEFAULTS)
    generation = GenerationConfig.from_pretrained(directory)
    for key, value in POISONED_GENERATION_DEFAULTS.items():
        assert getattr(generation, key) == value, key
    saved = json.loads((directory / "generation_config.json").read_text())
    assert saved["repetition_penalty"] == 3.0 and saved["no_repeat_ngram_size"] == 1
    # A model's own generate() picks the defaults up, which is what a trainer must not inherit unknowingly.
    assert AutoModelForCausalLM.from_pretrained(directory).generation_config.top_k == 2


def test_poisoned_defaults_suppress_letter_tokens(tmp_path: Path) -> None:
    tokenizer = metaspace_tokenizer()
    defaults = poisoned_generation_defaults(tokenizer, letters="e")
    suppressed = tokenizer.convert_ids_to_tokens(defaults["suppress_tokens"])
    assert "e" in suppressed and "▁e" in suppressed
    directory = write_llama(tmp_path, generation_defaults=defaults)
    assert GenerationConfig.from_pretrained(directory).suppress_tokens == defaults["suppress_tokens"]


# --------------------------------------------------------------------------------------------------- reward models


@pytest.mark.parametrize(
    ("architecture", "kind"),
    [("gpt2", "byte_level"), ("llama", "word_level"), ("qwen2", "chatml"), ("gpt_neox", "metaspace")],
)
def test_reward_model_scores_each_row_once_whatever_the_padding(
    tmp_path: Path, architecture: Any, kind: Any, policy_dirs: dict[str, Path]
) -> None:
    directory = write_reward_model(tmp_path, architecture=architecture, tokenizer=kind, seed=1)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForSequenceClassification.from_pretrained(directory).eval()
    assert model.config.num_labels == 1
    assert model.config.pad_token_id == tokenizer.pad_token_id is not None
    assert model.config.vocab_size == len(tokenizer)
    texts = [SENTENCE, "tree", "see the tree eat the cheese"]
    tokenizer.padding_side = "right"
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    assert (batch["attention_mask"] == 0).any()
    with torch.no_grad():
        scores = model(**batch).logits
        alone = torch.cat([model(**tokenizer([text], return_tensors="pt")).logits for text in texts])
    assert scores.shape == (3, 1)
    # The classifier reads each row at its last real token, so padding must not change a row's score.
    torch.testing.assert_close(scores, alone, atol=1e-5, rtol=1e-4)
    if kind == "word_level":  # the reward model's vocabulary differs from every policy's
        policy = AutoTokenizer.from_pretrained(policy_dirs["llama"])
        assert len(tokenizer) < len(policy) and tokenizer("tree")["input_ids"] != policy("tree")["input_ids"]


# --------------------------------------------------------------------------------------------------------- datasets


def test_prompt_rows_have_both_formats() -> None:
    standard = tiny_data.standard_prompts(8, seed=1)
    conversational = tiny_data.conversational_prompts(8, seed=1)
    assert standard.column_names == conversational.column_names == ["prompt", "letter"]
    for row in standard:
        assert isinstance(row["prompt"], str) and row["letter"] in row["prompt"]
    for row in conversational:
        assert row["prompt"] == [{"role": "user", "content": row["prompt"][0]["content"]}]
        assert re.search(rf"\b{row['letter']}\b", row["prompt"][0]["content"])
    assert tiny_data.standard_prompts(8, seed=1)["prompt"] == standard["prompt"]
    assert tiny_data.standard_prompts(8, seed=2)["prompt"] != standard["prompt"]


@pytest.mark.parametrize("prompt_format", ["standard", "conversational"])
@pytest.mark.parametrize("layout", ["save_to_disk", "jsonl", "json", "csv", "parquet", "jsonl_splits"])
def test_each_layout_loads_with_prompt_and_letter(tmp_path: Path, layout: str, prompt_format: Any) -> None:
    if layout == "csv" and prompt_format == "conversational":
        with pytest.raises(ValueError, match="CSV"):
            tiny_data.write_csv(tmp_path / "prompts.csv", prompt_format)
        return
    if layout == "save_to_disk":
        dataset = load_from_disk(str(tiny_data.write_save_to_disk(tmp_path / "data", prompt_format)))
    elif layout == "jsonl_splits":
        dataset = load_dataset(str(tiny_data.write_jsonl_splits(tmp_path / "data", prompt_format)))
    else:
        writer = getattr(tiny_data, f"write_{layout}")
        path = writer(tmp_path / f"prompts.{layout}", prompt_format)
        dataset = load_dataset("json" if layout.startswith("json") else layout, data_files=str(path))
    expected_splits = ["test", "train"] if layout in ("save_to_disk", "jsonl_splits") else ["train"]
    assert sorted(dataset) == expected_splits
    train = dataset["train"]
    assert train.column_names == ["prompt", "letter"] and train.num_rows > 0
    assert train[0] == tiny_data.prompts(prompt_format, 1, seed=0)[0]


# ---------------------------------------------------------------------------------------------------------- example


def test_letter_reward_for_both_formats(rewards: ModuleType) -> None:
    completions = ["eee see", "xyz", "Eel e x y", ""]
    letters = ["e", "e", "e", "e"]
    scores = rewards.letter_reward(prompts=["p"] * 4, completions=completions, letter=letters, completion_ids=None)
    assert scores == [1.0, 0.0, 0.5, 0.0] and all(isinstance(score, float) for score in scores)
    conversational = [[{"role": "assistant", "content": text}] for text in completions]
    assert rewards.letter_reward(prompts=[USER] * 4, completions=conversational, letter=letters) == scores
    assert rewards.letter_reward([], [], []) == []


def test_letter_reward_on_real_dataset_rows(rewards: ModuleType) -> None:
    rows = tiny_data.conversational_prompts(4, seed=0)
    full = [[{"role": "assistant", "content": letter * 5}] for letter in rows["letter"]]
    other = [[{"role": "assistant", "content": "zzz qq"}] for _ in rows["letter"]]
    high = rewards.letter_reward(rows["prompt"], full, **{"letter": rows["letter"]})
    low = rewards.letter_reward(rows["prompt"], other, letter=rows["letter"])
    assert len(high) == len(low) == 4 and all(a > b for a, b in zip(high, low, strict=True))


def test_make_assets_writes_loadable_offline_assets(tmp_path: Path) -> None:
    make_assets = _example_module("make_assets")
    assert str(Path(__file__).resolve().parents[2]) in sys.path
    written = make_assets.make_assets(tmp_path)
    assert sorted(written) == ["policy", "prompts", "reward_model"]
    policy = AutoTokenizer.from_pretrained(written["policy"])
    reward = AutoTokenizer.from_pretrained(written["reward_model"])
    assert policy.pad_token is None and policy.chat_template
    assert AutoModelForCausalLM.from_pretrained(written["policy"]).config.model_type == "llama"
    assert AutoModelForSequenceClassification.from_pretrained(written["reward_model"]).config.num_labels == 1
    assert policy.get_vocab() != reward.get_vocab()
    dataset = load_dataset(str(written["prompts"]))
    assert sorted(dataset) == ["test", "train"]
    assert isinstance(dataset["train"][0]["prompt"], list) and "letter" in dataset["train"].column_names


def test_command_lines_print_what_they_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tiny_data.main([str(tmp_path / "data")]) == 0
    assert tiny_models.main([str(tmp_path / "models")]) == 0
    out = capsys.readouterr().out
    assert "conversational jsonl_splits" in out and "prompts.csv" in out
    for name in (*ARCHITECTURES, "qwen2_poisoned_generation", "reward_gpt2_byte_level", "reward_llama_word_level"):
        assert (tmp_path / "models" / name / "config.json").is_file()
    assert "LlamaForCausalLM, vocab 256, bos=<s>(1) eos=</s>(2) pad=None, chat template" in out
