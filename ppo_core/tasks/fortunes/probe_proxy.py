"""The third proxy: a linear head on a pretrained policy's early token states, averaged over the response.

RLHF starts its reward model from the policy it will train. Here that policy is a pretrained model (the task's
``pair_policy``, SmolLM2-135M-Instruct), and its first few layers already tell sentiment and fluent English apart:
a ridge regression of gold on their states, averaged over a response's tokens, orders about three in four
gold-apart pairs of SmolLM2's own held-out responses as gold does. Both learned proxies before it (the companion's
transformer, a fresh GPT-2) learned the words of their pairs by heart and ordered two in three.

The ridge head then starts a short regression of gold on the cut model's layers (its embeddings frozen), which
orders a few pairs more: on the build's 512 held-out responses, 74.1% of pairs with the ridge head alone and 76.6%
after two epochs (Spearman 0.67, then 0.72); on a fresh draw no build saw, 73.1% and 0.65
(``benchmarks/results/proxy_fidelity/``).

The proxy is saved as an ordinary sequence classifier: the pair policy cut to its first ``layers`` layers, its
score head read as the mean over tokens (:mod:`ppo_core.rewards.pooling`) and scaled so that the difference of two
scores is the log-odds that gold prefers the first (:func:`bradley_terry_scale`), as a reward model trained on
preference pairs reads. It reads the response alone, as gold does. Gold shares no weight with it; the policy starts
from the model it was cut from, as in RLHF.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AutoModelForSequenceClassification, PreTrainedModel, PreTrainedTokenizerBase

from ppo_core.models.sequences import position_ids_from_mask
from ppo_core.rewards.models import classifier_scores
from ppo_core.rewards.pooling import SCORE_POOLING_KEY
from ppo_core.tasks.fortunes.pairs import TextPreferencePair

RIDGE_PENALTY_PER_RESPONSE = 0.15
"""The ridge penalty on standardised states, per training response: about 2,000 on SmolLM2's 13,164 responses of
the fourth task's pairs, where penalties of 1,000 and 5,000 ordered held-out pairs alike, within a point."""

BATCH_SIZE = 64

TUNE_BATCH_SIZE = 32
TUNE_LR = 3e-5
"""The regression's step size: its layers start pretrained and its head fitted, so small steps keep both."""


def proxy_text(prompt: str, response: str) -> str:
    """What the probe reads: the response alone, as gold does (its prompt when the response is empty, so that every
    text has a token)."""
    return response.strip() or prompt


def ridge_head(states: torch.Tensor, targets: torch.Tensor, penalty: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Ridge regression of ``targets`` (n) on ``states`` (n x d), on states standardised per dimension:

    ``z = (x - mean) / sd``, ``v = (ZᵀZ + penalty·I)⁻¹ Zᵀ(y - ȳ)``; returns ``(weight, bias)`` on the raw states,
    ``weight = v / sd`` and ``bias = ȳ - weight·mean``, so that ``x·weight + bias`` is the fitted value.
    """
    x, y = states.double(), targets.double()
    mean, sd = x.mean(dim=0), x.std(dim=0, unbiased=False).clamp(min=1e-6)
    z = (x - mean) / sd
    v = torch.linalg.solve(z.T @ z + penalty * torch.eye(z.shape[1], dtype=z.dtype), z.T @ (y - y.mean()))
    weight = v / sd
    return weight, y.mean() - weight @ mean


def bradley_terry_scale(differences: torch.Tensor, iterations: int = 50) -> float:
    """The ``c > 0`` that maximises ``sum_i log sigmoid(c * d_i)`` over score differences ``d_i`` (chosen minus
    rejected), by Newton's method on ``c``: the scale at which a score difference is the log-odds of preference.
    ``ValueError`` when no ``c`` maximises it (no difference is negative: the likelihood rises without end)."""
    d = differences.double()
    if not (d < 0).any() or not (d > 0).any():
        raise ValueError("every pair is ordered the same way by the scores, so no finite scale fits them")
    c = torch.tensor(1.0 / d.abs().mean().item(), dtype=torch.float64)
    for _ in range(iterations):
        p = torch.sigmoid(c * d)
        gradient = (d * (1 - p)).sum()
        curvature = -(d * d * p * (1 - p)).sum()
        c = torch.clamp(c - gradient / curvature, min=c / 10)
    return float(c)


def truncated_classifier(policy: PreTrainedModel, layers: int) -> PreTrainedModel:
    """A one-label sequence classifier of ``policy``'s architecture with its first ``layers`` layers (all of them
    when it has fewer) and their weights (the embeddings and final norm too), its head zero and read as the mean
    over tokens."""
    config = policy.config.__class__.from_dict(policy.config.to_dict())
    if layers < 1:
        raise ValueError(f"a probe needs at least one layer, not {layers}")
    config.num_hidden_layers = min(layers, config.num_hidden_layers)
    config.num_labels = 1
    config.id2label, config.label2id = {0: "LABEL_0"}, {"LABEL_0": 0}
    config.architectures = None
    setattr(config, SCORE_POOLING_KEY, "mean")
    classifier = AutoModelForSequenceClassification.from_config(config)
    # The causal LM's head and its later layers have no place in the classifier, and are left out.
    missing, _ = classifier.load_state_dict(policy.state_dict(), strict=False)
    if any(not name.startswith("score.") for name in missing):
        raise ValueError(f"the classifier cut from {type(policy).__name__} lacks weights of it: {missing[:3]}")
    head = _score_head(classifier)
    torch.nn.init.zeros_(head.weight)
    cut: PreTrainedModel = classifier.eval()
    return cut


def _score_head(classifier: PreTrainedModel) -> torch.nn.Linear:
    head = classifier.get_submodule("score")
    assert isinstance(head, torch.nn.Linear)
    return head


@torch.no_grad()
def mean_states(classifier: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                texts: Sequence[str]) -> torch.Tensor:
    """Each text's last hidden states averaged over its tokens, as the classifier's head reads them."""
    rows = []
    for start in range(0, len(texts), BATCH_SIZE):
        batch = tokenizer(list(texts[start : start + BATCH_SIZE]), return_tensors="pt", padding=True)
        mask = batch["attention_mask"]
        hidden = classifier.base_model(input_ids=batch["input_ids"], attention_mask=mask,
                                       position_ids=position_ids_from_mask(mask), use_cache=False).last_hidden_state
        mask = mask.to(hidden.dtype)[..., None]
        rows.append(((hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).float())
    return torch.cat(rows)


@torch.no_grad()
def text_scores(classifier: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[float]:
    """The probe's score of each text as a run reads it (:func:`classifier_scores`, mean pooling)."""
    scores: list[float] = []
    for start in range(0, len(texts), BATCH_SIZE):
        batch = tokenizer(list(texts[start : start + BATCH_SIZE]), return_tensors="pt", padding=True)
        scores.extend(classifier_scores(classifier, batch["input_ids"], batch["attention_mask"], "mean").tolist())
    return scores


