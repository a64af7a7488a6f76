"""The config's piecewise schedules (``learning_rate_schedule``, ``kl_coef_schedule``: ppo_core.config.schedules) put
in force for one update: the KL controller's coefficient, and each scheduled optimizer's peak learning rate under its
warmup/decay scheduler. Setting them is idempotent, so the trainer sets them at the start of every update, a resumed
run's first one included: a resumed run follows its own config's schedule, whatever the checkpoint's run followed.

Example::

    apply_schedules(config, trainer.schedulers, trainer.kl_controller, update)  # before update ``update``'s rollout
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from ppo_core.algorithm.kl import AdaptiveKLController, FixedKLController
from ppo_core.config.ppo_config import PPOConfig
from ppo_core.config.schedules import value_at


def apply_schedules(config: PPOConfig, schedulers: Sequence[LRScheduler],
                    kl_controller: FixedKLController | AdaptiveKLController, update: int) -> None:
    """Put ``config``'s schedules in force for ``update``; without schedules, nothing changes. ``schedulers``: the
    policy's, then the value network's where there is one (it follows learning_rate_schedule while
    value_learning_rate is null, tied to the policy's rate as it is without a schedule)."""
    if config.kl_coef_schedule is not None:  # never with kl_target: the controller is a fixed one
        kl_controller.value = value_at(config.kl_coef_schedule, config.kl_coefficient, update)
    if config.learning_rate_schedule is not None:
        peak = value_at(config.learning_rate_schedule, config.learning_rate, update)
        tied = schedulers if config.value_learning_rate is None else schedulers[:1]
        for scheduler in tied:
            set_peak_learning_rate(scheduler, peak)


def set_peak_learning_rate(scheduler: LRScheduler, peak: float) -> None:
    """Make ``peak`` the scheduler's base rate, and the rate in force its multiplier at this step times it:

        base_lr <- peak,   lr = peak x lambda(last_epoch)

    as LambdaLR's own step computes it, so that its later steps keep the new peak (a checkpoint saves both)."""
    if not isinstance(scheduler, LambdaLR):
        raise TypeError(f"a learning-rate schedule needs a LambdaLR scheduler, not {type(scheduler).__name__}")
    scheduler.base_lrs = [peak] * len(scheduler.base_lrs)
    rates: list[float | torch.Tensor] = [peak * multiplier(scheduler.last_epoch) for multiplier in scheduler.lr_lambdas]
    for group, rate in zip(scheduler.optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    scheduler._last_lr = rates  # what get_last_lr(), and so the logged lr, reports


__all__ = ["apply_schedules", "set_peak_learning_rate"]
