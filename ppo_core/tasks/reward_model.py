"""The proxy reward model: a GPT-2 sequence classifier trained with a Bradley-Terry loss.

As in RLHF practice it starts from the SFT policy's transformer (so it already "knows"
the graph's edges) and learns a scalar head from a finite set of preference pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import GPT2ForSequenceClassification, GPT2LMHeadModel, PreTrainedTokenizerFast

from ppo_core.rewards.models import keep_last, max_positions
from ppo_core.tasks.sft import optimizer_step, warmup_cosine

# Pulls the mean reward of each pair towards 0 so the RM's scale stays centred (the BT
# loss alone only fixes differences), which keeps PPO rewards in a sane range.
CENTERING_COEF = 1e-2


class RewardPair(Protocol):
    """A preference between two responses to one prompt: the graph task's pairs and the text task's alike."""

    @property
    def prompt(self) -> str: ...
    @property
    def chosen(self) -> str: ...
    @property
    def rejected(self) -> str: ...


class RewardTraining(Protocol):
    """The Bradley-Terry training settings a task's parameters give."""

    @property
    def rm_epochs(self) -> int: ...
    @property
    def rm_batch_size(self) -> int: ...
    @property
    def rm_lr(self) -> float: ...


def format_for_reward(prompt: str, response: str) -> str:
    """Return the exact text the reward model scores for ``(prompt, response)``.

    The join is a single space, and an empty response gives the prompt alone. This is the
    only place the join is defined: the RM is trained on it and the trainer calls it
    through ``BuiltinTask.reward_text``.
    """
    response = response.strip()
    return f"{prompt} {response}" if response else prompt


def init_reward_model(policy: GPT2LMHeadModel) -> GPT2ForSequenceClassification:
    """A one-output classifier whose transformer is a copy of the policy's."""
    config = policy.config.to_dict()
    # The label maps come from the LM config's defaults and would contradict num_labels=1.
    config.pop("id2label", None)
    config.pop("label2id", None)
    config.update(num_labels=1, architectures=["GPT2ForSequenceClassification"])
    model = GPT2ForSequenceClassification(type(policy.config).from_dict(config))
    model.transformer.load_state_dict(policy.transformer.state_dict())
    return model


def pad_right(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token-id lists to one width; returns ``(input_ids, attention_mask)``."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids, mask


def encode_pairs(
    tokenizer: PreTrainedTokenizerFast, pairs: Sequence[RewardPair]
) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids of the RM texts for the chosen and the rejected side of each pair."""
    chosen = [format_for_reward(p.prompt, p.chosen) for p in pairs]
    rejected = [format_for_reward(p.prompt, p.rejected) for p in pairs]
    return tokenizer(chosen)["input_ids"], tokenizer(rejected)["input_ids"]


def score_ids(model: GPT2ForSequenceClassification, rows: list[list[int]], pad_id: int) -> torch.Tensor:
    """RM scores for pre-tokenised texts, right-padded as the saved RM tokenizer pads.

    Batches are right-padded so GPT-2's default absolute positions match a plain
    ``model(**tokenizer(texts, padding=True))`` call with the RM directory's tokenizer.
    A caller that pads on the left must pass ``position_ids = attention_mask.cumsum(-1) - 1``
    (clamped at 0): with shifted positions this RM's scores are badly wrong.
    """
    # A text longer than the model's positions keeps its end, as the trainer's reward scoring cuts it (a pretrained
    # policy's symbols and newlines can take more word-level tokens than a response has).
    ids, mask = pad_right(keep_last(rows, max_positions(model)), pad_id)
    scores: torch.Tensor = model(input_ids=ids, attention_mask=mask).logits.squeeze(-1)
    return scores


def train_reward_model(
    policy: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerFast,
    pairs: Sequence[RewardPair],
    params: RewardTraining,
    generator: torch.Generator,
) -> tuple[GPT2ForSequenceClassification, list[float]]:
    """Bradley-Terry training on ``pairs``; returns the model (eval mode) and its loss curve."""
    model = init_reward_model(policy)
    chosen, rejected = encode_pairs(tokenizer, pairs)
    steps_per_epoch = -(-len(pairs) // params.rm_batch_size)
    total = steps_per_epoch * params.rm_epochs
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.rm_lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(step, total))
    model.train()
    losses = []
    for _ in range(params.rm_epochs):
        order = torch.randperm(len(pairs), generator=generator).tolist()
        for first in range(0, len(order), params.rm_batch_size):
            batch = order[first : first + params.rm_batch_size]
            rows = [chosen[i] for i in batch] + [rejected[i] for i in batch]
            scores = score_ids(model, rows, tokenizer.pad_token_id)
            good, bad = scores[: len(batch)], scores[len(batch) :]
            loss = -F.logsigmoid(good - bad).mean() + CENTERING_COEF * ((good + bad) ** 2).mean()
            losses.append(optimizer_step(model, optimizer, scheduler, loss))
    model.eval()
    return model, losses


@torch.no_grad()
def pairwise_accuracy(
    model: GPT2ForSequenceClassification,
    tokenizer: PreTrainedTokenizerFast,
    pairs: Sequence[RewardPair],
) -> float:
    """Fraction of pairs where the RM scores the chosen response strictly higher."""
    chosen, rejected = encode_pairs(tokenizer, pairs)
    good = score_ids(model, chosen, tokenizer.pad_token_id)
    bad = score_ids(model, rejected, tokenizer.pad_token_id)
    return float((good > bad).float().mean())


@torch.no_grad()
def response_scores(model: GPT2ForSequenceClassification, tokenizer: PreTrainedTokenizerFast,
                    prompts: Sequence[str], responses: Sequence[str], batch_size: int = 256) -> list[float]:
    """The reward model's score of each response to its prompt, on the text it was trained on."""
    rows = tokenizer([format_for_reward(p, r) for p, r in zip(prompts, responses, strict=True)])["input_ids"]
    scores: list[float] = []
    for start in range(0, len(rows), batch_size):
        scores.extend(score_ids(model, rows[start : start + batch_size], tokenizer.pad_token_id).tolist())
    return scores
