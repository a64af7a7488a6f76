"""Tests for the built-in offline task (ppo_core.tasks): gold scorer, build, cache and quality."""

from __future__ import annotations

import contextlib
import json
import math
import pickle
import random
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import cast

import pytest
import torch
from filelock import FileLock, Timeout
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedTokenizerFast,
)

from ppo_core.tasks import TASK_NAMES, BuiltinTask, get_task, registry
from ppo_core.tasks.cache_dirs import BUILD_INFO
from ppo_core.tasks.graph.build import task_graph
from ppo_core.tasks.graph.gold import PARTIAL_MAX, GoldScorer, score_walk
from ppo_core.tasks.graph.graph import Graph, goal_walk, shortest_path
from ppo_core.tasks.graph.params import TaskParams
from ppo_core.tasks.graph.text import make_prompt, parse_prompt
from ppo_core.tasks.reward_model import format_for_reward
from ppo_core.tasks.sampling import sample_responses

TINY = "shortest_path_tiny"

# 0-1-2-3 is the unique shortest 0->3 path (3 steps); 0-4-5-6-3 is a 4-step detour.
#   1 - 2
#  /     \
# 0       3
#  \     /
#   4-5-6
HAND_GRAPH = Graph.from_edges(7, [(0, 1), (1, 2), (2, 3), (0, 4), (4, 5), (5, 6), (6, 3)])


def gold(response: str, start: int = 0, goal: int = 3) -> float:
    return GoldScorer(HAND_GRAPH)([make_prompt(start, goal)], [response])[0]


# --- gold scorer on a hand-built graph -------------------------------------------------------


def test_hand_graph_distances() -> None:
    assert HAND_GRAPH.distances[0][3] == 3
    assert HAND_GRAPH.distances[4][3] == 3
    assert HAND_GRAPH.diameter() == 3


def test_shortest_path_scores_one() -> None:
    assert gold("1 2 3") == 1.0
    assert gold("6", start=5, goal=6) == 1.0


def test_longer_valid_path_scores_distance_over_length() -> None:
    assert gold("4 5 6 3") == pytest.approx(3 / 4)
    assert gold("1 0 1 2 3") == pytest.approx(3 / 5)  # back-tracking is legal but wasteful


def test_steps_past_the_goal_count_against_the_walk() -> None:
    assert gold("1 2 3 2") == pytest.approx(3 / 4)
    assert gold("1 2 3 2 3") == pytest.approx(3 / 5)
    assert gold("1 2 3 2") < gold("1 2 3")


def test_partial_credit_for_progress_without_reaching() -> None:
    two_steps, one_step, sideways = gold("1 2"), gold("1"), gold("4")
    assert 0 < sideways < one_step < two_steps < PARTIAL_MAX
    assert gold("1 2") > gold("1 2 1 2")  # same end, more wasted steps


def test_invalid_moves_score_below_every_valid_walk() -> None:
    valid = ["1 2 3", "4 5 6 3", "1 0 1 2 3", "1 2 3 2 1", "1", "4", "4 0 4 0 4 0"]
    invalid = ["1 3", "3", "0 1 2 3", "1 2 2 3", "1 2 3 5", "4 5 6 3 0 3"]
    lowest_valid = min(gold(r) for r in valid)
    assert lowest_valid > 0
    for response in invalid:
        assert gold(response) < lowest_valid, response


def test_garbage_scores_the_minimum() -> None:
    garbage = ["", "   ", "from 0 to 3 :", "<unk> <eos>", "hello world", "01 2 3", "7 8 9", "-1 2 3"]
    assert [gold(r) for r in garbage] == [0.0] * len(garbage)
    # 0.0 really is the minimum: no walk scores below it.
    rng = random.Random(0)
    for _ in range(200):
        words = [str(rng.randrange(-1, 9)) for _ in range(rng.randint(0, 6))]
        assert 0.0 <= score_walk(HAND_GRAPH, 0, 3, words) <= 1.0


def test_gold_scorer_rejects_bad_input() -> None:
    scorer = GoldScorer(HAND_GRAPH)
    with pytest.raises(ValueError):
        scorer([make_prompt(0, 3)], [])
    with pytest.raises(ValueError):
        scorer(["go from 0 to 3"], ["1 2 3"])
    assert parse_prompt(make_prompt(12, 7)) == (12, 7)


