"""benchmarks.horizon_transfer's choice of what to carry: a source study's best configurations as the study itself
ranks them (its quick mode runs in test_benchmark_quick_modes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from benchmarks.horizon_transfer import winners
from tuner.store.attrs import CONFIG_ATTR, RACE_OF_ATTR, SEED_ATTR, SPEC_ATTR
from tuner.store.database import create_engine
from tuner.store.records import TrialStore, create_tables

BUDGET = "eval/kl (last) <= 10"


def _run(config: int, value: float, kl_past_budget: float, race_of: int | None = None,
         seed: int = 0) -> FrozenTrial:
    """A completed run of configuration ``config`` (its learning rate tells them apart) on ``seed``."""
    attrs: dict[str, Any] = {CONFIG_ATTR: {"learning_rate": 1e-5 * (config + 1), "seed": seed}}
    if race_of is not None:
        attrs.update({RACE_OF_ATTR: race_of, SEED_ATTR: seed})
    return create_trial(state=TrialState.COMPLETE, value=value, params={"learning_rate": 1e-5 * (config + 1)},
                        distributions={"learning_rate": FloatDistribution(1e-6, 1e-3)}, user_attrs=attrs,
                        constraints={BUDGET: kl_past_budget})


@pytest.mark.parametrize("racing", [True, False])
def test_a_racing_source_is_carried_from_the_race_s_ranking_not_each_configuration_s_first_run(
        tmp_path: Path, racing: bool) -> None:
    # SmolLM2's third look: configuration 0 had the best first run, but 2 of its 3 runs ended past the KL budget, and
    # the race chose configuration 1. horizon_transfer ranked first runs, and carried configuration 0 first.
    url = f"sqlite:///{tmp_path / 'source.db'}"
    study = optuna.create_study(study_name="source", storage=url, direction="maximize")
    policy = {"seeds": 3} if racing else {"name": "single"}
    study.set_user_attr(SPEC_ATTR, {"objectives": [{"metric": "eval/gold_score"}], "seed_policy": policy})
    runs = [_run(0, 0.530, -3.8), _run(1, 0.512, -8.5), _run(0, 0.536, 9.0, race_of=0, seed=1),
            _run(1, 0.482, -6.5, race_of=1, seed=1), _run(0, 0.590, 3.1, race_of=0, seed=2),
            _run(1, 0.530, -6.9, race_of=1, seed=2), _run(2, 0.507, -9.9)]
    for run in runs:
        study.add_trial(run)
    engine = create_engine(url)
    create_tables(engine)
    for trial in study.get_trials():
        TrialStore(engine, "source", trial._trial_id, trial.number).write_metrics(16, {"eval/kl": 1.0 + trial.number})
    chosen = winners("source", url, 2)
    if racing:
        # The race's winner first, on its 3-seed mean; the configuration it threw out is not carried at all.
        assert [(w.trial, w.value) for w in chosen] == [(1, pytest.approx((0.512 + 0.482 + 0.530) / 3)), (6, 0.507)]
    else:  # one seed per trial: each run on its own value, within the budget, as before
        assert [(w.trial, w.value) for w in chosen] == [(0, 0.530), (1, 0.512)]
    assert [w.final_kl for w in chosen] == [1.0 + w.trial for w in chosen]
