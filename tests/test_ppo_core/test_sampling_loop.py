"""ppo_core.rollout.sampling_loop, the CPU rollout's decode loop: each draw follows softmax(z / T); the loop feeds a
model what HF ``generate`` feeds it, for every architecture; a stop token ends the responses as ``generate`` ends them;
and the sampled tokens' log-probabilities under the sampling path equal the scoring forward's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers.tiny_architectures import WRITERS, load_left_padded
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ppo_core.models.generation import generate, sampling_config
from ppo_core.models.sequences import token_logprobs
from ppo_core.rollout import sampling_loop
from ppo_core.rollout.collect import response_logits
from ppo_core.rollout.sampling_loop import draw, sample_beside, sample_responses

PROMPTS = ["hello there", "a", "the quick brown fox jumps"]


@pytest.fixture(scope="module", params=sorted(WRITERS))
def model_and_tokenizer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                        ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load_left_padded(request.param, tmp_path_factory.mktemp(request.param))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_draws_follow_the_softmax_at_the_temperature(temperature: float) -> None:
    logits = torch.tensor([2.0, 0.0, -1.0, 1.5, float("-inf"), -3.0])
    rows = 200_000
    torch.manual_seed(0)
    drawn = draw(logits.expand(rows, -1), temperature)
    frequencies = torch.bincount(drawn, minlength=len(logits)).double() / rows
    expected = torch.softmax(logits.double() / temperature, dim=-1)
    # Within 5 binomial standard deviations of each token's probability; a -inf logit is never drawn.
    tolerance = 5 * torch.sqrt(expected * (1 - expected) / rows) + 1e-12
    assert bool(((frequencies - expected).abs() <= tolerance).all()), (frequencies, expected)
    assert int((drawn == 4).sum()) == 0


@pytest.mark.parametrize("block", [2, 4, 256])
def test_draws_follow_the_softmax_whatever_the_block(block: int) -> None:
    # 6 entries in blocks of 2 (three full blocks), of 4 (the second padded) and of 256 (one padded block).
    logits = torch.tensor([2.0, 0.0, -1.0, 1.5, float("-inf"), -3.0])
    rows = 200_000
    torch.manual_seed(1)
    drawn = draw(logits.expand(rows, -1), 1.0, block)
    frequencies = torch.bincount(drawn, minlength=len(logits)).double() / rows
    expected = torch.softmax(logits.double(), dim=-1)
    tolerance = 5 * torch.sqrt(expected * (1 - expected) / rows) + 1e-12
    assert bool(((frequencies - expected).abs() <= tolerance).all()), (frequencies, expected)
    assert int((drawn == 4).sum()) == 0


def _one_level_draw(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The slow reference: y = min{i : c_i > u c_V} over the whole vocabulary's cumulative sum, one u a row."""
    weights = torch.softmax(logits.double() / temperature, dim=-1)
    cumulative = weights.cumsum(dim=-1)
    threshold = torch.rand((logits.shape[0], 1), dtype=torch.float64) * cumulative[:, -1:]
    return torch.searchsorted(cumulative, threshold, right=True).squeeze(1).clamp_max(logits.shape[-1] - 1)


@pytest.mark.parametrize(("vocab", "block", "dtype"), [(1000, 16, torch.float32), (999, 64, torch.bfloat16),
                                                        (49_152, 256, torch.bfloat16)])
