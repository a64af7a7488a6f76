"""Reward functions in TRL GRPOTrainer's signature, so functions written for TRL work unchanged.

    def my_reward(prompts, completions, **kwargs) -> list[float | None]

``prompts`` are the dataset's prompts (text, or lists of {role, content} messages), ``completions`` the
policy's answers (text, or ``[{"role": "assistant", "content": ...}]`` for conversations), and ``kwargs`` the
dataset's other columns plus ``completion_ids`` and ``trainer_state``. None means "no score for this row".

``trainer_state`` is a ``transformers.TrainerState``, as TRL passes it, for rewards that change over a run (a
curriculum). Its ``max_steps`` is the run's number of PPO updates N, and its ``global_step`` the number of updates
completed when the episodes were sampled: u - 1 for update u's training rollout, u for the held-out evaluation (and
the sample recording) after update u, 0 for the evaluation at the start. TRL counts optimizer steps where ppo_core
counts updates, each a rollout and its epochs of optimizer steps; the share of the run done, ``global_step /
max_steps``, reads the same in both. A reward function and a judge function receive it alike::

    def warming_up(completions, trainer_state, **kwargs):
        weight = min(1.0, trainer_state.global_step / (0.2 * trainer_state.max_steps))
        return [weight * len(completion) for completion in completions]
"""

from __future__ import annotations

import importlib
import math
import numbers
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from ppo_core.config.ppo_config import ConfigError
from ppo_core.errors import InputError, first_line
from ppo_core.metric_names import reward_name
from ppo_core.rewards.base import RewardInputs, RewardScores

# Keyword arguments the trainer passes itself; dataset columns of these names are not passed again.
RESERVED = ("prompts", "completions", "completion_ids", "trainer_state")


class RewardFunctionError(InputError):
    """A reward function could not be imported, raised, or returned something other than one score per row."""


class FunctionReward:
    """``module:function``, called with TRL's keyword arguments; its output checked row by row."""

    def __init__(self, spec: str, field_name: str = "reward_funcs") -> None:
        module_name, _, function_name = spec.partition(":")
        # Reward modules live beside the user's config, as with TRL's scripts, which also search the working
        # directory; a console script's sys.path does not include it.
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigError(f"{field_name}: cannot import module {module_name!r} ({first_line(error)})") from None
        except MemoryError:
            raise
        except Exception as error:  # the module's own code failed: a syntax error, or what its top level raised
            raise ConfigError(f"{field_name}: cannot import module {module_name!r} ({type(error).__name__}: "
                              f"{first_line(error)})") from None
        function = getattr(module, function_name, None)
        if not callable(function):
            raise ConfigError(f"{field_name}: {module_name!r} has no callable {function_name!r}")
        self.function: Callable[..., Any] = function
        self.spec = spec
        self.name = reward_name(spec, is_function=True)

    def to(self, device: torch.device) -> FunctionReward:
        return self

    def __call__(self, inputs: RewardInputs) -> RewardScores:
        batch = inputs.prompts
        completions: list[Any] = list(inputs.completions)
        if batch.conversational:
            completions = [[{"role": "assistant", "content": text}] for text in completions]
        columns: dict[str, Any] = {name: values for name, values in batch.columns.items() if name not in RESERVED}
        if inputs.trainer_state is not None:
            columns["trainer_state"] = inputs.trainer_state
        try:
            output = self.function(prompts=list(batch.prompts), completions=completions,
                                   completion_ids=inputs.completion_ids, **columns)
        except (MemoryError, torch.OutOfMemoryError):
            raise  # the machine ran out, not the user's input: no one-line "bad input" exit for it
        except Exception as error:
            raise RewardFunctionError(f"reward {self.spec} raised {type(error).__name__}: {first_line(error)}") \
                from None
        values = self._values(output, len(batch))
        return RewardScores(
            values=torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float32),
            scored=torch.tensor([v is not None for v in values]),
        )

    def _values(self, output: Any, rows: int) -> list[float | None]:
        try:
            values = list(output)
        except TypeError:
            raise RewardFunctionError(f"reward {self.spec} returned {type(output).__name__}, "
                                      f"expected a list of {rows} numbers") from None
        if len(values) != rows:
            raise RewardFunctionError(f"reward {self.spec} returned {len(values)} scores for {rows} completions")
        scores: list[float | None] = []
        for index, value in enumerate(values):
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            if value is None:
                scores.append(None)
            elif isinstance(value, numbers.Real) and not isinstance(value, bool):
                scores.append(float(value))
            else:
                raise RewardFunctionError(f"reward {self.spec} returned {value!r} for completion {index}, "
                                          f"expected a number or None")
        return scores