def probe_scores(classifier: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                 responses: Sequence[str]) -> list[float]:
    """The probe's score of each response to its prompt: of :func:`proxy_text`, as a run reads it."""
    return text_scores(classifier, tokenizer, [proxy_text(p, r) for p, r in zip(prompts, responses, strict=True)])


def _distinct(pairs: Sequence[TextPreferencePair]) -> tuple[list[str], list[float]]:
    """Every response of ``pairs`` once, as the probe reads it, with its gold."""
    gold: dict[str, float] = {}
    for pair in pairs:
        gold.setdefault(proxy_text(pair.prompt, pair.chosen), pair.chosen_gold)
        gold.setdefault(proxy_text(pair.prompt, pair.rejected), pair.rejected_gold)
    return list(gold), list(gold.values())


def tune_probe(classifier: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
               gold: Sequence[float], bias: float, epochs: int, generator: torch.Generator) -> list[float]:
    """Regress ``gold`` on the classifier's mean-pooled score plus ``bias`` (squared error, AdamW) for ``epochs``
    passes over ``texts`` in orders drawn from ``generator``, its layers and head learning and its embeddings
    frozen (most of the vocabulary never occurs in the texts); returns the loss of each step. The bias is not kept:
    the saved score is gold's estimate less a constant, which no comparison of two scores sees."""
    embeddings = classifier.get_input_embeddings()
    trained = [p for p in classifier.parameters() if all(p is not q for q in embeddings.parameters())]
    offset = torch.nn.Parameter(torch.tensor(float(bias)))
    optimizer = torch.optim.AdamW([*trained, offset], lr=TUNE_LR, weight_decay=0.01)
    target = torch.tensor(gold, dtype=torch.float32)
    losses = []
    classifier.train()
    for _ in range(epochs):
        order = torch.randperm(len(texts), generator=generator).tolist()
        for start in range(0, len(order), TUNE_BATCH_SIZE):
            rows = order[start : start + TUNE_BATCH_SIZE]
            batch = tokenizer([texts[i] for i in rows], return_tensors="pt", padding=True)
            predicted = classifier_scores(classifier, batch["input_ids"], batch["attention_mask"], "mean") + offset
            loss = ((predicted - target[rows]) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    classifier.eval()
    return losses


def train_probe(policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, layers: int,
                pairs: Sequence[TextPreferencePair], epochs: int,
                generator: torch.Generator) -> tuple[PreTrainedModel, dict[str, float]]:
    """The probe cut from ``policy``, its head the ridge fit to the gold of ``pairs``' responses, then tuned for
    ``epochs`` (:func:`tune_probe`); returns it and its fit (its layers, the responses it learned from, the last
    tenth of the regression's mean squared error, the Bradley-Terry scale and the pairs' mean negative
    log-likelihood at that scale)."""
    classifier = truncated_classifier(policy, layers)
    texts, gold = _distinct(pairs)
    states = mean_states(classifier, tokenizer, texts)
    weight, bias = ridge_head(states, torch.tensor(gold), RIDGE_PENALTY_PER_RESPONSE * len(texts))
    head = _score_head(classifier)
    with torch.no_grad():
        head.weight.copy_(weight.to(head.weight.dtype)[None])
    losses = tune_probe(classifier, tokenizer, texts, gold, float(bias), epochs, generator)
    fitted = dict(zip(texts, text_scores(classifier, tokenizer, texts), strict=True))
    differences = torch.tensor([fitted[proxy_text(p.prompt, p.chosen)] - fitted[proxy_text(p.prompt, p.rejected)]
                                for p in pairs])
    scale = bradley_terry_scale(differences)
    with torch.no_grad():
        head.weight.mul_(scale)
    loss = float(-torch.nn.functional.logsigmoid(scale * differences.double()).mean())
    tail = losses[-max(1, len(losses) // 10):]
    return classifier, {"layers": classifier.config.num_hidden_layers, "responses": len(texts),
                        "tune_epochs": epochs, "tune_mse": sum(tail) / len(tail) if losses else float("nan"),
                        "scale": scale, "final_loss": loss}