def test_graph_must_be_connected() -> None:
    with pytest.raises(ValueError):
        Graph.from_edges(4, [(0, 1), (2, 3)])


def test_reward_text_join() -> None:
    assert format_for_reward("from 3 to 7 :", "5 9 7") == "from 3 to 7 : 5 9 7"
    assert format_for_reward("from 3 to 7 :", "") == "from 3 to 7 :"


def test_unknown_task_name() -> None:
    with pytest.raises(ValueError, match="shortest_path_tiny"):
        get_task("no_such_task")
    assert TASK_NAMES == ("shortest_path", "shortest_path_wide", "shortest_path_tiny", "fortunes", "fortunes_tiny",
                          "fortunes_v2", "fortunes_v2_tiny", "fortunes_v2_smollm2", "fortunes_v3", "fortunes_v3_tiny",
                          "fortunes_v3_smollm2", "fortunes_v4_smollm2", "fortunes_v5_smollm2", "fortunes_v6_smollm2",
                          "fortunes_v7_smollm2", "smollm2_text")


def test_cache_dir_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PPO_TUNE_CACHE", str(tmp_path))
    assert registry.task_dir(TINY).parent == tmp_path / "tasks"
    monkeypatch.delenv("PPO_TUNE_CACHE")
    assert registry.task_dir(TINY).parent == Path.home() / ".cache" / "ppo-tune" / "tasks"


def test_cache_keys_are_stable_and_distinct() -> None:
    keys = {name: registry.task_params(name).cache_key() for name in registry.VARIANTS}  # an alias is its variant
    assert len(set(keys.values())) == len(keys)
    assert all(len(k) == 12 for k in keys.values())
    assert keys == {name: registry.task_params(name).cache_key() for name in registry.VARIANTS}
    # A field added with a None default leaves the keys of the tasks that do not set it as they were: their cached
    # builds, and every table measured on them, stay the ones in use (the keys before the policy's width existed).
    assert (keys["shortest_path"], keys[TINY]) == ("ce6e6bcaa7d3", "759dc22e74bf")
    assert registry.task_params("shortest_path", 1).cache_key() == "2fc86e55a3a1"


def test_a_wider_policy_is_trained_for_the_same_reward_model(tmp_path: Path) -> None:
    import dataclasses

    from ppo_core.tasks.build import POLICY_DIR, REWARD_MODEL_DIR
    from ppo_core.tasks.graph.build import build_task

    # The tiny task cut to a few steps: what is compared is the two builds' models, not how well they learned.
    narrow = dataclasses.replace(registry.task_params_of(TaskParams, TINY), sft_steps=8, rm_train_pairs=64,
                                 rm_heldout_pairs=16, rm_epochs=1, eval_samples_per_prompt=1)
    wide = dataclasses.replace(narrow, policy_n_embd=96)
    for name, params in (("narrow", narrow), ("wide", wide)):
        (tmp_path / name).mkdir()
        build_task(name, params, tmp_path / name)
    policy = AutoModelForCausalLM.from_pretrained(tmp_path / "wide" / POLICY_DIR)
    small = AutoModelForCausalLM.from_pretrained(tmp_path / "narrow" / POLICY_DIR)
    assert policy.config.n_embd == 96 and small.config.n_embd == 64
    assert policy.config.n_layer == small.config.n_layer and policy.config.n_head == small.config.n_head
    # The reward model is the narrow build's own, weight for weight: the same reward for a larger policy.
    ours = AutoModelForSequenceClassification.from_pretrained(tmp_path / "wide" / REWARD_MODEL_DIR).state_dict()
    theirs = AutoModelForSequenceClassification.from_pretrained(tmp_path / "narrow" / REWARD_MODEL_DIR).state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[key], theirs[key]) for key in ours)
    assert json.loads((tmp_path / "wide" / BUILD_INFO).read_text())["params"]["policy_n_embd"] == 96
    wide_default = registry.task_params("shortest_path_wide")
    assert wide_default == dataclasses.replace(registry.task_params_of(TaskParams, "shortest_path"), policy_n_embd=136)


