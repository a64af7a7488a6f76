"""Tests for the built-in text task (fortunes_tiny): a real build into a temporary cache, then what it hands out."""

from __future__ import annotations

import json
import math
import pickle
import random
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from ppo_core.tasks import BuiltinTask, get_task, registry
from ppo_core.tasks.cache_dirs import BUILD_INFO
from ppo_core.tasks.fortunes import TextGoldScorer, build_gold_scorer, load_corpus, split_examples
from ppo_core.tasks.fortunes.pairs import DEFAULT_MARGIN
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.fortunes.prompts import TextExample
from ppo_core.tasks.fortunes.rm_pairs import fit_words, reference_pairs
from ppo_tune.cli import main

TINY = "fortunes_tiny"
PARAMS = registry.task_params_of(TextTaskParams, TINY)

# The graph variants' cache keys as they were before text tasks joined the registry: their cached builds, and every
# figure measured on them, must stay the ones in use.
GRAPH_KEYS = {
    "shortest_path": "ce6e6bcaa7d3",
    "shortest_path_wide": "cf1723ad2fe1",
    "shortest_path_tiny": "759dc22e74bf",
}


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> BuiltinTask:
    cache = tmp_path_factory.mktemp("cache")
    threads, rng_state = torch.get_num_threads(), torch.random.get_rng_state()
    built = get_task(TINY, cache_dir=str(cache))
    # The build seeds and single-threads torch only inside itself.
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.random.get_rng_state(), rng_state)
    return built


def test_graph_variants_keep_their_cache_directories(tmp_path: Path) -> None:
    for name, key in GRAPH_KEYS.items():
        assert registry.task_dir(name, tmp_path) == tmp_path / "tasks" / f"{name}-{key}"


def test_text_variants_are_text_tasks_with_keys_of_their_own() -> None:
    text = [name for name in registry.VARIANTS if isinstance(registry.task_params(name), TextTaskParams)]
    assert text == ["fortunes", "fortunes_tiny", "fortunes_v2", "fortunes_v2_tiny", "fortunes_v2_smollm2",
                    "fortunes_v3", "fortunes_v3_tiny", "fortunes_v3_smollm2", "fortunes_v4_smollm2",
                    "fortunes_v5_smollm2", "fortunes_v6_smollm2",
                    "fortunes_v7_smollm2"]
    keys = [registry.task_params(name).cache_key() for name in registry.VARIANTS]  # an alias is its variant
    assert len(set(keys)) == len(keys)
    # Another seed is another text task, as for the graph ones.
    assert registry.task_params(TINY, 1).cache_key() != PARAMS.cache_key()


def test_directories_load_offline(task: BuiltinTask) -> None:
    tok = AutoTokenizer.from_pretrained(task.policy_path)
    policy = AutoModelForCausalLM.from_pretrained(task.policy_path)
    rm_tok = AutoTokenizer.from_pretrained(task.reward_model_path)
    rm = AutoModelForSequenceClassification.from_pretrained(task.reward_model_path)
    assert type(policy).__name__ == "GPT2LMHeadModel"
    assert type(rm).__name__ == "GPT2ForSequenceClassification"
    assert rm.config.num_labels == 1
    assert (tok.padding_side, rm_tok.padding_side) == ("left", "right")
    assert tok.pad_token_id != tok.eos_token_id
    assert rm.config.pad_token_id == rm_tok.pad_token_id == tok.pad_token_id
    assert len(tok) == policy.config.vocab_size == rm.config.vocab_size == PARAMS.vocab_size
    prompt_ids = tok(task.eval_prompts[0])["input_ids"]
    assert prompt_ids[0] == tok.bos_token_id


def test_prompt_splits_are_disjoint_and_not_empty(task: BuiltinTask) -> None:
    assert task.train_prompts and task.eval_prompts
    assert not set(task.train_prompts) & set(task.eval_prompts)
    assert len(task.eval_prompts) == PARAMS.num_heldout


