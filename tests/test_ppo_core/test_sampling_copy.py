"""ppo_core.rollout.sampling_copy: the CPU rollout samples from the policy with its LoRA adapters merged, in the
sampling dtype. Its logits equal the unmerged policy's (to float32 rounding, or bf16's), it follows the policy after an
optimizer step once refreshed, only plain LoRA layers are merged, and a run sampling from a bf16 copy still takes its
log-probs from the policy's scoring forward."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from helpers.tiny_runs import letter_run
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import Linear as LoraLinear
from transformers import AutoModelForCausalLM, PreTrainedModel

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.models.packed_linear import PackedLinear, pack_linears
from ppo_core.rollout import collect
from ppo_core.rollout.sampling_copy import SamplingCopy, mergeable, sampling_copy
from tools import tiny_models

WRITERS: dict[str, Callable[..., Path]] = {"llama": tiny_models.write_llama, "gpt2": tiny_models.write_gpt2}
IDS = torch.tensor([[5, 9, 13, 2, 7, 30], [3, 3, 8, 21, 11, 4]])


def _lora(path: Path, **options: object) -> PreTrainedModel:
    base = AutoModelForCausalLM.from_pretrained(path).requires_grad_(False)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, **options)  # type: ignore[arg-type]
    return cast(PreTrainedModel, get_peft_model(base, config))  # forwards as the model it wraps


@pytest.fixture(params=["llama", "gpt2"])
def policy(request: pytest.FixtureRequest, tmp_path: Path) -> PreTrainedModel:
    return _lora(WRITERS[request.param](tmp_path / request.param, seed=2))


def _train_one_step(policy: PreTrainedModel) -> None:
    """One AdamW step on the adapters: lora_B starts at zero, so before it the merge adds nothing."""
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=0.05)
    policy(input_ids=IDS, labels=IDS).loss.backward()
    optimizer.step()


def _logits(model: PreTrainedModel) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits.float()


def test_the_merged_copy_computes_the_policy_and_follows_it_once_refreshed(policy: PreTrainedModel) -> None:
    mirror = SamplingCopy(policy, torch.float32, 8)
    assert not mirror.model.training and not any(p.requires_grad for p in mirror.model.parameters())
    assert not any("lora" in name for name, _ in mirror.model.named_parameters())  # one product per layer
    _train_one_step(policy)
    assert not torch.allclose(_logits(mirror.model), _logits(policy), atol=1e-4)  # stale until refreshed
    mirror.refresh()
    torch.testing.assert_close(_logits(mirror.model), _logits(policy), atol=1e-5, rtol=1e-5)


def test_a_bf16_copy_rounds_the_weights_once_and_keeps_buffers_float32(tmp_path: Path) -> None:
    policy = _lora(tiny_models.write_llama(tmp_path / "llama", seed=2))
    _train_one_step(policy)
    mirror = SamplingCopy(policy, torch.bfloat16, 8)
    assert all(p.dtype == torch.bfloat16 for p in mirror.model.parameters())
    # Rotary frequencies stay float32, as from_pretrained in bf16 keeps them: positions are not rounded.
    assert all(b.dtype == torch.float32 for b in mirror.model.buffers() if b.is_floating_point())
    name = "model.layers.0.self_attn.q_proj"
    layer = cast(LoraLinear, cast(PeftModel, policy).get_base_model().get_submodule(name))
    merged = (cast(torch.Tensor, layer.base_layer.weight) + layer.get_delta_weight("default")).to(torch.bfloat16)
    assert torch.equal(cast(torch.Tensor, mirror.model.get_submodule(name).weight), merged)
    torch.testing.assert_close(_logits(mirror.model), _logits(policy), atol=0.05, rtol=0.05)


def test_only_plain_lora_layers_are_merged(tmp_path: Path) -> None:
    path = tiny_models.write_llama(tmp_path / "llama", seed=2)
    assert mergeable(_lora(path)) and mergeable(AutoModelForCausalLM.from_pretrained(path))
    assert not mergeable(_lora(path, use_dora=True))
    assert not mergeable(_lora(path, modules_to_save=["lm_head"]))


def test_the_copy_is_made_on_a_cpu_where_it_differs_from_the_policy(tmp_path: Path) -> None:
    path = tiny_models.write_llama(tmp_path / "llama", seed=2)
    full = AutoModelForCausalLM.from_pretrained(path)
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    float32, bfloat16 = PPOConfig(sampling_dtype="float32"), PPOConfig(sampling_dtype="bfloat16")
    assert sampling_copy(float32, full, cpu) is None  # a float32 model with nothing to merge is its own copy
    assert isinstance(sampling_copy(bfloat16, full, cpu), SamplingCopy)
    assert isinstance(sampling_copy(float32, _lora(path), cpu), SamplingCopy)
    assert sampling_copy(bfloat16, _lora(path), gpu) is None  # a GPU keeps bf16_generation_copy's switch


@pytest.mark.parametrize("fused", [True, False])
def test_a_run_sampling_from_a_bf16_copy_scores_with_the_policy(tmp_path: Path, fused: bool) -> None:
    values = letter_run(tmp_path, 32, response_length=6, per_device_train_batch_size=8, total_episodes=32,
                        use_peft=True, lora_r=4, sampling_dtype="bfloat16", learning_rate=0.0, fused_decode=fused)
    trainer = PPOTrainer(PPOConfig(**values))
    assert trainer.sampling_copy is not None and trainer.sampling_copy.dtype == torch.bfloat16
    assert (trainer.sampling_copy.decoder is not None) == fused  # a tiny Llama: the decoder runs it where asked
    metrics = trainer.train().metrics
    # The copy only samples; log-probs come from the policy's scoring forward, as the reference's do, so at
    # learning rate 0 the ratio is 1 and KL to the reference 0, to float32 rounding.
    for update in metrics:
        assert update["precision/sampling_bf16"] == 1.0
        assert update["precision/sampling_fused"] == float(fused)
        assert update["objective/kl"] == pytest.approx(0.0, abs=1e-6)
        assert update["val/ratio"] == pytest.approx(1.0, abs=1e-6)


def _scoring_forwards(run: Callable[[], object]) -> int:
    """How many scoring forwards (``ppo_core.rollout.collect.scoring_logits``) ``run`` makes."""
    calls: list[int] = []
    scoring = collect.scoring_logits

    def counted(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return scoring(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collect, "scoring_logits", counted)
        run()
    return len(calls)


@pytest.mark.parametrize(("use_peft", "fused"), [(True, True), (True, False), (False, True)])
def test_an_evaluation_reading_the_decode_steps_finds_kl_zero_at_learning_rate_zero(tmp_path: Path, use_peft: bool,
                                                                                    fused: bool) -> None:
    # The reference copy is made as the sampling copy was (a LoRA policy's base, or the reference model, in bf16),
    # so while the policy equals its reference the two copies' steps agree to the last bit: eval/kl is 0 exactly.
    values = letter_run(tmp_path, 32, response_length=6, per_device_train_batch_size=8, total_episodes=16,
                        use_peft=use_peft, lora_r=4, sampling_dtype="bfloat16", learning_rate=0.0,
                        fused_decode=fused, eval_steps=1, num_eval_prompts=4, num_eval_samples=2)
    trainer = PPOTrainer(PPOConfig(**values))
    copy_ = trainer.reference_copy
    assert copy_ is not None and trainer.sampling_copy is not None
    assert (copy_.dtype, copy_.rows, copy_.decoder is not None) == \
        (torch.bfloat16, trainer.sampling_copy.rows, fused)
    assert not any(isinstance(module, LoraLinear) for module in copy_.model.modules())  # the base, not the adapter
    evaluated = [update for update in trainer.train().metrics if "eval/kl" in update]
    assert len(evaluated) == 2 and all(update["eval/kl"] == 0.0 for update in evaluated)
    # The log-probabilities came from the decode steps: an evaluation runs no scoring forward.
    assert _scoring_forwards(lambda: trainer.evaluate(7)) == 0


def test_an_evaluation_reading_the_decode_steps_reads_the_scoring_forwards_kl(tmp_path: Path) -> None:
    # A float32 copy's steps compute the policy's and the reference's forwards to float32 rounding: the same
    # responses, scores and KL as the two scoring forwards, after the policy has moved.
    runs = {}
    for switch in (True, False):
        values = letter_run(tmp_path / str(switch), 32, response_length=6, per_device_train_batch_size=8,
                            total_episodes=32, use_peft=True, lora_r=4, sampling_dtype="float32", learning_rate=0.05,
                            eval_steps=2, num_eval_prompts=4, num_eval_samples=2, eval_logprobs_from_sampling=switch)
        trainer = PPOTrainer(PPOConfig(**values))
        assert (trainer.reference_copy is not None) == switch
        runs[switch] = [update for update in trainer.train().metrics if "eval/kl" in update]
        assert (_scoring_forwards(functools.partial(trainer.evaluate, 7)) == 0) == switch  # off: two forwards
    on, off = runs[True], runs[False]
    assert [u["eval/score"] for u in on] == [u["eval/score"] for u in off]
    assert off[-1]["eval/kl"] > 0.01  # the policy moved
    assert [u["eval/kl"] for u in on] == pytest.approx([u["eval/kl"] for u in off], abs=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_layers_compute_what_the_plain_ones_do(tmp_path: Path, dtype: torch.dtype) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_models.write_llama(tmp_path / "llama", seed=2), dtype=dtype)
    model.eval().requires_grad_(False)
    plain = _logits(model)
    packed = pack_linears(model, rows=2)
    if not packed:
        pytest.skip(f"oneDNN cannot pack {dtype} weights on this CPU")
    assert isinstance(model.get_submodule("model.layers.0.mlp.down_proj"), PackedLinear)
    torch.testing.assert_close(_logits(model), plain, atol=1e-4 if dtype == torch.float32 else 0.05, rtol=1e-3)
    layer = packed[0]
    with torch.no_grad():
        layer.linear.weight.mul_(2.0)
    layer.repack()  # a changed weight reaches the packed copy only through repack
    inputs = torch.randn(3, layer.linear.in_features, dtype=dtype)
    torch.testing.assert_close(layer(inputs).float(), (inputs @ layer.linear.weight.T).float(), atol=0.05, rtol=0.02)