# --- cache locking, with a stand-in build so it costs nothing --------------------------------


def _two_callers_race(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[BuiltinTask | None]:
    """Two threads call get_task at once under the real FileLock; each caller's task, or None for a caller that
    raised (a task's build_id counts the builds run up to its own).

    Barriers, not sleeps, so that the race happens on every run, loaded machine or not: neither caller goes on until
    both have found the task missing, and the first build does not end until the other caller has reached the lock
    (it records its arrival before it asks for the lock, so the lock alone decides what it does next)."""
    both_looked = threading.Barrier(2, timeout=60)
    caught_up = threading.Condition()
    arrived: set[int] = set()  # the callers that have reached the lock
    looks = threading.local()
    is_complete = registry._is_complete
    calls: list[Path] = []

    def counted_look(target: Path) -> bool:
        complete = is_complete(target)
        looks.count = getattr(looks, "count", 0) + 1
        if looks.count == 1:  # each caller's first look, before any lock
            both_looked.wait()
        return complete

    def arriving_lock(path: str) -> AbstractContextManager[object]:
        with caught_up:
            arrived.add(threading.get_ident())
            caught_up.notify_all()
        return FileLock(path)

    def fake_build(name: str, params: object, out_dir: Path) -> dict:
        calls.append(out_dir)
        with caught_up:
            assert caught_up.wait_for(lambda: arrived - {threading.get_ident()}, 60), \
                "the other caller never reached the lock"
        info = {"build_id": len(calls), "seconds": {"total": 0.0}}
        (out_dir / BUILD_INFO).write_text(json.dumps(info))
        return info

    monkeypatch.setattr(registry, "build_task", fake_build)
    monkeypatch.setattr(registry, "_is_complete", counted_look)
    monkeypatch.setattr(registry, "FileLock", arriving_lock)
    stale = registry.task_dir(TINY, tmp_path)
    stale.mkdir(parents=True)  # an incomplete leftover must be replaced, not trusted
    results: list[BuiltinTask | None] = []

    def call() -> None:
        try:
            results.append(get_task(TINY, str(tmp_path)))
        except OSError:
            results.append(None)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a get_task caller never returned"
    assert len(results) == 2, "a caller raised (see the thread's exception above)"
    return results


def test_concurrent_callers_share_one_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = _two_callers_race(tmp_path, monkeypatch)
    assert [r.info["build_id"] if r else None for r in results] == [1, 1]  # the other caller waited, then loaded
    assert results[0] and results[1] and results[0].policy_path == results[1].policy_path
    stale = registry.task_dir(TINY, tmp_path)
    assert not [p for p in stale.parent.iterdir() if p.name.startswith(".")]  # temp dir renamed away


def _caller_arriving_mid_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               lock: Callable[[str], AbstractContextManager[object]]) -> tuple[int, object, object]:
    """A second caller that asks for the task while the first build is under way, on the same thread, so that no
    scheduler decides the order: the builds run, what the second caller got and what the first caller got (a task,
    or the exception it raised)."""
    calls: list[Path] = []
    second: list[object] = []

    def fake_build(name: str, params: object, out_dir: Path) -> dict:
        calls.append(out_dir)
        if len(calls) == 1:
            try:
                second.append(get_task(TINY, str(tmp_path)))
            except (Timeout, OSError) as error:
                second.append(error)
        info = {"build_id": len(calls), "seconds": {"total": 0.0}}
        (out_dir / BUILD_INFO).write_text(json.dumps(info))
        return info

    monkeypatch.setattr(registry, "build_task", fake_build)
    monkeypatch.setattr(registry, "FileLock", lock)
    first: object
    try:
        first = get_task(TINY, str(tmp_path))
    except OSError as error:
        first = error
    return len(calls), second[0], first


def test_a_caller_arriving_mid_build_waits_on_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real lock, told not to wait long: the second caller is held back (it times out rather than build), and the
    # first build completes and loads.
    builds, second, first = _caller_arriving_mid_build(tmp_path, monkeypatch, lambda path: FileLock(path, timeout=0.05))
    assert builds == 1 and isinstance(second, Timeout)
    assert isinstance(first, BuiltinTask) and first.info["build_id"] == 1


