"""Pilots: a configuration carried to another policy and run there before it is validated there, so that
``kl_pilot`` (``tuner.production.horizon``) can rescale its learning rate from the KL the pilot ended at.

A larger policy moves further per step at the same learning rate (``benchmarks.size_transfer``: about 1.7x the KL on
a policy of 4.3x the parameters), and how much further depends on the model, so no rule of the length alone brings a
tuned configuration back to the KL it was tuned at. A pilot measures it. Pilots are validation runs marked as such
(``tuner.store.attrs.PILOT_ATTR``), on the same fresh seeds and in the same validation study as the runs they lead to:
``ppo-tune validate --policy-model`` queues and runs them first, then the configurations they rescale, and
``ppo-tune best --policy-model`` reads the same pilots to print the rescaled configuration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from optuna.trial import TrialState

from tuner.production.carry import final_kl
from tuner.production.horizon import Carried, composed, kl_pilot, pilot_kl
from tuner.production.validation import is_pilot
from tuner.store.attrs import CONFIG_ATTR, VALIDATES_ATTR
from tuner.study.winner import config_key

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial


@dataclass(frozen=True)
class Piloted:
    """Configurations rescaled by their pilots, by tuned trial, and for each trial that could not be: why."""

    carried: dict[int, Carried] = field(default_factory=dict)
    missing: dict[int, str] = field(default_factory=dict)


def pilot_runs(validation: optuna.Study | None, trial: int, carried: Carried) -> list[FrozenTrial]:
    """The completed pilot runs of tuned trial ``trial`` as ``carried`` carries it (its config but for the seed)."""
    if validation is None:
        return []
    key = config_key(carried.config)
    return [run for run in validation.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if is_pilot(run) and run.user_attrs.get(VALIDATES_ATTR) == trial
            and config_key(run.user_attrs.get(CONFIG_ATTR, {})) == key]


def piloted(study: optuna.Study, validation: optuna.Study | None, url: str, carried: Mapping[int, Carried]) -> Piloted:
    """Each trial's ``carried`` configuration (on the new policy) rescaled by ``kl_pilot`` from the mean final KL of
    its completed pilot runs and the final KL its tuning trial ended at; a trial without a completed pilot, or with
    a KL that is not a positive number, is missing, with why."""
    from tuner.store.database import open_read_only_engine
    from tuner.store.records import read_stored_metrics

    runs = {trial: pilot_runs(validation, trial, to) for trial, to in carried.items()}
    found = Piloted()
    if validation is None or not any(runs.values()):  # nothing to read
        found.missing.update({trial: "no pilot has run there yet" for trial in carried})
        return found
    engine = open_read_only_engine(url)
    tuned = read_stored_metrics(engine, study.study_name, list(carried))
    numbers = [run.number for pilot in runs.values() for run in pilot]
    pilots = read_stored_metrics(engine, validation.study_name, numbers)
    for trial, to in carried.items():
        if not runs[trial]:
            found.missing[trial] = "no pilot has run there yet"
            continue
        kls = [final_kl(pilots[pilots["trial_number"] == run.number]) for run in runs[trial]]
        if any(math.isnan(kl) for kl in kls):
            found.missing[trial] = "its pilot stored no KL"
            continue
        try:
            rescaled = kl_pilot(to.config, int(to.config["total_episodes"]),
                                final_kl(tuned[tuned["trial_number"] == trial]), pilot_kl(kls))
        except ValueError as error:
            found.missing[trial] = str(error)
            continue
        found.carried[trial] = composed(to, rescaled)
    return found
