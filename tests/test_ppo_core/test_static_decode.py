"""``static_decode`` (ppo_core.rollout.static_decode): the static-cache decode loop, run eagerly on the CPU, draws the
same tokens as HF ``generate`` for every architecture, from prompts padded to a width bucket; on a GPU its compiled step
gives the eager samples and compiles once."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from helpers.tiny_architectures import WRITERS, load_left_padded
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ppo_core.models.generation import generate, sampling_config
from ppo_core.rollout.static_decode import bucket_width, left_pad, reset_cache, static_generate

PROMPTS = ["hello there", "a", "the quick brown fox jumps"]


@pytest.fixture(scope="module", params=sorted(WRITERS))
def model_and_tokenizer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                        ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load_left_padded(request.param, tmp_path_factory.mktemp(request.param))


def _both(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, length: int, temperature: float,
          stop: int | None, seed: int = 5) -> tuple[Any, Any]:
    encoded = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    torch.manual_seed(seed)
    theirs = generate(model, encoded["input_ids"], encoded["attention_mask"],
                      sampling_config(length, temperature, tokenizer, stop), stop, tokenizer.pad_token_id)
    torch.manual_seed(seed)
    ours = static_generate(model, encoded["input_ids"], encoded["attention_mask"], length, temperature, stop,
                           tokenizer.pad_token_id)
    return ours, theirs


def test_widths_round_up_to_the_bucket_and_pad_on_the_left() -> None:
    assert [bucket_width(w) for w in (1, 31, 32, 33)] == [32, 32, 32, 64]
    ids, mask = left_pad(torch.tensor([[7, 8], [0, 9]]), torch.tensor([[1, 1], [0, 1]]), 4, pad_token_id=0)
    assert ids.tolist() == [[0, 0, 7, 8], [0, 0, 0, 9]] and mask.tolist() == [[0, 0, 1, 1], [0, 0, 0, 1]]


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_the_static_loop_draws_generates_tokens(model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase],
                                                temperature: float) -> None:
    model, tokenizer = model_and_tokenizer
    (responses, mask), (expected, _) = _both(model, tokenizer, 9, temperature, stop=None)
    assert responses.shape == expected.shape == (len(PROMPTS), 9) and mask.all()
    assert torch.equal(responses, expected)


def test_a_stop_token_ends_the_response_as_generate_ends_it(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    model, tokenizer = model_and_tokenizer
    (free, _), _ = _both(model, tokenizer, 12, 1.0, stop=None, seed=11)
    stop = int(free[0, 3])  # a token the first row samples at its fourth step
    (responses, mask), (expected, expected_mask) = _both(model, tokenizer, 12, 1.0, stop=stop, seed=11)
    # generate stops once every row has stopped: its output may be narrower; past that, ours is all padding.
    width = expected.shape[1]
    assert torch.equal(responses[:, :width], expected) and torch.equal(mask[:, :width], expected_mask)
    assert not mask[:, width:].any() and int(mask[0].sum()) <= 4


def test_the_cache_is_kept_per_shape_and_emptied_between_rollouts(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    model, tokenizer = model_and_tokenizer
    assert reset_cache(model, 3, 41) is reset_cache(model, 3, 41)
    assert reset_cache(model, 3, 41) is not reset_cache(model, 2, 41)
    first, _ = _both(model, tokenizer, 9, 1.0, stop=None, seed=2)
    again, _ = _both(model, tokenizer, 9, 1.0, stop=None, seed=2)  # the same cache, reused: the same draws
    assert torch.equal(first[0], again[0])


@pytest.mark.cuda
def test_the_compiled_loop_gives_the_eager_samples_on_a_gpu(
        model_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    model, tokenizer = model_and_tokenizer
    # transformers wraps cuda() with functools.wraps, whose typed wrapper mypy does not bind to the instance.
    model = model.cuda()  # type: ignore[call-arg]
    encoded = tokenizer(PROMPTS, return_tensors="pt", padding=True).to("cuda")
    runs = []
    for compiled in (False, True, True):  # the second compiled run replays what the first captured
        runs.append(static_generate(model, encoded["input_ids"], encoded["attention_mask"], 9, 1e-4, None,
                                    tokenizer.pad_token_id, compiled=compiled)[0])
    assert torch.equal(runs[1], runs[0]) and torch.equal(runs[2], runs[0])  # temperature -> 0: the argmax path
