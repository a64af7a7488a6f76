"""What the processes of a data-parallel run share: each rank's share of a global batch, sums over every rank, the
rollout seen whole for its metrics, and the main process's decisions. In one process every operation is the identity.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, broadcast_object_list, gather_object

from ppo_core.config.ppo_config import ConfigError
from ppo_core.rollout.collect import Rollout

SHARDED_LAUNCHES = {DistributedType.FSDP: "FSDP", DistributedType.DEEPSPEED: "DeepSpeed"}


def check_launch(distributed_type: DistributedType) -> None:
    """Refuse the launches ppo_core cannot run yet, in one line, before any model loads.

    The rollout generates with the unwrapped policy, whose weights FSDP and ZeRO-3 leave sharded, and the trainer
    prepares two models with two optimizers, which accelerate's DeepSpeed integration does not take.
    """
    if distributed_type in SHARDED_LAUNCHES:
        raise ConfigError(f"accelerate launch: {SHARDED_LAUNCHES[distributed_type]} is not supported yet (the "
                          "rollout generates with the unwrapped policy); launch plain multi-GPU data parallel, with "
                          "use_peft, dtype bfloat16 and gradient_checkpointing for large models")


def rank_share(rows: list[int], rank: int, world_size: int) -> list[int]:
    """Rank ``rank``'s contiguous share of a global batch: ranks see disjoint rows, together the whole batch.

    With n rows over W ranks, rank r takes n // W rows, plus one more when r < n mod W (a training batch divides
    evenly; the held-out set need not, and none of it is dropped).
    """
    per_rank, extra = divmod(len(rows), world_size)
    start = rank * per_rank + min(rank, extra)
    return rows[start : start + per_rank + (rank < extra)]


def end_process_group() -> None:
    """Destroy this process's default process group, if one is up: its backend's threads are joined here, while the
    interpreter still runs. Left to the interpreter's exit, gloo's threads met their end in C++ teardown and a rank
    could abort ("terminate called without an active exception") after a run that had succeeded."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@functools.cache  # once per process, however many trainers it builds
def _end_process_group_at_exit() -> None:
    atexit.register(end_process_group)


class ProcessGroup:
    """The run's processes, through accelerate (DDP on GPUs, gloo on CPUs).

    The group ends once, when the process exits (:func:`end_process_group`, registered with atexit), whether or not
    the run had a tracker: not at the end of training, since saving the model after it still waits for every rank,
    and a notebook or script may build another trainer on the same group."""

    def __init__(self, accelerator: Accelerator) -> None:
        self.accelerator = accelerator
        self.rank = accelerator.process_index
        self.world_size = accelerator.num_processes
        if self.world_size > 1:
            _end_process_group_at_exit()

    @property
    def is_main(self) -> bool:
        return bool(self.accelerator.is_main_process)

    def total(self, value: torch.Tensor) -> torch.Tensor:
        """sum over ranks of ``value`` (a tensor of any shape)."""
        if self.world_size == 1:
            return value
        total: torch.Tensor = self.accelerator.reduce(value, reduction="sum")
        return total

    def maxima(self, *values: float) -> list[float]:
        """Each value's max over ranks (a peak, or the slowest rank's time), in one collective for all of them."""
        if self.world_size == 1:
            return list(values)
        tensor = torch.tensor([values], dtype=torch.float64, device=self.accelerator.device)
        largest: list[float] = self.accelerator.gather(tensor).amax(dim=0).tolist()
        return largest

    def gathered(self, items: list[Any]) -> list[Any]:
        """Every rank's ``items``, concatenated in rank order, on every rank: what a statistic that does not add
        across ranks (distinct n-grams over all answers) is computed from."""
        if self.world_size == 1:
            return list(items)
        everything: list[Any] = gather_object(items)
        return everything

    def from_main(self, value: str | None) -> str | None:
        """The main process's ``value`` on every rank, so that a stop decided there stops every rank together."""
        if self.world_size == 1:
            return value
        box: list[str | None] = [value]
        broadcast_object_list(box, from_process=0)
        return box[0]

    def global_rollout(self, rollout: Rollout, *per_token: torch.Tensor) -> tuple[Rollout, list[torch.Tensor]]:
        """The rollout of every rank, rows concatenated in rank order, with ``per_token`` [B, R] tensors alongside:
        what its metrics are computed over, so each is a true global value and not one rank's.

        Only the tensor fields are gathered; text, prompts and query tensors stay this rank's.
        """
        if self.world_size == 1:
            return rollout, list(per_token)
        rows = self._rows
        gathered = dataclasses.replace(
            rollout,
            responses=rows(rollout.responses, 0), response_mask=rows(rollout.response_mask, False),
            has_stop=rows(rollout.has_stop, False), logprobs=rows(rollout.logprobs, 0.0),
            ref_logprobs=rows(rollout.ref_logprobs, 0.0),
            values=rows(rollout.values, 0.0) if rollout.values is not None else None,
            scores=rows(rollout.scores, 0.0),
            reward_scores={name: rows(part, 0.0) for name, part in rollout.reward_scores.items()},
            gold_scores=rows(rollout.gold_scores, 0.0) if rollout.gold_scores is not None else None,
        )
        return gathered, [rows(tensor, 0.0) for tensor in per_token]

    def _rows(self, tensor: torch.Tensor, pad: float | int | bool) -> torch.Tensor:
        """Every rank's rows of ``tensor``; [B, R] tensors are first right-padded to the longest R of any rank."""
        flags = tensor.dtype == torch.bool  # gloo gathers no bool tensors
        if flags:
            tensor = tensor.to(torch.uint8)
        if tensor.dim() > 1:
            tensor = self.accelerator.pad_across_processes(tensor, dim=1, pad_index=int(pad) if flags else pad)
        gathered: torch.Tensor = self.accelerator.gather(tensor)
        return gathered.bool() if flags else gathered
