"""ppo_core.shared_prompts: prompts that several rows share are run once, and the logits that follow are a whole
forward's; a frozen model's pass over prompts that come again is kept, never written to; the rollout's policy
log-probabilities for an update stay the whole forward's, and a held-out rollout scores as one does."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from helpers.tiny_architectures import WRITERS, load_left_padded
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.rollout.collect import collect_rollout, response_logits, scoring_logits
from ppo_core.rollout.sampling_loop import sample_responses
from ppo_core.rollout.shared_prompts import MEMO_ENTRIES, PromptMemo, can_share, distinct_rows, shared_response_logits
from tools import tiny_models

# Two prompts asked twice and one once, of different lengths, so left padding differs between rows.
PROMPTS = ["hello there", "hello there", "a", "the quick brown fox jumps", "a"]


@pytest.fixture(scope="module", params=sorted(WRITERS))
def model_and_tokenizer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                        ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load_left_padded(request.param, tmp_path_factory.mktemp(request.param))


def batch(tokenizer: PreTrainedTokenizerBase, width: int = 4,
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The prompts, and responses of ``width`` tokens of which the second row's stop after two (padding after)."""
    encoded = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    generator = torch.Generator().manual_seed(0)
    responses = torch.randint(3, 40, (len(PROMPTS), width), generator=generator)
    response_mask = torch.ones_like(responses, dtype=torch.bool)
    response_mask[1, 2:] = False
    responses[1, 2:] = tokenizer.pad_token_id
    return encoded["input_ids"], encoded["attention_mask"], responses, response_mask


def test_distinct_rows_give_back_every_row() -> None:
    queries = torch.tensor([[0, 5, 6], [0, 5, 6], [1, 2, 3], [0, 5, 6], [7, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1]])
    first, inverse = distinct_rows(queries, mask)
    assert torch.equal(queries[first][inverse], queries) and torch.equal(mask[first][inverse], mask)
    # Rows 0 and 1 are one prompt; row 3 has the same ids as row 0 but attends to its first token: another prompt.
    assert len(first) == 4 and inverse[0] == inverse[1] and inverse[0] != inverse[3]
    assert first.tolist() == [0, 2, 3, 4] and inverse.tolist() == [0, 0, 1, 2, 3]  # in the rows' own order
    distinct = torch.tensor([[9, 9], [1, 1], [5, 5]])
    assert distinct_rows(distinct, torch.ones_like(distinct))[0].tolist() == [0, 1, 2]


@pytest.mark.parametrize("width", [1, 4])
def test_shared_prompts_give_the_whole_forwards_logits(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase], width: int) -> None:
    model, tokenizer = model_and_tokenizer
    inputs = batch(tokenizer, width)
    with torch.no_grad():
        whole, shared = response_logits(model, *inputs), shared_response_logits(model, *inputs)
    mask = inputs[3]
    assert shared.shape == whole.shape
    # Padding after a stop is never scored; every scored position agrees to float rounding.
    torch.testing.assert_close(shared[mask], whole[mask], rtol=1e-4, atol=1e-4)


def test_a_memo_runs_prompts_that_come_again_once_and_keeps_them_unchanged(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    model, tokenizer = model_and_tokenizer
    queries, query_mask, responses, response_mask = batch(tokenizer)
    prompt_runs: list[int] = []
    # A prompt pass is the only forward over more than one position with an empty cache's worth of columns.
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: prompt_runs.append(1) if kwargs.get("logits_to_keep") is not None else None,
        with_kwargs=True)
    memo = PromptMemo()
    try:
        with torch.no_grad():
            first = shared_response_logits(model, queries, query_mask, responses, response_mask, memo)
            other = torch.flip(responses, dims=[1])
            again = shared_response_logits(model, queries, query_mask, other, response_mask, memo)
            repeat = shared_response_logits(model, queries, query_mask, responses, response_mask, memo)
    finally:
        hook.remove()
    assert len(prompt_runs) == 1
    torch.testing.assert_close(repeat, first, rtol=0, atol=0)  # what the second call appended did not stay
    with torch.no_grad():
        torch.testing.assert_close(again[response_mask], response_logits(model, queries, query_mask, other,
                                                                         response_mask)[response_mask],
                                   rtol=1e-4, atol=1e-4)


