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

from tuner.exports import openrlhf, trl_grpo_rloo, trl_ppo, verl
from tuner.exports._common import Export, Target, export, rendered
from tuner.exports.openrlhf import openrlhf_arguments
from tuner.exports.trl_grpo_rloo import TRL_VERSION, grpo_arguments, rloo_arguments
from tuner.exports.trl_ppo import trl_arguments
from tuner.exports.verl import verl_overrides

TARGETS: dict[str, Target] = {
    "trl-ppo": trl_ppo.TARGET,
    "trl-grpo": trl_grpo_rloo.GRPO,
    "trl-rloo": trl_grpo_rloo.RLOO,
    "verl": verl.TARGET,
    "openrlhf": openrlhf.TARGET,
}
"""Every trainer the winner exports to, once each by its current name: the names a study's ``target:`` takes."""
TARGET_NAMES = tuple(TARGETS)

FORMAT_ALIASES: dict[str, str] = {"trl-args": "trl-ppo"}
"""Former ``--format`` names, each with the target it names now (trl-args named TRL's PPO before the other trainers
came)."""

FORMATS: dict[str, Target] = {
    name: TARGETS[target] for target in TARGETS
    for name in (target, *(alias for alias, aliased in FORMAT_ALIASES.items() if aliased == target))
}
"""What ``--format`` takes beside yaml and json: each target's name, followed by its former names."""

# One entry per format: its target's table, rendered in the target's layout.
EXPORT_FORMATS: dict[str, Callable[[dict[str, Any]], str]] = {
    name: rendered(target) for name, target in FORMATS.items()
}


def exported(format_name: str, config: dict[str, Any]) -> Export:
    """``config`` exported to the target ``format_name`` names (a former name too): its settings, comments and
    differences."""
    return export(FORMATS[format_name], config)


def differences(format_name: str, config: dict[str, Any]) -> list[str]:
    """What the target computes differently from the trial of ``config``, one line each; [] when exact."""
    return exported(format_name, config).differences


__all__ = ["EXPORT_FORMATS", "FORMATS", "FORMAT_ALIASES", "TARGETS", "TARGET_NAMES", "TRL_VERSION", "differences",
           "exported", "grpo_arguments", "openrlhf_arguments", "rloo_arguments", "trl_arguments", "verl_overrides"]
