"""ppo_core.rollout.decode_choice: with ``fused_decode`` left open, the CPU sampling copy decodes fused only where a
check on this machine finds it clearly faster; the check times both real paths, is cached per machine and shapes, and
leaves torch's random state alone; a model the decoder cannot run, or one too small to time, is never checked."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedModel

from ppo_core import PPOConfig
from ppo_core.models.sampling_precision import MIN_CHECKED_WEIGHTS, weight_shapes
from ppo_core.rollout.decode_choice import choose_fused, measured_fused_decode
from ppo_core.rollout.fused_decode import decoder_of
from ppo_core.rollout.sampling_copy import SamplingCopy, sampling_copy
from tools import tiny_models

CPU = torch.device("cpu")


def _checked_llama() -> PreTrainedModel:
    """A randomly initialised Llama just past the check's size floor (about 1.8M matrix weights)."""
    config = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model: PreTrainedModel = AutoModelForCausalLM.from_config(config)
    assert sum(out * inner for out, inner in weight_shapes(model)) >= MIN_CHECKED_WEIGHTS
    return model.eval().requires_grad_(False)


def _builder(policy: PreTrainedModel, built: list[bool]) -> Callable[[bool], PreTrainedModel]:
    def build(fused: bool) -> PreTrainedModel:
        built.append(fused)
        return SamplingCopy(policy, torch.bfloat16, 8, fused, frozen=True).model
    return build


@pytest.mark.parametrize(("fused", "forward", "chosen"), [
    (0.080, 0.100, True),  # the decoder 1.25x faster, as on SmolLM2 in bf16
    (0.500, 0.550, True),  # exactly the margin
    (0.100, 0.105, False),  # faster, but inside the margin: the model's own forward keeps a tie
    (0.120, 0.100, False),  # slower
])
def test_the_fused_decoder_is_chosen_only_when_clearly_faster(fused: float, forward: float, chosen: bool) -> None:
    assert choose_fused({"fused": fused, "forward": forward}) is chosen


def test_the_check_times_both_paths_once_per_machine_and_leaves_the_random_state_alone(tmp_path: Path) -> None:
    policy, built = _checked_llama(), list[bool]()
    state = torch.get_rng_state()
    choice = measured_fused_decode(policy, torch.bfloat16, 8, _builder(policy, built),
                                   cache_dir=tmp_path)
    assert torch.equal(torch.get_rng_state(), state)  # a cached answer and a fresh check sample the same tokens
    assert built == [True, False]
    assert set(choice.seconds) == {"fused", "forward"} and all(s > 0 for s in choice.seconds.values())
    assert choice.fused == choose_fused(choice.seconds)
    [cached] = (tmp_path / "decode_choice").glob("*.json")
    record = json.loads(cached.read_text())
    assert record["key"]["dtype"] == "torch.bfloat16" and record["key"]["rows"] == 8
    # Read back, not measured again: the file's answer (flipped here) is what the next trial gets.
    cached.write_text(json.dumps({**record, "fused": not choice.fused}))
    again = measured_fused_decode(policy, torch.bfloat16, 8, _builder(policy, built),
                                  cache_dir=tmp_path)
    assert again.fused is not choice.fused and built == [True, False]
    # Another dtype or row count is another check.
    measured_fused_decode(policy, torch.float32, 8, _builder(policy, built), cache_dir=tmp_path)
    assert built == [True, False, True, False] and len(list((tmp_path / "decode_choice").glob("*.json"))) == 2


def test_models_the_decoder_cannot_run_or_too_small_to_time_are_not_checked(tmp_path: Path) -> None:
    built: list[bool] = []
    gpt2 = AutoModelForCausalLM.from_pretrained(tiny_models.write_gpt2(tmp_path / "gpt2", seed=1))
    llama = AutoModelForCausalLM.from_pretrained(tiny_models.write_llama(tmp_path / "llama", seed=1))
    assert measured_fused_decode(gpt2, torch.bfloat16, 8, _builder(gpt2, built),
                                 cache_dir=tmp_path / "cache").fused is False
    tiny = measured_fused_decode(llama, torch.bfloat16, 8, _builder(llama, built),
                                 cache_dir=tmp_path / "cache")
    assert tiny.fused is True and tiny.seconds == {}  # as every run decoded before the check existed
    assert built == [] and not (tmp_path / "cache").exists()


def test_a_config_that_leaves_it_open_decodes_as_the_machines_check_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PPO_TUNE_CACHE", str(tmp_path))
    policy = _checked_llama()
    open_config = PPOConfig(sampling_dtype="bfloat16")
    assert open_config.fused_decode is None
    first = sampling_copy(open_config, policy, CPU)
    [cached] = (tmp_path / "decode_choice").glob("*.json")
    decided = json.loads(cached.read_text())["fused"]
    assert first is not None and (first.decoder is not None) is decided
    cached.write_text(json.dumps({**json.loads(cached.read_text()), "fused": not decided}))
    second = sampling_copy(open_config, policy, CPU)
    assert second is not None and (second.decoder is not None) is (not decided)
    assert (decoder_of(second.model) is not None) is (not decided)
    # A value the user set is kept, and no check is asked for.
    for setting in (True, False):
        chosen = sampling_copy(PPOConfig(sampling_dtype="bfloat16", fused_decode=setting), policy, CPU)
        assert chosen is not None and (chosen.decoder is not None) is setting
    assert len(list((tmp_path / "decode_choice").glob("*.json"))) == 1
