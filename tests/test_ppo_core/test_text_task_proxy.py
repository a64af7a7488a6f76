"""The text task's proxy versions (their cache keys, the fresh proxy, tiny builds of each) and the proxy's fidelity
to gold on held-out responses, measured against a slow reference."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path

import pytest
import torch
from helpers.scored_text import scored_responses
from scipy.stats import spearmanr  # type: ignore[import-untyped]
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from ppo_core.tasks import registry
from ppo_core.tasks.fortunes.build import build_text_task
from ppo_core.tasks.fortunes.pairs import DEFAULT_MARGIN, all_pairs
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.fortunes.proxy import PROXY_VERSIONS, ProxyRecipe, fresh_proxy_base, proxy_recipe
from ppo_core.tasks.fortunes.proxy_fidelity import fidelity, pair_agreement
from ppo_core.tasks.fortunes.tokenizer import build_word_tokenizer

# The text tasks' keys before the proxy had versions: their cached builds, and every study and figure on them, must
# keep pointing at the same proxy.
FIRST_PROXY_KEYS = {
    "fortunes": "196400512515",
    "fortunes_tiny": "dc7f0ddec93f",
    "fortunes_v2": "ff1e963e1309",
    "fortunes_v2_tiny": "63a197068fed",
    "fortunes_v2_smollm2": "d6dc6a3ab23b",
    "fortunes_v3": "4db84b421d9a",
    "fortunes_v3_tiny": "c379a7af0184",
    "fortunes_v3_smollm2": "0251021ef1e2",
}


def test_tasks_of_the_first_proxy_keep_their_cache_keys() -> None:
    for name, key in FIRST_PROXY_KEYS.items():
        params = registry.task_params_of(TextTaskParams, name)
        assert params.proxy_version == 1 and params.cache_key() == key, name


def test_the_second_proxy_task_is_the_third_gold_on_smollm2_with_a_key_of_its_own() -> None:
    v3 = registry.task_params_of(TextTaskParams, "fortunes_v3_smollm2")
    v4 = registry.task_params_of(TextTaskParams, "fortunes_v4_smollm2")
    assert dataclasses.replace(v4, proxy_version=1) == v3
    assert v4.gold_version == 3 and v4.proxy_version == 2
    assert v4.cache_key() not in FIRST_PROXY_KEYS.values()


def test_an_unknown_proxy_version_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: 1, 2, 3"):
        proxy_recipe(7)


def test_a_fresh_proxy_has_its_recipes_shape_and_no_companion_to_start_from() -> None:
    tokenizer = build_word_tokenizer(["a b c d e f", "the cat sat"], vocab_size=16, model_max_length=24)
    shape = dataclasses.replace(registry.task_params_of(TextTaskParams, "fortunes_tiny"), n_positions=24)
    model = fresh_proxy_base(ProxyRecipe(from_companion=False, dropout=0.2), shape, tokenizer)
    config = model.config
    assert (config.n_layer, config.n_embd, config.n_head, config.n_positions) == (1, 32, 2, 24)
    assert config.resid_pdrop == config.attn_pdrop == config.embd_pdrop == 0.2
    assert config.vocab_size == len(tokenizer) and config.pad_token_id == tokenizer.pad_token_id
    with pytest.raises(ValueError, match="companion"):
        fresh_proxy_base(PROXY_VERSIONS[1], shape, tokenizer)


def _slow_fidelity(golds: list[float], prompts: list[str], proxy_scores: list[float]) -> tuple[float, float]:
    """Every two responses to one prompt at least the margin apart in gold, counted one by one; scipy's Spearman."""
    right = total = 0
    for i, j in itertools.combinations(range(len(golds)), 2):
        if prompts[i] == prompts[j] and golds[i] != golds[j] and abs(golds[i] - golds[j]) >= DEFAULT_MARGIN:
            total += 1
            better, worse = (i, j) if golds[i] > golds[j] else (j, i)
            right += proxy_scores[better] > proxy_scores[worse]
    return right / total, float(spearmanr(golds, proxy_scores).statistic)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fidelity_matches_a_slow_reference(seed: int) -> None:
    scored = scored_responses(per_prompt=5, seed=seed)
    rng = random.Random(seed)
    # A noisy proxy with ties of its own, so that a tie counted as right would show.
    proxy_scores = [round(item.gold + rng.gauss(0, 0.3), 1) for item in scored]
    measured = fidelity(scored, proxy_scores)
    accuracy, spearman = _slow_fidelity([s.gold for s in scored], [s.prompt for s in scored], proxy_scores)
    assert measured["pair_accuracy"] == pytest.approx(accuracy)
    assert measured["spearman"] == pytest.approx(spearman)
    assert measured["pairs"] == len(all_pairs(scored)) and measured["responses"] == len(scored)


