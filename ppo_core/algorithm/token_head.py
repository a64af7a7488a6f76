"""The update's log-probabilities and entropy of the sampled tokens, from the policy's logits.

Two ways to the same numbers. :func:`log_softmax_head` is the reference, and the path every run takes by default: a
float32 log-softmax over the whole vocabulary, gathered at the sampled tokens, its exponential giving the entropy.
At a real vocabulary (152k for Qwen2) that float32 ``[b, T, V]`` tensor, and the passes over it, cost about as much as
the policy's own matmuls. :func:`logsumexp_head` computes the same two quantities through the log-partition function
alone, reading the logits in their own dtype and upcasting inside each reduction; compiled (``fused_logits_head`` on a
CUDA device: :func:`select_head`), the upcast and the reductions fuse into kernels that never write a float32
``[b, T, V]`` tensor. Run eagerly it is the same math and is tested against the reference on the CPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ppo_core.algorithm.losses import entropy_from_log_probs

Head = Callable[[torch.Tensor, torch.Tensor, float, bool], tuple[torch.Tensor, torch.Tensor]]


def log_softmax_head(logits: torch.Tensor, tokens: torch.Tensor, temperature: float,
                     entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(y_t), H_t) with log pi = log_softmax(z_t / T) in float32: log pi(y_t) gathered at the sampled token,
    H_t = -sum_v pi_tv log pi_tv. The entropy joins the graph only when ``entropy_grad`` (an entropy bonus)."""
    log_distribution = torch.log_softmax(logits.float() / temperature, dim=-1)
    logprobs = torch.gather(log_distribution, -1, tokens.unsqueeze(-1)).squeeze(-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = entropy_from_log_probs(log_distribution)
    return logprobs, entropy


def logsumexp_head(logits: torch.Tensor, tokens: torch.Tensor, temperature: float,
                   entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(y_t), H_t) through the log-partition L_t = logsumexp_v s_tv of s_t = z_t / T:
    log pi(y_t) = s_{t,y_t} - L_t and H_t = -sum_v exp(s_tv - L_t) (s_tv - L_t), each reduction in float32 over
    logits read in their own dtype. (Not L_t - sum_v pi_tv s_tv: for a peaked distribution both terms are near
    max s and their float32 difference loses the entropy's digits.) The entropy joins the graph only when
    ``entropy_grad``."""
    scaled = logits.float() / temperature
    partition = torch.logsumexp(scaled, dim=-1)
    chosen = torch.gather(scaled, -1, tokens.unsqueeze(-1)).squeeze(-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        shifted = scaled - partition.unsqueeze(-1)
        if not entropy_grad:
            shifted = shifted.detach()
        entropy = -(torch.exp(shifted) * shifted).sum(dim=-1)
    return chosen - partition, entropy


@functools.cache
def _compiled_head() -> Head:
    # dynamic: the response width and the micro-batch's rows vary between micro-batches; one graph serves them all.
    return torch.compile(logsumexp_head, dynamic=True)


def select_head(fused: bool, device: torch.device) -> Head:
    """The compiled :func:`logsumexp_head` when ``fused`` (the ``fused_logits_head`` switch) on a CUDA device; the
    reference :func:`log_softmax_head` otherwise (on a CPU the compiled kernels gain nothing and cost compile time)."""
    return _compiled_head() if fused and device.type == "cuda" else log_softmax_head


__all__ = ["log_softmax_head", "logsumexp_head", "select_head"]
