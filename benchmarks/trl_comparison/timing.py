"""Per-update timings and the interface each side (ppo_core, TRL) implements for the worker."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch
from torch import nn


@dataclass
class UpdateTiming:
    """Seconds of one PPO update.

    rollout_s: generation, reference/value/reward forwards, rewards, GAE and whitening.
    update_s: the PPO epochs (forward, backward, optimizer steps), metrics and scheduler step.
    wall_s: from the end of the previous update (or train start) to the end of this one;
    wall_s - rollout_s - update_s is per-update bookkeeping outside both phases.
    gc_s: time in explicit ``gc.collect()`` calls within wall_s (TRL makes two per update; ppo_core none).
    """

    rollout_s: float
    update_s: float
    wall_s: float
    gc_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Side(Protocol):
    """One trainer set up on a fixture, ready to train."""

    name: str

    def networks(self) -> dict[str, nn.Module]:
        """The modules to count: 'policy', 'reference', 'value' (trunk) and 'reward' (trunk)."""
        ...

    def generating_policy(self) -> nn.Module:
        """The module whose ``generate`` the rollout calls."""
        ...

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The inner torch optimizers, by name."""
        ...

    def train(self) -> list[UpdateTiming]:
        """Run every update of the workload; one timing per update."""
        ...


def wall_times(marks: list[float]) -> list[float]:
    """Differences of consecutive timestamps: marks[0] is train start, then one mark per finished update."""
    return [later - earlier for earlier, later in itertools.pairwise(marks)]


def sync(device: torch.device) -> None:
    """Wait for queued GPU work so a timestamp means what it says (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
