"""``ppo-tune best NAME --format FORMAT``: the chosen trial's config as another trainer's arguments.

Each format is a function of the resolved config dict (``PPOConfig(...).to_dict()``, as ``trial_config`` returns it)
to text: the target's settings, one a line and shell-continued, then a ``# name=value: why`` comment for each field
the target lacks or means differently. The mapping tables are data, one module per target family, each naming the
version it was written against: :mod:`tuner.exports.trl_ppo` (TRL 1.12 PPO), :mod:`tuner.exports.trl_grpo_rloo`
(TRL 1.16 GRPO and RLOO), :mod:`tuner.exports.verl` (verl 0.9.1), :mod:`tuner.exports.openrlhf` (OpenRLHF 0.11.2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner.exports.openrlhf import openrlhf_arguments
from tuner.exports.trl_grpo_rloo import TRL_VERSION, grpo_arguments, rloo_arguments
from tuner.exports.trl_ppo import trl_arguments
from tuner.exports.verl import verl_overrides

EXPORT_FORMATS: dict[str, Callable[[dict[str, Any]], str]] = {
    "trl-ppo": trl_arguments,
    "trl-args": trl_arguments,  # the name trl-ppo had before the other trainers came
    "trl-grpo": grpo_arguments,
    "trl-rloo": rloo_arguments,
    "verl": verl_overrides,
    "openrlhf": openrlhf_arguments,
}

__all__ = ["EXPORT_FORMATS", "TRL_VERSION", "grpo_arguments", "openrlhf_arguments", "rloo_arguments",
           "trl_arguments", "verl_overrides"]