def test_without_the_lock_a_caller_arriving_mid_build_builds_again(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # What the lock prevents: with none, the second caller builds its own copy and puts it in place, and the first
    # build's rename then meets it.
    builds, second, first = _caller_arriving_mid_build(tmp_path, monkeypatch, lambda path: contextlib.nullcontext())
    assert builds == 2
    assert isinstance(second, BuiltinTask) and second.info["build_id"] == 2
    assert isinstance(first, OSError)


# --- the real tiny build ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> BuiltinTask:
    cache = tmp_path_factory.mktemp("cache")
    threads, rng_state = torch.get_num_threads(), torch.random.get_rng_state()
    task = get_task(TINY, cache_dir=str(cache))
    # The build seeds and single-threads torch only inside itself.
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.random.get_rng_state(), rng_state)
    return task


def test_tiny_task_layout(tiny: BuiltinTask) -> None:
    root = Path(tiny.policy_path).parent
    assert root.name == f"{TINY}-{registry.task_params(TINY).cache_key()}"
    assert root.parent.name == "tasks"
    assert Path(tiny.reward_model_path).parent == root
    # The build records how long it took (what the README quotes), not a limit on it.
    assert math.isfinite(tiny.info["seconds"]["total"]) and tiny.info["seconds"]["total"] > 0
    n = tiny.info["graph"]["num_nodes"]
    assert len(tiny.train_prompts) + len(tiny.eval_prompts) == n * (n - 1)
    assert not set(tiny.train_prompts) & set(tiny.eval_prompts)
    assert tiny.reward_text("from 1 to 2 :", "3 2") == "from 1 to 2 : 3 2"
    assert tiny.response_length > registry.task_params_of(TaskParams, TINY).max_walk_len


def test_tiny_directories_load_offline(tiny: BuiltinTask) -> None:
    tok = AutoTokenizer.from_pretrained(tiny.policy_path)
    policy = AutoModelForCausalLM.from_pretrained(tiny.policy_path)
    rm_tok = AutoTokenizer.from_pretrained(tiny.reward_model_path)
    rm = AutoModelForSequenceClassification.from_pretrained(tiny.reward_model_path)
    assert type(policy).__name__ == "GPT2LMHeadModel"
    assert type(rm).__name__ == "GPT2ForSequenceClassification"
    assert rm.config.num_labels == 1
    assert tok.pad_token_id != tok.eos_token_id
    assert tok.padding_side == "left"
    assert rm_tok.padding_side == "right"
    assert rm.config.pad_token_id == rm_tok.pad_token_id == tok.pad_token_id
    assert policy.config.eos_token_id == tok.eos_token_id
    assert len(tok) == policy.config.vocab_size == rm.config.vocab_size
    # Text round trip: BOS prepended to prompts; responses decode to the plain walk.
    prompt_ids = tok(tiny.eval_prompts[0])["input_ids"]
    assert prompt_ids[0] == tok.bos_token_id
    assert tok.decode(prompt_ids, skip_special_tokens=True) == tiny.eval_prompts[0]
    walk_ids = [*tok("3 5 7", add_special_tokens=False)["input_ids"], tok.eos_token_id, tok.pad_token_id]
    assert tok.decode(walk_ids, skip_special_tokens=True) == "3 5 7"