def test_a_memo_keeps_a_bounded_number_of_passes(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    model, tokenizer = model_and_tokenizer
    memo = PromptMemo()
    with torch.no_grad():
        for index in range(MEMO_ENTRIES + 3):
            encoded = tokenizer([f"prompt number {index}"], return_tensors="pt")
            memo.prompt_pass(model, encoded["input_ids"], encoded["attention_mask"])
    assert len(memo._passes) == MEMO_ENTRIES


def test_sampling_from_shared_prompts_follows_each_prompts_own_distribution(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    # Greedy at a tiny temperature: a prompt asked twice gets the same response both times, and the same one as
    # when it is asked alone (its prefill copied out, not mixed with another row's).
    model, tokenizer = model_and_tokenizer
    queries, query_mask, _, _ = batch(tokenizer)
    pad = int(tokenizer.pad_token_id)
    together, _ = sample_responses(model, queries, query_mask, 5, 1e-6, None, pad)
    assert torch.equal(together[0], together[1]) and torch.equal(together[2], together[4])
    alone = tokenizer(["the quick brown fox jumps"], return_tensors="pt")
    by_itself, _ = sample_responses(model, alone["input_ids"], alone["attention_mask"], 5, 1e-6, None, pad)
    assert torch.equal(together[3], by_itself[0])


def test_a_model_checkpointing_in_training_mode_scores_with_the_whole_forward(tmp_path: Path) -> None:
    path = tiny_models.write_llama(tmp_path / "model", seed=1)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked at every rollout: never through a deprecated name
        assert can_share(model.eval())
    model.gradient_checkpointing_enable()
    model.train()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not can_share(model)
    inputs = batch(tokenizer)
    with torch.no_grad():
        torch.testing.assert_close(scoring_logits(model, True, *inputs), response_logits(model, *inputs),
                                   rtol=0, atol=0)


def test_a_held_out_rollout_scores_as_an_updates_rollout(tiny_lm_dir: Path, prompts_file: Path) -> None:
    # The same draws give the same responses; the policy's and the reference's log-probabilities, shared or not,
    # agree to float rounding, and so do the KL and the scores an evaluation reads from them. Under LoRA the
    # reference is the policy with its adapter off, through the same memo twice.
    trainer = PPOTrainer(PPOConfig(
        task=None, sft_model_path=str(tiny_lm_dir), dataset_name=str(prompts_file),
        reward_model_path="reward_functions:count_letter_a", response_length=6, per_device_train_batch_size=4,
        total_episodes=8, num_eval_prompts=3, num_eval_samples=2, use_peft=True, lora_r=4, seed=5))
    batch = trainer.setup.eval_prompts.select([0, 0, 1, 1, 2, 2])
    memo = PromptMemo()
    device = torch.device("cpu")
    rollouts = []
    for for_update, reference_memo in ((True, None), (False, memo), (False, memo)):
        torch.manual_seed(3)
        rollouts.append(collect_rollout(trainer.setup, batch, trainer.config, device, None, for_update=for_update,
                                        reference_memo=reference_memo))
    whole, *held_out = rollouts
    for shared in held_out:
        assert torch.equal(shared.responses, whole.responses) and torch.equal(shared.scores, whole.scores)
        mask = whole.response_mask
        torch.testing.assert_close(shared.logprobs[mask], whole.logprobs[mask], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(shared.ref_logprobs[mask], whole.ref_logprobs[mask], rtol=1e-4, atol=1e-4)
        # A new adapter leaves the policy equal to its reference: the two shared scorings agree to the last bit.
        assert torch.equal(shared.logprobs, shared.ref_logprobs)
    assert torch.equal(whole.logprobs, whole.ref_logprobs)
    assert len(memo._passes) == 1
