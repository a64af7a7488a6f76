"""A sequence-classification reward model, reading exactly what the policy wrote.

How an episode reaches the reward model, in order of preference:

1. The reward model shares the policy's vocabulary: it scores the policy's own token ids, the prompt and the
   response up to and including its stop token (reward models trained with TRL's RewardTrainer expect the EOS).
   Nothing is decoded and re-encoded, so no word fuses with the prompt's last one.
2. The prompts are conversations and the reward model's tokenizer has a chat template: the conversation plus
   the assistant's completion, rendered by that template.
3. Otherwise the whole sequence is decoded once, prompt and response together, and the reward model's own
   tokenizer encodes it, with its EOS appended where the response stopped.

A built-in task may instead give the text its reward model was trained on (``reward_text``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ppo_core.config.ppo_config import ConfigError
from ppo_core.errors import first_line
from ppo_core.models.loading import UNREADABLE, LoadOptions, load_pretrained
from ppo_core.models.sequences import position_ids_from_mask
from ppo_core.rewards.base import RewardInputs, RewardScores
from ppo_core.rewards.pooling import Pooling, last_attended, pooled_scores, score_pooling


def same_vocabulary(first: PreTrainedTokenizerBase, second: PreTrainedTokenizerBase) -> bool:
    """Whether a token id means the same token to both tokenizers."""
    return bool(first.get_vocab() == second.get_vocab())


def max_positions(model: PreTrainedModel) -> int | None:
    """The longest sequence a model's position embeddings cover (``max_position_embeddings``, GPT-2's
    ``n_positions``), or None when its config names none."""
    limit = getattr(model.config, "max_position_embeddings", None)
    return int(limit) if isinstance(limit, int) and limit > 0 else None


def keep_last(rows: list[list[int]], limit: int | None) -> list[list[int]]:
    """Each row's last ``limit`` tokens (every row whole when ``limit`` is None).

    A policy's response re-tokenized for a reward model can come out longer than the model's position embeddings (a
    word-level tokenizer reads a run of digits or punctuation as many tokens), which would stop the run with an
    IndexError; the end is kept because the score is read at the last token, and the response is at the end.
    """
    return rows if limit is None else [row[-limit:] for row in rows]


class SequenceClassifierReward:
    """A one-label sequence-classification model, scored at the last attended token."""

    def __init__(
        self,
        path: str,
        options: LoadOptions,
        batch_size: int,
        policy_tokenizer: PreTrainedTokenizerBase,
        reward_text: Callable[[str, str], str] | None = None,
        *,
        name: str,
    ) -> None:
        """``path`` as it loads; ``name`` is its metric's name (``rewards/<name>``), which whoever names the run's
        rewards gives (``ppo_core.rewards.weighted``)."""
        # ``path`` as it loads (ppo_core.models.paths.resolve_models): checked once, before anything loaded.
        self.model: PreTrainedModel = load_pretrained(AutoModelForSequenceClassification, path, options,
                                                      "reward_model_path", "a reward model")
        self.model.eval()
        self.model.requires_grad_(False)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                path, padding_side="right", revision=options.revision, trust_remote_code=options.trust_remote_code
            )
        except UNREADABLE as error:
            raise ConfigError(f"reward_model_path: cannot load a reward model from {path!r} ({first_line(error)})") \
                from None
        try:
            self.pooling = score_pooling(self.model.config)
        except ValueError as error:
            raise ConfigError(f"reward_model_path: {path!r}: {error}") from None
        if self.tokenizer.pad_token_id is None:
            # Masks, not the pad id, decide what is padding, so borrowing EOS is safe here.
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.path = path
        self.spec = path
        self.name = name
        self.batch_size = batch_size
        self.reward_text = reward_text
        self.vocabulary_matches = same_vocabulary(self.tokenizer, policy_tokenizer)
        self.reads_policy_ids = reward_text is None and self.vocabulary_matches

    def to(self, device: torch.device) -> SequenceClassifierReward:
        self.model.to(device)  # type: ignore[arg-type]  # transformers types .to() as a decorator
        return self

    @torch.no_grad()
    def __call__(self, inputs: RewardInputs) -> RewardScores:
        device = self.model.device
        if self.reads_policy_ids:
            input_ids = torch.cat([inputs.queries, inputs.responses], dim=1)
            attention_mask = torch.cat([inputs.query_mask.long(), inputs.response_mask.long()], dim=1)
        else:
            padded = self.tokenizer.pad({"input_ids": self._token_rows(inputs)}, return_tensors="pt")
            input_ids, attention_mask = padded["input_ids"], padded["attention_mask"]
        scores = [self._score(input_ids[rows].to(device), attention_mask[rows].to(device))
                  for rows in self._row_slices(len(input_ids))]
        return RewardScores.every_row(torch.cat(scores).float())

    def _token_rows(self, inputs: RewardInputs) -> list[list[int]]:
        """Each episode in the reward model's own tokens, when it cannot read the policy's, cut to the positions the
        model has (:func:`keep_last`)."""
        return keep_last(self._retokenized(inputs), max_positions(self.model))

    def _retokenized(self, inputs: RewardInputs) -> list[list[int]]:
        batch = inputs.prompts
        if self.reward_text is not None:
            texts = [self.reward_text(p, c) for p, c in zip(batch.texts, inputs.completions, strict=True)]
            return [list(ids) for ids in self.tokenizer(texts)["input_ids"]]
        if batch.conversational and getattr(self.tokenizer, "chat_template", None):
            conversations = [[*prompt, {"role": "assistant", "content": completion}]
                             for prompt, completion in zip(batch.prompts, inputs.completions, strict=True)]
            # The template writes the special tokens itself.
            texts = [str(self.tokenizer.apply_chat_template(c, tokenize=False)) for c in conversations]
            return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        ids = torch.cat([inputs.queries, inputs.responses], dim=1).cpu()
        mask = torch.cat([inputs.query_mask.bool(), inputs.response_mask.bool()], dim=1).cpu()
        texts = inputs.tokenizer.batch_decode([row[keep].tolist() for row, keep in zip(ids, mask, strict=True)],
                                              skip_special_tokens=True)
        rows = [list(row) for row in self.tokenizer(texts)["input_ids"]]
        eos = self.tokenizer.eos_token_id
        if eos is not None:  # as an id: as text it could fuse with the last word
            rows = [[*row, eos] if stopped and row[-1:] != [eos] else row
                    for row, stopped in zip(rows, inputs.has_stop.tolist(), strict=True)]
        return rows

    def _row_slices(self, rows: int) -> list[slice]:
        return [slice(start, start + self.batch_size) for start in range(0, rows, self.batch_size)]

    def _score(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return classifier_scores(self.model, input_ids, attention_mask, self.pooling)


def classifier_scores(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      pooling: Pooling) -> torch.Tensor:
    """A one-label sequence classifier's score of each row, its head read as ``pooling`` says
    (:mod:`ppo_core.rewards.pooling`).

    A decoder's positions and last token come from the mask rather than the pad id: the policy's ids are padded on
    both sides, and models whose pad token is EOS would otherwise be read one token early.
    """
    head = getattr(model, "score", None)
    if head is None:
        scores: torch.Tensor = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0]
        return scores  # an encoder: no cache, and its own pooling
    hidden = model.base_model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,  # a decoder (it has a score head): one pass, nothing to cache
    ).last_hidden_state
    if pooling == "last":  # the head on one state per row, not on every token
        hidden = hidden[torch.arange(hidden.shape[0], device=hidden.device), last_attended(attention_mask)][:, None]
        attention_mask = attention_mask.new_ones(hidden.shape[:2])
    return pooled_scores(head(hidden)[..., 0], attention_mask, pooling)