def test_two_levels_draw_the_token_one_level_draws_for_the_same_uniform(vocab: int, block: int,
                                                                       dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(vocab)
    logits = (3 * torch.randn(64, vocab, generator=generator)).to(dtype)
    logits[:, ::7] = float("-inf")
    for temperature in (0.7, 1.0):
        torch.manual_seed(2)
        fast = draw(logits, temperature, block)
        torch.manual_seed(2)
        slow = _one_level_draw(logits, temperature)
        assert torch.equal(fast, slow)
        assert not bool((fast % 7 == 0).any())


def _greedy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return logits.argmax(dim=-1)


def test_the_loop_feeds_the_model_what_generate_feeds_it(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With the draw made greedy on both sides, equal tokens mean equal logits at every step: the same cache, masks
    # and positions for left-padded prompts of different lengths.
    model, tokenizer = model_and_tokenizer
    encoded = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    monkeypatch.setattr(sampling_loop, "draw", _greedy)
    ours, mask = sample_responses(model, encoded["input_ids"], encoded["attention_mask"], 7, 1.0, None,
                                  tokenizer.pad_token_id)
    with torch.no_grad():
        theirs = model.generate(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"],  # type: ignore[operator]
                                do_sample=False, max_new_tokens=7, min_new_tokens=7,
                                pad_token_id=tokenizer.pad_token_id)
    assert ours.shape == (len(PROMPTS), 7) and bool(mask.all())
    assert torch.equal(ours, theirs[:, encoded["input_ids"].shape[1]:])


def test_a_stop_token_ends_the_responses_as_generate_ends_them(eos_loving_lm_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(eos_loving_lm_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(eos_loving_lm_dir, padding_side="left")
    encoded = tokenizer(["a b", "c"], return_tensors="pt", padding=True)
    eos = tokenizer.eos_token_id
    torch.manual_seed(0)
    responses, mask = sample_responses(model, encoded["input_ids"], encoded["attention_mask"], 6, 1.0, eos,
                                       tokenizer.pad_token_id)
    torch.manual_seed(0)
    expected, expected_mask = generate(model, encoded["input_ids"], encoded["attention_mask"],
                                       sampling_config(6, 1.0, tokenizer, eos), eos, tokenizer.pad_token_id)
    # Every row stops at once here (EOS takes almost all the mass), so both stop after one token.
    assert responses.shape == expected.shape == (2, 1)
    assert torch.equal(responses, expected) and torch.equal(mask, expected_mask)


def _recording_draw(seen: list[torch.Tensor]) -> Callable[[torch.Tensor, float], torch.Tensor]:
    def recording(logits: torch.Tensor, temperature: float) -> torch.Tensor:
        seen.append(logits.float().clone())
        return draw(logits, temperature)
    return recording


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-4), (torch.bfloat16, 0.1)])
def test_sampled_tokens_logprobs_equal_the_scoring_forwards(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase], monkeypatch: pytest.MonkeyPatch,
        dtype: torch.dtype, tolerance: float) -> None:
    # The loop's cached logits describe the distribution each token was drawn from; the rollout's log-probs come
    # from the policy's full scoring forward. They agree to float32 rounding, and to bf16's from a bf16 copy.
    model, tokenizer = model_and_tokenizer
    sampler = AutoModelForCausalLM.from_pretrained(str(model.name_or_path), dtype=dtype).eval()
    encoded = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    seen: list[torch.Tensor] = []
    monkeypatch.setattr(sampling_loop, "draw", _recording_draw(seen))
    torch.manual_seed(3)
    responses, mask = sample_responses(sampler, encoded["input_ids"], encoded["attention_mask"], 6, 0.7, None,
                                       tokenizer.pad_token_id)
    sampled = token_logprobs(torch.stack(seen, dim=1), responses, 0.7)
    with torch.no_grad():
        scored = token_logprobs(response_logits(model, encoded["input_ids"], encoded["attention_mask"], responses,
                                                mask), responses, 0.7)
    assert float((sampled - scored).abs().max()) < tolerance


def _perturbed(model: PreTrainedModel, scale: float) -> PreTrainedModel:
    """A copy of ``model`` with every weight moved by ``scale`` x N(0, 1): another policy of the same shapes."""
    other = AutoModelForCausalLM.from_pretrained(str(model.name_or_path)).eval()
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
    return other


def test_a_reference_stepped_beside_reads_each_tokens_logprobs_as_the_scoring_forwards(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    # sample_beside draws what sample_responses draws from the same seed (the reference draws nothing), and reads
    # each token's log-probability under the sampler and under the reference: the scoring forwards' to float32
    # rounding, and 0 after a stop token.
    model, tokenizer = model_and_tokenizer
    reference = _perturbed(model, 0.02)
    encoded = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    queries, query_mask = encoded["input_ids"], encoded["attention_mask"]
    torch.manual_seed(4)
    unstopped, _ = sample_responses(model, queries, query_mask, 8, 0.7, None, tokenizer.pad_token_id)
    stop = int(unstopped[0, 2])  # the same draws stop the first row at its third token, or sooner
    torch.manual_seed(4)
    alone, alone_mask = sample_responses(model, queries, query_mask, 8, 0.7, stop, tokenizer.pad_token_id)
    assert not bool(alone_mask[0].all())
    torch.manual_seed(4)
    stepped = sample_beside(model, reference, queries, query_mask, 8, 0.7, stop, tokenizer.pad_token_id)
    assert torch.equal(stepped.responses, alone) and torch.equal(stepped.response_mask, alone_mask)
    with torch.no_grad():
        for side, logprobs in ((model, stepped.logprobs), (reference, stepped.reference_logprobs)):
            scored = token_logprobs(response_logits(side, queries, query_mask, alone, alone_mask), alone, 0.7)
            torch.testing.assert_close(logprobs, scored.masked_fill(~alone_mask, 0.0), atol=1e-4, rtol=0)
    assert bool((stepped.logprobs - stepped.reference_logprobs).abs().amax() > 1e-3)  # the two models differ


def test_a_model_stepped_beside_itself_reads_kl_zero_exactly(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    # Two copies computed alike give the same logits at every step, to the last bit: what lets an evaluation at
    # learning rate 0 read KL 0 from the decode steps.
    model, tokenizer = model_and_tokenizer
    twin = _perturbed(model, 0.0)
    encoded = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    torch.manual_seed(5)
    stepped = sample_beside(model, twin, encoded["input_ids"], encoded["attention_mask"], 6, 1.0, None,
                            tokenizer.pad_token_id)
    assert torch.equal(stepped.logprobs, stepped.reference_logprobs)
    assert bool((stepped.logprobs < 0).all())
