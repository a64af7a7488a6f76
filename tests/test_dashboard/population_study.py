"""A small population study written as the tuner writes one, for the Population page's tests: 3 members, segments of
2 updates over 6, with copies, a pruned segment, a failed one and a retried one.

    generation 0 (updates 1-2): #0 member 0 (0.5), #1 member 1 (0.9), #2 member 2 pruned
    generation 1 (updates 3-4): member 0 continues #0 (#3 failed, retried as #9: 0.6), #4 member 1 continues #1
                                (0.95), #5 member 2 copies #1 with learning_rate 2e-4 -> 2.5e-4 (0.97)
    generation 2 (updates 5-6): #6 member 0 copies #5 with kl_coef 0.1 -> 0.08 (0.99, the winner), #7 member 1
                                failed, #8 member 2 continues #5 (0.98)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from tuner.store.attrs import BUDGET_ATTR, CONFIG_ATTR, POPULATION_ATTR, SPEC_ATTR
from tuner.store.database import create_engine
from tuner.store.records import TrialStore, create_tables
from tuner.store.segments import Segment

NAME, JUDGE, HORIZON = "pbt", "eval/gold_score", 6
WINNER = 6
SPACE: dict[str, BaseDistribution] = {"learning_rate": FloatDistribution(1e-5, 1e-3, log=True),
                                      "kl_coef": FloatDistribution(0.01, 0.5, log=True)}
SPEC = {
    "name": NAME, "objectives": [{"metric": JUDGE, "reduce": "last"}],
    "search_space": {"learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True},
                     "kl_coef": {"type": "float", "low": 0.01, "high": 0.5, "log": True}},
    "population": {"size": 3, "segment": 2},
}
FIRST = {"advantage_estimator": "gae", "kl_coef": 0.1}
COPY_1 = {**FIRST, "learning_rate": 2e-4, "learning_rate_schedule": [[3, 2.5e-4]]}
COPY_2 = {**COPY_1, "kl_coef_schedule": [[5, 0.08]]}
# (number, segment, state, value, config), in the order the trials were made.
SEGMENTS: list[tuple[int, Segment, TrialState, float | None, dict[str, Any]]] = [
    (0, Segment(0, 0, 0, 2), TrialState.COMPLETE, 0.5, {**FIRST, "learning_rate": 1e-4}),
    (1, Segment(1, 0, 0, 2), TrialState.COMPLETE, 0.9, {**FIRST, "learning_rate": 2e-4}),
    (2, Segment(2, 0, 0, 2), TrialState.PRUNED, None, {**FIRST, "learning_rate": 4e-4}),
    (3, Segment(0, 1, 2, 4, "continue", 0), TrialState.FAIL, None, {**FIRST, "learning_rate": 1e-4}),
    (4, Segment(1, 1, 2, 4, "continue", 1), TrialState.COMPLETE, 0.95, {**FIRST, "learning_rate": 2e-4}),
    (5, Segment(2, 1, 2, 4, "exploit", 1, {"learning_rate": (2e-4, 2.5e-4)}), TrialState.COMPLETE, 0.97, COPY_1),
    (6, Segment(0, 2, 4, 6, "exploit", 5, {"kl_coef": (0.1, 0.08)}), TrialState.COMPLETE, 0.99, COPY_2),
    (7, Segment(1, 2, 4, 6, "continue", 4), TrialState.FAIL, None, {**FIRST, "learning_rate": 2e-4}),
    (8, Segment(2, 2, 4, 6, "continue", 5), TrialState.COMPLETE, 0.98, COPY_1),
    (9, Segment(0, 1, 2, 4, "continue", 0), TrialState.COMPLETE, 0.6, {**FIRST, "learning_rate": 1e-4}),
]


def own_row(number: int, update: int) -> dict[str, float]:
    """Trial ``number``'s metrics at ``update``: each trial's values tell its rows apart from its parent's copies;
    held-out ones at even updates (the evaluations)."""
    row = {"objective/scores": number + update / 10, "objective/kl": update / 4, "episode": update * 8.0}
    if update % 2 == 0:
        row |= {JUDGE: number / 10 + update / 100, "eval/kl": update / 5}
    return row


def build_population_study(path: Path) -> str:
    """The study above in a SQLite file at ``path``, with its metric rows; its storage URL."""
    url = f"sqlite:///{path}"
    study = optuna.create_study(study_name=NAME, storage=url, direction="maximize")
    study.set_metric_names([JUDGE])
    study.set_user_attr(SPEC_ATTR, SPEC)
    engine = create_engine(url)
    create_tables(engine)
    ids: dict[int, int] = {}
    for number, segment, state, value, config in SEGMENTS:
        params = {"learning_rate": config["learning_rate"], "kl_coef": config["kl_coef"]}
        study.add_trial(create_trial(
            state=state, value=value, params=params, distributions=SPACE,
            user_attrs={POPULATION_ATTR: segment.as_attr(), CONFIG_ATTR: config, BUDGET_ATTR: HORIZON}))
        trial = study.get_trials(deepcopy=False)[-1]
        assert trial.number == number
        ids[number] = trial._trial_id
        store = TrialStore(engine, NAME, trial._trial_id, number)
        if segment.parent is not None:  # a segment's rows begin with its parent's, as the tuner copies them
            store.copy_from(ids[segment.parent], segment.start)
        ran = segment.stop if state != TrialState.FAIL else segment.start + 1  # a failed one stopped early
        for update in range(segment.start + 1, ran + 1):
            store.write_metrics(update, own_row(number, update))
    engine.dispose()
    return url


def lineage_value(number: int, update: int, parents: dict[int, int], starts: dict[int, int]) -> float:
    """The judge at ``update`` in trial ``number``'s stitched curve: the row of whichever segment of its lineage
    trained that update."""
    while update <= starts[number]:
        number = parents[number]
    return own_row(number, update).get(JUDGE, math.nan)


__all__ = ["HORIZON", "JUDGE", "NAME", "SEGMENTS", "WINNER", "build_population_study", "lineage_value", "own_row"]