def test_gold_score_is_the_scorer_of_the_training_texts(task: BuiltinTask) -> None:
    assert isinstance(task.gold_score, TextGoldScorer)
    samples = [sample["response"] for sample in task.info["sft"]["samples_t1.0"]]
    responses = [*samples, "", "the the the the", "and all is well, my friend."]
    prompts = task.eval_prompts[: len(responses)]
    scores = task.gold_score(prompts, responses)
    assert all(math.isfinite(s) and 0.0 <= s <= 1.0 for s in scores)
    # The same scorer a caller would build from the same split: the task hands out the real gold, not a stand-in.
    split = split_examples(load_corpus().texts, PARAMS.num_heldout, seed=0)
    assert scores == build_gold_scorer([example.text for example in split.train])(prompts, responses)
    assert [s["gold"] for s in task.info["sft"]["samples_t1.0"]] == scores[: len(samples)]
    # Tuner workers may receive the task by pickling.
    assert pickle.loads(pickle.dumps(task)).gold_score(prompts, responses) == scores


def test_reward_model_prefers_chosen_on_its_training_pairs(task: BuiltinTask) -> None:
    rows = [json.loads(line) for line in (Path(task.policy_path).parent / "rm_pairs.jsonl").read_text().splitlines()]
    train = [row for row in rows if row["split"] == "train"]
    assert len(train) == PARAMS.rm_train_pairs
    assert all(row["chosen_gold"] > row["rejected_gold"] for row in train)
    rm_tok = AutoTokenizer.from_pretrained(task.reward_model_path)
    rm = AutoModelForSequenceClassification.from_pretrained(task.reward_model_path).eval()

    def scores(side: str) -> torch.Tensor:
        # reward_text is the join the trainer scores with: on it the RM must rank as it did in training.
        texts = [task.reward_text(row["prompt"], row[side]) for row in train]
        with torch.no_grad():
            return rm(**rm_tok(texts, return_tensors="pt", padding=True)).logits.squeeze(-1)

    accuracy = float((scores("chosen") > scores("rejected")).float().mean())
    assert accuracy > 0.6
    assert accuracy == pytest.approx(task.info["reward_model"]["train_accuracy"], abs=0.01)
    assert task.reward_text("If a man", "is happy") == "If a man is happy"


def test_build_info_reports_every_stage(task: BuiltinTask) -> None:
    info = task.info
    assert info["kind"] == "fortunes" and info["name"] == TINY
    stages = ("data", "sft", "rm_pairs", "reward_model", "report", "save")
    assert all(info["seconds"][stage] >= 0 for stage in stages)
    assert info["seconds"]["total"] == pytest.approx(sum(info["seconds"][stage] for stage in stages), rel=1e-6)
    summary = info["summary"]
    assert math.isfinite(summary["sft_heldout_loss"]) and summary["sft_heldout_loss"] > 0
    assert 0.0 <= summary["rm_heldout_accuracy"] <= 1.0
    for temperature in ("1.0", "0.7"):
        assert 0.0 <= summary[f"sft_gold_eval_t{temperature}"] <= 1.0
    assert task.response_length == info["response_length"] == PARAMS.response_length


def test_second_get_task_reuses_the_cache(task: BuiltinTask) -> None:
    root = Path(task.policy_path).parent
    before = (root / BUILD_INFO).read_bytes()
    again = get_task(TINY, cache_dir=str(root.parent.parent))
    assert again.policy_path == task.policy_path
    assert again.info["build_id"] == task.info["build_id"]
    assert (root / BUILD_INFO).read_bytes() == before
    assert again.train_prompts == task.train_prompts and again.eval_prompts == task.eval_prompts