def test_a_proxy_that_is_gold_agrees_on_every_pair_and_its_reverse_on_none() -> None:
    scored = scored_responses()
    golds = [item.gold for item in scored]
    assert fidelity(scored, golds)["pair_accuracy"] == 1.0
    assert fidelity(scored, [-g for g in golds])["spearman"] == pytest.approx(-1.0)
    assert pair_agreement([0.0] * len(golds), [(0, 1)]) == 0.0  # a tie is wrong


@pytest.fixture(scope="module")
def tiny_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    # The tiny third-gold task built with each proxy version, alike in everything else.
    params = registry.task_params_of(TextTaskParams, "fortunes_v3_tiny")
    builds = {}
    for version in (1, 2):
        out = tmp_path_factory.mktemp(f"proxy_{version}")
        build_text_task("fortunes_v3_tiny", dataclasses.replace(params, proxy_version=version), out)
        builds[version] = out
    return builds


def _state(path: Path) -> dict[str, torch.Tensor]:
    return AutoModelForSequenceClassification.from_pretrained(path).state_dict()


def test_the_second_proxy_shares_no_weight_with_the_companion(tiny_builds: dict[int, Path]) -> None:
    companion = {name.removeprefix("transformer."): weight for name, weight
                 in AutoModelForCausalLM.from_pretrained(tiny_builds[2] / "policy").state_dict().items()
                 if name.startswith("transformer.")}
    info = json.loads((tiny_builds[2] / "build_info.json").read_text())
    assert info["reward_model"]["proxy_version"] == 2
    proxy = _state(tiny_builds[2] / "reward_model")
    assert proxy["transformer.wte.weight"].shape == companion["wte.weight"].shape
    # Trained from elsewhere: not one matrix near the companion's.
    assert all(not torch.allclose(proxy[f"transformer.{name}"], weight, atol=1e-3)
               for name, weight in companion.items() if weight.dim() == 2)
    config = AutoModelForSequenceClassification.from_pretrained(tiny_builds[2] / "reward_model").config
    assert config.resid_pdrop == PROXY_VERSIONS[2].dropout > 0


def test_the_proxy_version_changes_the_proxy_alone(tiny_builds: dict[int, Path]) -> None:
    first, second = (json.loads((tiny_builds[v] / "build_info.json").read_text()) for v in (1, 2))
    assert first["sft"]["final_loss"] == second["sft"]["final_loss"]
    assert (tiny_builds[1] / "rm_pairs.jsonl").read_text() == (tiny_builds[2] / "rm_pairs.jsonl").read_text()
    assert first["reward_model"]["proxy_version"] == 1
    assert not torch.equal(_state(tiny_builds[1] / "reward_model")["score.weight"],
                           _state(tiny_builds[2] / "reward_model")["score.weight"])


def test_the_first_proxy_still_starts_from_the_companion(tiny_builds: dict[int, Path]) -> None:
    config = AutoModelForSequenceClassification.from_pretrained(tiny_builds[1] / "reward_model").config
    assert config.resid_pdrop == 0.0


def test_a_probe_proxy_without_a_pair_policy_is_refused_before_anything_trains(tmp_path: Path) -> None:
    params = dataclasses.replace(registry.task_params_of(TextTaskParams, "fortunes_v3_tiny"), proxy_version=3)
    refused = r"^proxy version 3 is a probe .* task 'fortunes_v3_tiny' names no pair_policy$"
    with pytest.raises(ValueError, match=refused):
        build_text_task("fortunes_v3_tiny", params, tmp_path)
    assert not list(tmp_path.iterdir())
