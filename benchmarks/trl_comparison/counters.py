"""Counting the work a trainer does: forward and backward passes, tokens, generated tokens, optimizer steps.

Hooks cost time, so these counts come from a separate, untimed run of each side.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn


def _input_tokens(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Token positions a transformers forward processes: the numel of input_ids (or of inputs_embeds' rows)."""
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    if isinstance(input_ids, torch.Tensor):
        return input_ids.numel()
    embeds = kwargs.get("inputs_embeds")
    return embeds.shape[0] * embeds.shape[1] if isinstance(embeds, torch.Tensor) else 0


def _first_tensor(output: Any) -> torch.Tensor | None:
    """The output a backward pass flows through: logits for a causal LM, last_hidden_state for a trunk."""
    for name in ("logits", "last_hidden_state"):
        value = getattr(output, name, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


class WorkCounter:
    """Per-network counts of forward calls and tokens (split by grad mode), backward passes and optimizer steps."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._handles: list[Any] = []
        self._restore: list[Callable[[], None]] = []

    def watch_module(self, name: str, module: nn.Module) -> None:
        counts = self.counts[name]

        def on_forward(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            tokens = _input_tokens(args, kwargs)
            mode = "grad" if torch.is_grad_enabled() else "no_grad"
            counts[f"forward_calls_{mode}"] += 1
            counts[f"forward_tokens_{mode}"] += tokens
            tensor = _first_tensor(output)
            if tensor is not None and tensor.requires_grad:
                # Fires once per backward pass that reaches this output.
                def on_backward(grad: torch.Tensor) -> None:
                    counts["backward_calls"] += 1
                    counts["backward_tokens"] += tokens

                tensor.register_hook(on_backward)

        self._handles.append(module.register_forward_hook(on_forward, with_kwargs=True))

    def watch_generate(self, name: str, model: nn.Module) -> None:
        """Count rows and new tokens of every ``generate`` call (patched on the instance only)."""
        counts = self.counts[name]
        # GenerationMixin.generate, typed Tensor | Module through nn.Module.__getattr__.
        original = cast(Callable[..., Any], model.generate)

        def generate(*args: Any, **kwargs: Any) -> Any:
            output = original(*args, **kwargs)
            input_ids = kwargs.get("input_ids", args[0] if args else None)
            sequences = output.sequences if hasattr(output, "sequences") else output
            counts["generate_calls"] += 1
            assert input_ids is not None, "generate is called with input_ids"
            counts["generated_tokens"] += sequences.shape[0] * (sequences.shape[1] - input_ids.shape[1])
            return output

        # nn.Module.__getattr__/__setattr__ type the attribute Tensor | Module; a plain function is stored here.
        model.generate = generate  # type: ignore[assignment]

    def watch_sampling(self, name: str, namespace: Any, attribute: str) -> None:
        """Count the calls and new tokens of a function that samples ``(responses, response_mask)`` for a chunk of
        prompts, looked up as ``namespace.attribute`` (ppo_core's CPU rollout decodes without ``generate``); put back
        by :meth:`remove`."""
        counts = self.counts[name]
        original = getattr(namespace, attribute)

        def sample(*args: Any, **kwargs: Any) -> Any:
            responses, response_mask = original(*args, **kwargs)
            counts["generate_calls"] += 1
            counts["generated_tokens"] += responses.shape[0] * responses.shape[1]
            return responses, response_mask

        setattr(namespace, attribute, sample)
        self._restore.append(lambda: setattr(namespace, attribute, original))

    def watch_optimizer(self, name: str, optimizer: torch.optim.Optimizer) -> None:
        """Count real steps of a torch optimizer (pass the inner one, not accelerate's wrapper)."""
        counts = self.counts[name]
        original = optimizer.step

        def step(*args: Any, **kwargs: Any) -> Any:
            counts["optimizer_steps"] += 1
            counts["parameters_stepped"] += sum(
                p.numel() for group in optimizer.param_groups for p in group["params"] if p.grad is not None
            )
            return original(*args, **kwargs)

        optimizer.step = step  # type: ignore[method-assign]

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {name: dict(values) for name, values in self.counts.items()}

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for restore in self._restore:
            restore()
        self._restore.clear()


def inner_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """accelerate's AcceleratedOptimizer skips the inner step while accumulating; count the inner one."""
    return getattr(optimizer, "optimizer", optimizer)
