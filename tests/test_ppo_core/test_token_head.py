"""The update's log-probs and entropy (ppo_core.algorithm.token_head): the log-partition head, the one compiled on a GPU
under ``fused_logits_head``, equals the float32 log-softmax reference, values and gradients, and both equal a slow
per-token reference; on a CPU the switch changes nothing."""

from __future__ import annotations

import math

import pytest
import torch

from ppo_core.algorithm.token_head import log_softmax_head, logsumexp_head, select_head


def _inputs(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    logits = (torch.randn(3, 5, 37, generator=generator) * 4).to(dtype)
    tokens = torch.randint(0, 37, (3, 5), generator=generator)
    return logits, tokens


def _slow(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> tuple[list[float], list[float]]:
    """log pi(y) and -sum p log p, one token at a time in Python floats."""
    logprobs, entropies = [], []
    for row, token in zip(logits.double().reshape(-1, logits.shape[-1]).tolist(), tokens.reshape(-1).tolist(),
                          strict=True):
        scaled = [z / temperature for z in row]
        top = max(scaled)
        partition = top + math.log(sum(math.exp(s - top) for s in scaled))
        logprobs.append(scaled[token] - partition)
        entropies.append(-sum(math.exp(s - partition) * (s - partition) for s in scaled))
    return logprobs, entropies


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
def test_both_heads_equal_the_slow_reference(temperature: float) -> None:
    logits, tokens = _inputs()
    expected_logprobs, expected_entropy = _slow(logits, tokens, temperature)
    for head in (log_softmax_head, logsumexp_head):
        logprobs, entropy = head(logits, tokens, temperature, False)
        assert logprobs.reshape(-1).tolist() == pytest.approx(expected_logprobs, abs=1e-5), head.__name__
        assert entropy.reshape(-1).tolist() == pytest.approx(expected_entropy, abs=1e-5), head.__name__


@pytest.mark.parametrize("entropy_grad", [False, True])
def test_the_log_partition_head_has_the_references_gradient(entropy_grad: bool) -> None:
    logits, tokens = _inputs(seed=1)
    weights = torch.randn(3, 5, generator=torch.Generator().manual_seed(2))
    gradients = []
    for head in (log_softmax_head, logsumexp_head):
        leaf = logits.clone().requires_grad_(True)
        logprobs, entropy = head(leaf, tokens, 0.7, entropy_grad)
        assert entropy.requires_grad == entropy_grad  # a diagnostic stays out of the graph
        loss = (weights * logprobs).sum() + ((0.01 * entropy).sum() if entropy_grad else 0)
        loss.backward()
        assert leaf.grad is not None
        gradients.append(leaf.grad)
    torch.testing.assert_close(gradients[1], gradients[0], rtol=0, atol=1e-6)


def test_bf16_logits_give_the_same_numbers_through_either_head() -> None:
    logits, tokens = _inputs(torch.bfloat16, seed=3)
    reference = log_softmax_head(logits, tokens, 0.7, False)
    fused = logsumexp_head(logits, tokens, 0.7, False)
    for ours, theirs in zip(fused, reference, strict=True):
        assert ours.dtype == torch.float32  # every reduction in float32, whatever the logits' dtype
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_the_switch_compiles_only_on_a_cuda_device() -> None:
    assert select_head(False, torch.device("cpu")) is log_softmax_head
    assert select_head(True, torch.device("cpu")) is log_softmax_head  # nothing to gain on a CPU
    assert select_head(False, torch.device("cuda")) is log_softmax_head
    compiled = select_head(True, torch.device("cuda"))  # built, not run: compiling needs no GPU until called
    assert compiled is not log_softmax_head and compiled is select_head(True, torch.device("cuda"))


@pytest.mark.cuda
def test_the_compiled_head_equals_the_reference_on_a_gpu() -> None:
    logits, tokens = _inputs(torch.bfloat16, seed=4)
    logits, tokens = logits.cuda(), tokens.cuda()
    reference = log_softmax_head(logits, tokens, 0.7, False)
    for width in (5, 3):  # a second width: the dynamic graph serves it without recompiling
        compiled = select_head(True, logits.device)(logits[:, :width], tokens[:, :width], 0.7, False)
        for ours, theirs in zip(compiled, reference, strict=True):
            torch.testing.assert_close(ours, theirs[:, :width], rtol=0, atol=1e-4)
