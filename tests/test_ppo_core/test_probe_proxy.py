"""The third proxy, a ridge probe on a pretrained policy's first layers: its math against slow references, the
classifier it is saved as, and that a run reads it as the build scored it."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from ppo_core.rewards.models import classifier_scores
from ppo_core.rewards.pooling import pooled_scores, score_pooling
from ppo_core.tasks.fortunes.pairs import TextPreferencePair
from ppo_core.tasks.fortunes.probe_proxy import (
    bradley_terry_scale,
    mean_states,
    probe_scores,
    proxy_text,
    ridge_head,
    train_probe,
    truncated_classifier,
)
from ppo_core.tasks.fortunes.proxy import PROXY_VERSIONS
from tools import tiny_models

WORDS = ["the", "a", "good", "bad", "day", "night", "love", "hate", "sun", "rain", "friend", "enemy", "kind", "cruel",
         "bright", "dark"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ridge_head_matches_least_squares_on_the_augmented_system(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(40, 5)) * rng.uniform(0.1, 10, size=5) + rng.normal(size=5)
    y = x @ rng.normal(size=5) + rng.normal(size=40)
    penalty = float(rng.uniform(0.1, 20))
    weight, bias = ridge_head(torch.tensor(x), torch.tensor(y), penalty)
    # Slow reference: standardise, then least squares on [Z; sqrt(penalty) I] against [y - mean; 0].
    mean, sd = x.mean(axis=0), x.std(axis=0)
    z = (x - mean) / sd
    v = np.linalg.lstsq(np.vstack([z, np.sqrt(penalty) * np.eye(5)]),
                        np.concatenate([y - y.mean(), np.zeros(5)]), rcond=None)[0]
    np.testing.assert_allclose(weight.numpy(), v / sd, rtol=1e-8)
    np.testing.assert_allclose(x @ weight.numpy() + bias.item(), z @ v + y.mean(), rtol=1e-8)


@pytest.mark.parametrize("seed", [0, 1])
def test_bradley_terry_scale_maximises_the_likelihood(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = rng.normal(loc=0.4, scale=1.0, size=300)
    scale = bradley_terry_scale(torch.tensor(d))
    grid = np.linspace(0.01, 5, 5000)
    likelihood = [np.sum(-np.log1p(np.exp(-c * d))) for c in grid]
    assert scale == pytest.approx(grid[int(np.argmax(likelihood))], abs=2e-3)
    with pytest.raises(ValueError, match="no finite scale"):
        bradley_terry_scale(torch.tensor([0.5, 1.0, 2.0]))


def test_mean_pooling_matches_a_loop_and_last_pooling_reads_transformers_own_token(tmp_path: Path) -> None:
    scores = torch.randn(3, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    slow = [sum(scores[b, t].item() for t in range(5) if mask[b, t]) / max(1, int(mask[b].sum())) for b in range(3)]
    assert pooled_scores(scores, mask, "mean").tolist() == pytest.approx(slow)
    path = tiny_models.write_gpt2(tmp_path / "gpt2", pad_token="<pad>")
    classifier = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="right")
    batch = tokenizer(["a good day", "the night was dark and long"], return_tensors="pt", padding=True)
    with torch.no_grad():
        own = classifier(**batch).logits[:, 0]
        ours = classifier_scores(classifier, batch["input_ids"], batch["attention_mask"], "last")
    torch.testing.assert_close(ours, own)
    assert score_pooling(classifier.config) == "last"
    classifier.config.score_pooling = "max"
    with pytest.raises(ValueError, match="not one of last, mean"):
        score_pooling(classifier.config)


@pytest.mark.parametrize("writer", [tiny_models.write_llama, tiny_models.write_gpt2])
def test_the_classifier_is_the_policys_first_layers(writer: object, tmp_path: Path) -> None:
    size = tiny_models.TinySize(num_layers=4)
    path = writer(tmp_path / "policy", seed=3, size=size)  # type: ignore[operator]
    policy = AutoModelForCausalLM.from_pretrained(path)
    classifier = truncated_classifier(policy, 2)
    assert classifier.config.num_hidden_layers == 2 and score_pooling(classifier.config) == "mean"
    policy_state, state = policy.state_dict(), classifier.state_dict()
    shared = [name for name in state if not name.startswith("score.")]
    assert shared and all(torch.equal(state[name], policy_state[name]) for name in shared)
    assert not any(".2." in name or ".3." in name for name in shared)  # no third or fourth layer
    assert torch.count_nonzero(state["score.weight"]) == 0
    assert truncated_classifier(policy, 9).config.num_hidden_layers == 4  # a shorter policy gives every layer


def _pairs(rng: random.Random, gold: dict[str, float]) -> list[TextPreferencePair]:
    texts = list(gold)
    pairs = []
    for _ in range(300):
        a, b = rng.sample(texts, 2)
        if abs(gold[a] - gold[b]) >= 0.05:
            hi, lo = (a, b) if gold[a] > gold[b] else (b, a)
            pairs.append(TextPreferencePair("Say", hi, lo, gold[hi], gold[lo]))
    return pairs


def _tiny_policy(tmp_path: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A tiny Llama of width 48 and its tokenizer, padding on the right with EOS."""
    path = tiny_models.write_llama(tmp_path / "policy", seed=5, size=tiny_models.TinySize(hidden_size=48))
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="right")
    tokenizer.pad_token = tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(path), tokenizer


