"""The rollout: sample responses, then score them under the reference, the value network and the reward."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.models.attention_kernel import attention_dtype, ratio_attention
from ppo_core.models.generation import generate
from ppo_core.models.loading import ValueModel
from ppo_core.models.prompt_data import PromptSet
from ppo_core.models.sequences import contains_stop, position_ids_from_mask, token_logprobs
from ppo_core.rewards.base import RewardInputs
from ppo_core.rollout.sampling_loop import sample_beside, sample_responses
from ppo_core.rollout.shared_prompts import PromptMemo, can_share, shared_response_logits
from ppo_core.rollout.static_decode import static_generate
from ppo_core.setup.run_setup import RunSetup


@dataclass
class Rollout:
    """One batch of experience; every [B, R] tensor is aligned with ``responses``."""

    prompts: list[str]  # as the policy read them (a conversation rendered by the chat template)
    response_texts: list[str]
    queries: torch.Tensor  # [B, Q] left-padded prompt ids
    query_mask: torch.Tensor  # [B, Q]
    responses: torch.Tensor  # [B, R] sampled ids, pad after the stop token
    response_mask: torch.Tensor  # [B, R] True up to and including the stop token
    has_stop: torch.Tensor  # [B]
    logprobs: torch.Tensor  # [B, R] under the sampling policy, at the sampling temperature
    ref_logprobs: torch.Tensor  # [B, R]
    values: torch.Tensor | None  # [B, R] V(s_t); None without a value network
    scores: torch.Tensor  # [B] reward, after the missing-EOS penalty
    reward_scores: dict[str, torch.Tensor]  # [B] each reward's own score by name, NaN where it gave none
    gold_scores: torch.Tensor | None  # [B] a task's gold score, for monitoring only
    logprobs_pending: bool = False  # logprobs are zeros until the update's own forward writes them

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask.sum())


def joined_inputs(
    queries: torch.Tensor, query_mask: torch.Tensor, responses: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask and position_ids of prompt + response, padding excluded from attention."""
    input_ids = torch.cat([queries, responses], dim=1)
    attention_mask = torch.cat([query_mask.long(), response_mask.long()], dim=1)
    return input_ids, attention_mask, position_ids_from_mask(attention_mask)


def response_logits(
    model: PreTrainedModel, queries: torch.Tensor, query_mask: torch.Tensor,
    responses: torch.Tensor, response_mask: torch.Tensor,
) -> torch.Tensor:
    """Logits that predict each response token: positions Q-1 .. Q+R-2 of the joined sequence."""
    input_ids, attention_mask, position_ids = joined_inputs(queries, query_mask, responses, response_mask)
    # Only the last R + 1 positions feed the vocabulary projection: prompt logits would be thrown away. One pass
    # over the whole sequence needs no KV cache (and gradient checkpointing refuses one).
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        logits_to_keep=kept_positions(input_ids.shape[1], responses.shape[1] + 1, input_ids.device), use_cache=False,
    ).logits
    kept: torch.Tensor = logits[:, :-1]
    return kept


def kept_positions(length: int, kept: int, device: torch.device) -> torch.Tensor:
    """The last ``kept`` positions of a ``length``-token sequence, as an index tensor for ``logits_to_keep``.

    Why not the integer ``kept``: a model slices its hidden states with it, ``h[:, -kept:]``, which keeps the whole
    sequence's batch stride. torch's matmul cannot fold such a [B, kept, H] view into one [B * kept, H] product, so
    the vocabulary projection runs as a batched product against the weight expanded over the batch; in bf16 CPU
    kernels that first copies a B x H x V tensor. Indexing with a tensor gathers the rows into a contiguous block,
    and one matrix product follows. On SmolLM2-135M (batch 8, 17 of 54 positions kept, LoRA, one thread) that made
    a forward and backward 2.2x faster in bf16, and 13% faster in fp32 in one A/B under load (benchmarks/README.md,
    "A real model's update on this CPU"). The logits are the same.
    """
    return torch.arange(length - kept, length, device=device)


def response_values(
    value_model: ValueModel, queries: torch.Tensor, query_mask: torch.Tensor,
    responses: torch.Tensor, response_mask: torch.Tensor,
) -> torch.Tensor:
    """V(s_t) for the state before each response token."""
    input_ids, attention_mask, position_ids = joined_inputs(queries, query_mask, responses, response_mask)
    values: torch.Tensor = value_model(input_ids, attention_mask, position_ids)[:, queries.shape[1] - 1 : -1].float()
    return values