@pytest.mark.heavy
def test_ppo_tune_trains_on_the_text_task(task: BuiltinTask, tmp_path: Path) -> None:
    cache = Path(task.policy_path).parent.parent.parent
    config = {"task": TINY, "task_cache_dir": str(cache), "per_device_train_batch_size": 8, "total_episodes": 16,
              "num_ppo_epochs": 1, "num_sample_generations": 1, "num_eval_prompts": 4, "num_eval_samples": 2,
              "seed": 3}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    # In this process: a new one would spend seconds importing torch again.
    assert main(["train", str(tmp_path / "run.yaml"), "--output", str(tmp_path / "out"), "--quiet"]) == 0
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [m["update"] for m in metrics] == [1, 2]
    assert all(0.0 <= m["objective/gold_score"] <= 1.0 and math.isfinite(m["objective/scores"]) for m in metrics)
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    # The samples are of held-out prompts, each scored by the proxy and by gold.
    assert samples and all(s["prompt"] in task.eval_prompts for s in samples)
    assert all(0.0 <= s["gold_score"] <= 1.0 and math.isfinite(s["score"]) for s in samples)


def test_reference_pairs_are_stored_and_come_from_texts_the_held_out_pairs_never_use(task: BuiltinTask) -> None:
    rows = [json.loads(line) for line in (Path(task.policy_path).parent / "rm_pairs.jsonl").read_text().splitlines()]
    train = [row for row in rows if row["split"] == "reference_train"]
    heldout = [row for row in rows if row["split"] == "reference_heldout"]
    assert len(train) == PARAMS.rm_reference_pairs and len(heldout) == PARAMS.rm_reference_pairs // 10
    assert all(row["chosen_gold"] - row["rejected_gold"] >= DEFAULT_MARGIN for row in train + heldout)
    # Each side is a human continuation cut to a response's length in the reward model's tokens.
    rm_tok = AutoTokenizer.from_pretrained(task.reward_model_path)
    assert all(0 < len(rm_tok(row[side])["input_ids"]) <= PARAMS.response_length
               for row in train for side in ("chosen", "rejected"))
    responses = {row[side] for row in train for side in ("chosen", "rejected")}
    assert not responses & {row[side] for row in heldout for side in ("chosen", "rejected")}
    reward_model = task.info["reward_model"]
    assert 0.0 <= reward_model["reference_heldout_accuracy"] <= 1.0
    assert reward_model["reference_train_pairs"] == len(train)


def test_reference_pairs_set_one_texts_continuation_under_anothers_prompt() -> None:
    examples = [TextExample(f"prompt {i}", f"word{i} " * 30) for i in range(40)]

    def gold(prompts: list[str], responses: list[str]) -> list[float]:
        # Higher for a higher text number: every pair's preference is known.
        return [int(response.split()[0][4:]) / 10 for response in responses]

    def cut(text: str) -> str:
        return fit_words(text, lambda words: len(words.split()), 5)

    pairs = reference_pairs(examples, gold, count=15, cut=cut, rng=random.Random(0))
    assert len(pairs) == 15
    for pair in pairs:
        assert len(pair.chosen.split()) == len(pair.rejected.split()) == 5
        assert pair.chosen_gold > pair.rejected_gold
        numbers = {int(pair.chosen.split()[0][4:]), int(pair.rejected.split()[0][4:])}
        assert pair.prompt in {f"prompt {n}" for n in numbers}
    # Seeded: the same order, the same pairs.
    assert reference_pairs(examples, gold, 15, cut, random.Random(0)) == pairs
    assert reference_pairs(examples, gold, 15, cut, random.Random(1)) != pairs


def test_fit_words_keeps_the_most_whole_words_within_the_token_limit() -> None:
    # Two tokens a word: 3 words fit in 6 tokens, never a part of one.
    assert fit_words("one two three four", lambda text: 2 * len(text.split()), 6) == "one two three"
    assert fit_words("  spaced   out  ", lambda text: len(text.split()), 5) == "spaced out"
    assert fit_words("toolongword", lambda text: 9, 5) == ""


def test_a_process_derives_a_text_tasks_split_and_gold_once(task: BuiltinTask) -> None:
    """A run loads its task twice (the precision check reads the policy's path first); the second load must not
    rebuild the corpus, the split and the gold scorer's counts again."""
    root = Path(task.policy_path).parent
    again = get_task(TINY, cache_dir=str(root.parent.parent))
    assert again.gold_score is task.gold_score
