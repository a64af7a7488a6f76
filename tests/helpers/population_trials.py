"""A population's segment trials made by hand, as the tuner records them, for tests of its planning, its lineage
and its checkpoints without a run."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from tuner.search.space import ParamSpec
from tuner.store.attrs import BUDGET_ATTR, CONFIG_ATTR, POPULATION_ATTR
from tuner.store.segments import Segment

LR = ParamSpec("learning_rate", "float", 1e-5, 1e-3, log=True)
BETA = ParamSpec("kl_coef", "float", 0.01, 0.5, log=True)
DISTRIBUTIONS: dict[str, BaseDistribution] = {"learning_rate": FloatDistribution(1e-5, 1e-3, log=True),
                 "kl_coef": FloatDistribution(0.01, 0.5, log=True)}


def segment_trial(number: int, segment: Segment, value: float | None, config: dict[str, Any],
                  state: TrialState = TrialState.COMPLETE, constraints: dict[str, float] | None = None,
                  attrs: Mapping[str, Any] = MappingProxyType({})) -> FrozenTrial:
    """Trial ``number``, training ``segment`` with ``config`` (its learning rate and KL coefficient its params) over
    a run of 6 updates, with ``attrs`` among its user attributes; ``value`` only where it completed."""
    trial = create_trial(state=state, value=value if state == TrialState.COMPLETE else None,
                         params={"learning_rate": config["learning_rate"], "kl_coef": config["kl_coef"]},
                         distributions=dict(DISTRIBUTIONS), constraints=constraints,
                         user_attrs={POPULATION_ATTR: segment.as_attr(), CONFIG_ATTR: config, BUDGET_ATTR: 6,
                                     **attrs})
    trial.number = number
    return trial