def test_a_probe_learns_a_gold_its_states_carry_and_a_reload_reads_it_alike(tmp_path: Path) -> None:
    policy, tokenizer = _tiny_policy(tmp_path)
    rng = random.Random(0)
    texts = sorted({" ".join(rng.choices(WORDS, k=rng.randint(2, 8))) for _ in range(400)})
    # A gold the first layer's mean states carry linearly, plus a little noise: the probe must order it.
    direction = torch.randn(48, generator=torch.Generator().manual_seed(1))
    states = mean_states(truncated_classifier(policy, 1), tokenizer, texts)
    raw = (states @ direction).tolist()
    gold = {t: g + rng.gauss(0, 0.01 * float(np.std(raw))) for t, g in zip(texts, raw, strict=True)}
    pairs = _pairs(rng, gold)
    probe, fit = train_probe(policy, tokenizer, 1, pairs, 0, torch.Generator().manual_seed(0))
    assert fit["layers"] == 1 and fit["responses"] == len({t for p in pairs for t in (p.chosen, p.rejected)})
    scores = probe_scores(probe, tokenizer, ["Say"] * len(texts), texts)
    right = sum(scores[texts.index(p.chosen)] > scores[texts.index(p.rejected)] for p in pairs)
    assert right / len(pairs) > 0.9  # the penalty shrinks the fit a little
    probe.save_pretrained(tmp_path / "probe")
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "probe").eval()
    assert score_pooling(reloaded.config) == "mean"
    assert probe_scores(reloaded, tokenizer, ["Say"] * 5, texts[:5]) == pytest.approx(scores[:5], abs=1e-5)


def test_the_probe_reads_the_response_alone_and_the_third_version_is_a_probe() -> None:
    assert proxy_text("Love is", "  patient and kind ") == "patient and kind"
    assert proxy_text("Love is", "  ") == "Love is"
    assert PROXY_VERSIONS[3].probe_layers == 3 and PROXY_VERSIONS[3].probe_epochs == 2
    assert not PROXY_VERSIONS[3].reads_prompt
    assert PROXY_VERSIONS[2].reads_prompt


def test_tuning_moves_the_layers_and_head_but_never_the_embeddings(tmp_path: Path) -> None:
    policy, tokenizer = _tiny_policy(tmp_path)
    rng = random.Random(1)
    texts = sorted({" ".join(rng.choices(WORDS, k=rng.randint(2, 8))) for _ in range(200)})
    gold = {t: sum(w in ("good", "love", "kind", "bright") for w in t.split()) / 4 for t in texts}
    pairs = _pairs(rng, gold)
    untuned, _ = train_probe(policy, tokenizer, 2, pairs, 0, torch.Generator().manual_seed(0))
    tuned, fit = train_probe(policy, tokenizer, 2, pairs, 3, torch.Generator().manual_seed(0))
    before, after = untuned.state_dict(), tuned.state_dict()
    embedding = "model.embed_tokens.weight"
    assert torch.equal(after[embedding], policy.state_dict()[embedding])
    moved = [name for name in after if name != embedding and not torch.equal(after[name], before[name])]
    assert "score.weight" in moved and any(".layers.1." in name for name in moved)
    assert fit["tune_epochs"] == 3 and fit["tune_mse"] >= 0