def response_token_ids(responses: torch.Tensor, response_mask: torch.Tensor) -> list[list[int]]:
    """Each response's token ids without padding, the stop token included."""
    return [row[mask].tolist() for row, mask in zip(responses.cpu(), response_mask.cpu(), strict=True)]


def decode_responses(tokenizer: PreTrainedTokenizerBase, completion_ids: list[list[int]]) -> list[str]:
    """Response text without padding or special tokens."""
    return tokenizer.batch_decode(completion_ids, skip_special_tokens=True)


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, batch: PromptSet, max_prompt_length: int | None
) -> dict[str, torch.Tensor]:
    """Left-padded prompt ids and mask; past ``max_prompt_length`` tokens a prompt loses its beginning, as in TRL.

    A chat template already wrote the special tokens into the text, so they are added only to plain prompts.
    """
    encoded: dict[str, torch.Tensor] = tokenizer(
        batch.texts, return_tensors="pt", padding=True, add_special_tokens=not batch.conversational,
        truncation=max_prompt_length is not None, max_length=max_prompt_length,
    )
    return encoded


def sample_chunk(setup: RunSetup, queries: torch.Tensor, query_mask: torch.Tensor, config: PPOConfig,
                 device: torch.device, sampler: PreTrainedModel | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(responses, response_mask)`` for one chunk of prompts, from ``sampler`` (a copy of the policy) when given:
    on a CPU by ppo_core's own decode loop, on a GPU by HF generate or, with static_decode, the compiled loop."""
    model = sampler if sampler is not None else setup.models.policy
    stop_token_id, pad_token_id = setup.stop_token_id, setup.tokenizer.pad_token_id
    max_new_tokens = setup.generation_config.max_new_tokens
    if device.type == "cpu":
        return sample_responses(model, queries, query_mask, max_new_tokens, config.temperature, stop_token_id,
                                pad_token_id)
    if config.static_decode and device.type == "cuda":
        return static_generate(model, queries, query_mask, max_new_tokens, config.temperature, stop_token_id,
                               pad_token_id, compiled=True)
    return generate(model, queries, query_mask, setup.generation_config, stop_token_id, pad_token_id)


@dataclass
class Scored:
    """What the rewards and the gold scorer make of a batch's responses; [B] tensors aligned with the prompts."""

    response_texts: list[str]
    has_stop: torch.Tensor
    scores: torch.Tensor  # after the missing-EOS penalty
    reward_scores: dict[str, torch.Tensor]
    gold_scores: torch.Tensor | None


def score_responses(setup: RunSetup, batch: PromptSet, config: PPOConfig, queries: torch.Tensor,
                    query_mask: torch.Tensor, responses: torch.Tensor, response_mask: torch.Tensor) -> Scored:
    """Decode the responses and score them: every reward, the missing-EOS penalty, and a task's gold score."""
    models, tokenizer, device = setup.models, setup.tokenizer, responses.device
    completion_ids = response_token_ids(responses, response_mask)
    response_texts = decode_responses(tokenizer, completion_ids)
    has_stop = contains_stop(responses, setup.stop_token_id)
    scores, reward_scores = models.rewards(RewardInputs(
        prompts=batch, completions=response_texts, completion_ids=completion_ids, queries=queries,
        query_mask=query_mask, responses=responses, response_mask=response_mask, has_stop=has_stop,
        tokenizer=tokenizer, trainer_state=setup.trainer_state,
    ))
    if config.missing_eos_penalty is not None:
        scores = torch.where(has_stop, scores, scores - config.missing_eos_penalty)
    gold = None
    if models.gold_score is not None:
        gold = torch.tensor(models.gold_score(batch.texts, response_texts), dtype=torch.float32, device=device)
    return Scored(response_texts, has_stop, scores, reward_scores, gold)


@torch.no_grad()
def collect_samples(setup: RunSetup, batch: PromptSet, config: PPOConfig, device: torch.device,
                    sampler: PreTrainedModel | None = None) -> Scored:
    """One scored response per prompt, without the log-probabilities a PPO update needs: what a sample recording
    shows. The same chunks and draws as :func:`collect_rollout`, so the same seed gives the same responses."""
    encoded = encode_prompts(setup.tokenizer, batch, config.max_prompt_length)
    queries, query_mask = encoded["input_ids"].to(device), encoded["attention_mask"].to(device)
    chunks: dict[str, list[torch.Tensor]] = {"responses": [], "mask": []}
    for start in range(0, len(batch), config.local_rollout_forward_batch_size):
        rows = slice(start, start + config.local_rollout_forward_batch_size)
        responses, response_mask = sample_chunk(setup, queries[rows], query_mask[rows], config, device, sampler)
        chunks["responses"].append(responses)
        chunks["mask"].append(response_mask)
    return score_responses(setup, batch, config, queries, query_mask,
                           _cat_right_padded(chunks["responses"], setup.tokenizer.pad_token_id),
                           _cat_right_padded(chunks["mask"], False))


def update_shares_prompts(config: PPOConfig, prompt_width: int, response_length: int) -> bool:
    """Whether the update's forward runs each shared prompt once: ``shared_prompt_forwards``, no gradient
    checkpointing (which keeps no KV cache in training), and prompts long enough to pay for the second pass,
    2 (G - 1) Q >= G R for G generations a prompt, prompts Q tokens wide and ``response_length`` R (the run's new
    tokens at most): the copies' prompt tokens saved, (G - 1) / G Q a row, reach half a response. Below that the
    prompt pass, which reads every weight once more, costs more than it saves. Measured on SmolLM2-135M-Instruct with
    LoRA r 16 in bf16, G 4, R 16, 8 rows, one thread of an AMD EPYC (Zen 4): forward and backward ran at 0.91x whole
    sequences' speed with 3-token prompts, and 1.11x, 1.45x and 2.29x with 16, 38 and 128 tokens. An update's
    rollout decides the same way from the same widths, so that the first ratio divides like by like.

    >>> from ppo_core import PPOConfig
    >>> grpo = PPOConfig(advantage_estimator="grpo", num_generations=4)
    >>> update_shares_prompts(grpo, 10, 16), update_shares_prompts(grpo, 11, 16)
    (False, True)
    """
    generations = config.generations_per_prompt
    return config.shared_prompt_forwards and not config.gradient_checkpointing and generations > 1 and \
        2 * (generations - 1) * prompt_width >= generations * response_length


def old_logprobs_from_update(config: PPOConfig) -> bool:
    """Whether an update's rollout leaves the policy's log-probabilities to the update's forward: one epoch of one
    mini-batch (num_ppo_epochs 1, num_mini_batches 1) makes one optimizer step after every row's forward, so each row
    meets the policy it was sampled from, and KL outside the reward leaves nothing before the update to read them.
    The first ratio is then exp(0) = 1 by construction, and the rollout saves a scoring forward of the policy."""
    return config.num_ppo_epochs == 1 and config.num_mini_batches == 1 and not config.kl_penalty_in_reward


def scoring_logits(model: PreTrainedModel, shared: bool, queries: torch.Tensor, query_mask: torch.Tensor,
                   responses: torch.Tensor, response_mask: torch.Tensor, memo: PromptMemo | None = None,
                   ) -> torch.Tensor:
    """:func:`response_logits`, with the prompts several rows share run once where ``shared`` and the model keeps a
    KV cache (``ppo_core.shared_prompts``: the same logits up to float rounding), and kept in ``memo`` when given."""
    if shared and can_share(model):
        return shared_response_logits(model, queries, query_mask, responses, response_mask, memo)
    return response_logits(model, queries, query_mask, responses, response_mask)


@torch.no_grad()
def collect_rollout(setup: RunSetup, batch: PromptSet, config: PPOConfig, device: torch.device,
                    sampler: PreTrainedModel | None = None, for_update: bool = True,
                    reference_memo: PromptMemo | None = None,
                    reference_sampler: PreTrainedModel | None = None) -> Rollout:
    """Sample one response per prompt (from ``sampler``, a copy of the policy, when given) and record everything the
    PPO update needs. ``for_update`` False (a held-out evaluation) lets the scoring forwards share prompts: no update
    divides by the policy's log-probabilities then. An update's rollout scores the policy and the reference with
    the update's own kind of forward (prompts shared where :func:`update_shares_prompts`, else whole sequences),
    the two alike, so that a policy equal to its reference is at KL 0 to the last bit (under bf16 a shared
    prompt's rounding alone is ~1e-4 nats against a whole forward). ``reference_memo`` keeps the reference's pass
    over prompts that come again (the held-out ones). A held-out evaluation given ``reference_sampler`` (a copy of
    the reference made as ``sampler`` was: ``ppo_core.rollout.sampling_copy.reference_copy``) on a CPU reads both
    log-probabilities from the decode steps instead (:func:`ppo_core.rollout.sampling_loop.sample_beside`), with
    no scoring forward; only a CPU has such a copy."""
    models, tokenizer = setup.models, setup.models.tokenizer
    forward_batch_size = config.local_rollout_forward_batch_size
    encoded = encode_prompts(tokenizer, batch, config.max_prompt_length)
    queries, query_mask = encoded["input_ids"].to(device), encoded["attention_mask"].to(device)
    pending = for_update and old_logprobs_from_update(config)
    chunks: dict[str, list[torch.Tensor]] = {"responses": [], "mask": [], "logprobs": [], "ref": [], "values": []}
    kernel_dtype, tokens = attention_dtype(models.policy, device), queries.shape[1] + \
        setup.generation_config.max_new_tokens
    beside = (sampler, reference_sampler) if not for_update and sampler is not None and reference_sampler is not None \
        else None
    for start in range(0, len(batch), forward_batch_size):
        rows = slice(start, start + forward_batch_size)
        if beside is not None:
            stepped = sample_beside(*beside, queries[rows], query_mask[rows],
                                    setup.generation_config.max_new_tokens, config.temperature, setup.stop_token_id,
                                    tokenizer.pad_token_id)
            responses, response_mask = stepped.responses, stepped.response_mask
            chunks["logprobs"].append(stepped.logprobs)
            chunks["ref"].append(stepped.reference_logprobs)
        else:
            responses, response_mask = sample_chunk(setup, queries[rows], query_mask[rows], config, device, sampler)
        inputs = (queries[rows], query_mask[rows], responses, response_mask)
        shared = not for_update or update_shares_prompts(config, queries.shape[1],
                                                         setup.generation_config.max_new_tokens)
        # The update's attention kernel where these log-probabilities meet its own in the ratio; an evaluation's,
        # whose do not, is torch's choice.
        with ratio_attention(kernel_dtype, device, tokens) if for_update else contextlib.nullcontext():
            if beside is None:
                # The same kind of forward pass as the update's and the reference's, not the sampler's cached
                # logits: under bf16 the two differ by a few hundredths of a nat per token, enough to move the first
                # ratio. Each model's logits are reduced to log-probabilities before the next forward: with a large
                # vocabulary two [b, R, V] logits tensors alive at once would set the rollout's memory peak.
                chunks["logprobs"].append(
                    torch.zeros(responses.shape, device=responses.device) if pending
                    else token_logprobs(scoring_logits(models.policy, shared, *inputs), responses, config.temperature))
                with models.reference_policy() as reference:
                    chunks["ref"].append(token_logprobs(
                        scoring_logits(reference, shared, *inputs, memo=reference_memo), responses, config.temperature))
            if models.value_model is not None:
                chunks["values"].append(response_values(models.value_model, *inputs))
        chunks["responses"].append(responses)
        chunks["mask"].append(response_mask)
    responses = _cat_right_padded(chunks["responses"], tokenizer.pad_token_id)
    response_mask = _cat_right_padded(chunks["mask"], False)
    scored = score_responses(setup, batch, config, queries, query_mask, responses, response_mask)
    return Rollout(
        prompts=batch.texts,
        response_texts=scored.response_texts,
        queries=queries,
        query_mask=query_mask,
        responses=responses,
        response_mask=response_mask,
        has_stop=scored.has_stop,
        logprobs=_cat_right_padded(chunks["logprobs"], 0.0),
        ref_logprobs=_cat_right_padded(chunks["ref"], 0.0),
        values=_cat_right_padded(chunks["values"], 0.0) if chunks["values"] else None,
        scores=scored.scores,
        reward_scores=scored.reward_scores,
        gold_scores=scored.gold_scores,
        logprobs_pending=pending,
    )


def _cat_right_padded(parts: list[torch.Tensor], fill: float | int | bool) -> torch.Tensor:
    """Concatenate [b, r_i] chunks whose generation stopped at different lengths."""
    width = max(part.shape[1] for part in parts)
    joined = parts[0].new_full((sum(part.shape[0] for part in parts), width), fill)
    row = 0
    for part in parts:
        joined[row : row + part.shape[0], : part.shape[1]] = part
        row += part.shape[0]
    return joined
