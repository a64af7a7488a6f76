"""``bf16_generation_copy`` (ppo_core.rollout.generation_copy): the rollout's bf16 sampling copy equals the master
weights cast to bf16 after an optimizer step, refreshes only what is trained, and exists only on a CUDA device."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
import torch
from helpers.tiny_runs import letter_run
from transformers import AutoModelForCausalLM, PreTrainedModel

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.rollout.generation_copy import GenerationCopy, generation_copy
from tools import tiny_models


@pytest.fixture
def policy(tmp_path: Path) -> PreTrainedModel:
    model = AutoModelForCausalLM.from_pretrained(tiny_models.write_llama(tmp_path / "llama", seed=2))
    return model.float()


def _pairs(mirror: GenerationCopy, policy: PreTrainedModel) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(zip(mirror.model.parameters(), policy.parameters(), strict=True))


def test_the_copy_equals_the_master_weights_cast_to_bf16_after_a_step(policy: PreTrainedModel) -> None:
    mirror = GenerationCopy(policy)
    assert not mirror.model.training and not any(p.requires_grad for p in mirror.model.parameters())
    for mine, master in _pairs(mirror, policy):
        assert mine.dtype == torch.bfloat16 and torch.equal(mine, master.detach().to(torch.bfloat16))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    ids = torch.randint(0, policy.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(0))
    policy(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    stale = sum(not torch.equal(mine, master.detach().to(torch.bfloat16)) for mine, master in _pairs(mirror, policy))
    assert stale > 0  # the step moved weights the copy has not seen yet
    mirror.refresh()
    for mine, master in _pairs(mirror, policy):
        assert torch.equal(mine, master.detach().to(torch.bfloat16))


def test_only_trained_weights_are_refreshed(policy: PreTrainedModel) -> None:
    # torch types a submodule's attribute it does not declare (an Embedding's weight here) as Tensor | Module.
    embeddings = cast(torch.Tensor, policy.get_input_embeddings().weight)
    embeddings.requires_grad_(False)  # frozen, as a LoRA's base is
    norm = policy.model.norm.weight
    mirror = GenerationCopy(policy)
    with torch.no_grad():
        embeddings.add_(1.0)  # a frozen weight never changes in training; the refresh does not spend time on it
        norm.add_(1.0)
    mirror.refresh()
    copied = dict(zip((name for name, _ in policy.named_parameters()), mirror.model.parameters(), strict=True))
    assert not torch.equal(copied["model.embed_tokens.weight"], embeddings.to(torch.bfloat16))
    assert torch.equal(copied["model.norm.weight"], norm.detach().to(torch.bfloat16))


def test_the_copy_exists_only_when_asked_for_on_a_cuda_device(policy: PreTrainedModel) -> None:
    on, off = PPOConfig(bf16_generation_copy=True), PPOConfig()
    assert generation_copy(on, policy, torch.device("cpu")) is None
    assert generation_copy(off, policy, torch.device("cuda")) is None
    assert isinstance(generation_copy(on, policy, torch.device("cuda")), GenerationCopy)


@pytest.mark.cuda
def test_a_run_sampling_from_the_copy_starts_at_zero_kl_on_a_gpu(tmp_path: Path) -> None:
    values = letter_run(tmp_path, 32, response_length=6, per_device_train_batch_size=8, total_episodes=32,
                        bf16_generation_copy=True)
    trainer = PPOTrainer(PPOConfig(**values))
    assert trainer.generation_copy is not None
    metrics = trainer.train().metrics
    # The copy only samples; the log-probs come from the policy's own scoring forward, as the reference's do.
    assert metrics[0]["objective/kl"] == pytest.approx(0.0, abs=1e-6)
    for mine, master in zip(trainer.generation_copy.model.parameters(), trainer.setup.models.policy.parameters(),
                            strict=True):
        assert torch.equal(mine, master.detach().to(torch.bfloat16))