def test_tiny_cache_is_reused(tiny: BuiltinTask, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_rebuild(*args: object) -> None:
        raise AssertionError("cached task was rebuilt")

    monkeypatch.setattr(registry, "build_task", no_rebuild)
    root = Path(tiny.policy_path).parent
    mtime = (root / BUILD_INFO).stat().st_mtime
    again = get_task(TINY, cache_dir=str(root.parent.parent))
    assert again.policy_path == tiny.policy_path
    assert again.info["build_id"] == tiny.info["build_id"]
    assert (root / BUILD_INFO).stat().st_mtime == mtime
    assert again.train_prompts == tiny.train_prompts
    # Tuner workers may receive the task by pickling.
    clone = pickle.loads(pickle.dumps(again))
    assert clone.gold_score(clone.eval_prompts[:1], ["garbage"]) == [0.0]


def test_tiny_sft_policy_walks_mostly_validly(tiny: BuiltinTask) -> None:
    # AutoTokenizer is typed as giving a fast or a SentencePiece tokenizer; the task saves a fast one.
    tok = cast(PreTrainedTokenizerFast, AutoTokenizer.from_pretrained(tiny.policy_path))
    policy = AutoModelForCausalLM.from_pretrained(tiny.policy_path).eval()
    prompts = tiny.train_prompts[:64]
    responses = sample_responses(policy, tok, prompts, 0.7, tiny.response_length, torch.Generator().manual_seed(0))
    scores = tiny.gold_score(prompts, responses)
    assert sum(s > 0 for s in scores) / len(scores) > 0.8
    assert 0.25 < sum(scores) / len(scores) < 0.9
    # The build's own report agrees: valid-but-wasteful, room left for PPO.
    for temperature in ("1.0", "0.7"):
        stats = tiny.info["sft"][f"eval_prompts_t{temperature}"]
        assert stats["gold"] == tiny.info["summary"][f"sft_gold_eval_t{temperature}"]
        assert 0.15 < stats["gold"] < 0.75
        assert stats["valid_rate"] > 0.7
    # HF generate works with the saved configs (batched, left-padded, pad != eos).
    enc = tok(tiny.eval_prompts, return_tensors="pt", padding=True)
    out = policy.generate(**enc, max_new_tokens=tiny.response_length, do_sample=True)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert len(tiny.gold_score(tiny.eval_prompts, texts)) == len(texts)


def test_tiny_reward_model_ranks_gold(tiny: BuiltinTask) -> None:
    assert tiny.info["summary"]["rm_heldout_accuracy"] > 0.7
    assert tiny.info["reward_model"]["sft_samples"]["score_gold_correlation"] > 0.3
    params = registry.task_params_of(TaskParams, TINY)
    graph = task_graph(params)
    rng = random.Random(1)
    prompts = tiny.train_prompts[:40]
    trips = [parse_prompt(p) for p in prompts]
    best = [" ".join(map(str, shortest_path(graph, s, g, rng))) for s, g in trips]
    wasteful = [" ".join(map(str, goal_walk(graph, s, g, rng, 0.0, params.max_walk_len))) for s, g in trips]
    rm_tok = AutoTokenizer.from_pretrained(tiny.reward_model_path)
    rm = AutoModelForSequenceClassification.from_pretrained(tiny.reward_model_path).eval()

    def rm_scores(responses: list[str]) -> torch.Tensor:
        texts = [tiny.reward_text(p, r) for p, r in zip(prompts, responses, strict=True)]
        with torch.no_grad():
            return rm(**rm_tok(texts, return_tensors="pt", padding=True)).logits.squeeze(-1)

    gold_gap = torch.tensor(tiny.gold_score(prompts, best)) - torch.tensor(tiny.gold_score(prompts, wasteful))
    rm_gap = rm_scores(best) - rm_scores(wasteful)
    decided = gold_gap > 0
    assert (rm_gap[decided] > 0).float().mean() > 0.75


def test_another_task_seed_is_another_task_beside_the_default(tiny: BuiltinTask) -> None:
    # The default keeps its parameters, so its cache key (and every figure measured on it) stays.
    assert registry.task_params(TINY, None) is registry.task_params(TINY)
    cache = Path(tiny.policy_path).parent.parent.parent
    other = get_task(TINY, cache_dir=str(cache), seed=1)
    assert Path(other.policy_path).parent.name == f"{TINY}-{registry.task_params(TINY, 1).cache_key()}"
    assert other.policy_path != tiny.policy_path
    # gold_score is typed as any scoring function; a built-in task's is a GoldScorer, which keeps its graph.
    other_graph, graph = cast(GoldScorer, other.gold_score).graph, cast(GoldScorer, tiny.gold_score).graph
    assert other_graph.neighbors != graph.neighbors  # another graph
    assert other.info["graph"]["num_nodes"] == tiny.info["graph"]["num_nodes"]  # of the same size
