"""Who won a study (tuner.study.winner.read_winner), read once from its seed policy, constraints and race, and the
same answer in every view: the worker's progress line, ``ppo-tune show``, ``ppo-tune best``, ``validate``'s ranking
and the dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from helpers.studies import write_study
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from ppo_tune.cli import main
from tuner.store.attrs import RACE_OF_ATTR, SEED_ATTR
from tuner.store.database import create_engine
from tuner.store.records import create_tables
from tuner.study.spec_record import record_spec
from tuner.study.study_file import load_study_spec
from tuner.study.winner import read_winner

KL_BOUND = "eval/kl (last) <= 10"


def _trial(number: int, value: float, race_of: int | None = None, kl_past_bound: float | None = None) -> FrozenTrial:
    attrs: dict[str, Any] = {} if race_of is None else {RACE_OF_ATTR: race_of, SEED_ATTR: 1}
    trial = create_trial(state=TrialState.COMPLETE, value=value, params={"learning_rate": 1e-4 * (number + 1)},
                         distributions={"learning_rate": FloatDistribution(1e-5, 1e-2)}, user_attrs=attrs,
                         constraints=None if kl_past_bound is None else {KL_BOUND: kl_past_bound})
    trial.number = number
    return trial


# (study file's overrides, trials, the winner, its figure, the seeds the figure is the mean of)
STUDIES: dict[str, tuple[dict[str, Any], list[FrozenTrial], int, float, int]] = {
    # Configuration 0's mean over two seeds, 0.75, wins against trial 1's single lucky run.
    "racing": ({"seed_policy": {"name": "racing", "seeds": 2, "top_k": 2, "start": 0.0}},
               [_trial(0, 0.8), _trial(1, 0.95), _trial(2, 0.7, race_of=0)], 0, 0.75, 2),
    # One seed per trial: the best run wins, though a re-run of another configuration ran.
    "single": ({"seed_policy": {"name": "single"}},
               [_trial(0, 0.8), _trial(1, 0.95), _trial(2, 0.7, race_of=0)], 1, 0.95, 1),
    # The best run broke the KL bound: the best run within it wins.
    "constrained": ({"seed_policy": {"name": "single"}, "base": {"eval_steps": 0.5},
                     "constraints": [{"metric": "eval/kl", "reduce": "last", "max": 10.0}]},
                    [_trial(0, 0.9, kl_past_bound=2.5), _trial(1, 0.6, kl_past_bound=-1.0),
                     _trial(2, 0.7, kl_past_bound=-3.0)], 2, 0.7, 1),
}


@pytest.mark.parametrize("kind", list(STUDIES))
def test_every_view_names_the_winner_read_winner_names(
    kind: str, tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dashboard.study_reader import StudyRef, build_study_view, open_reader
    from tuner.production.validation import top_trials
    from tuner.run.follow import best_text

    overrides, trials, number, value, seeds = STUDIES[kind]
    url = f"sqlite:///{tmp_path / 'winner.db'}"
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file, name=kind, storage=url, **overrides))
    create_tables(create_engine(url))
    study = optuna.create_study(study_name=kind, storage=url, direction="maximize")
    record_spec(study, spec, allow_changes=False)  # the definition as `ppo-tune run` stores it
    for trial in trials:
        study.add_trial(trial)

    winner = read_winner(study)
    assert winner.best is not None and winner.best.number == number
    assert winner.seed_policy == spec.seed_policy and winner.racing == (kind == "racing")
    assert winner.constraints == tuple(spec.constraints)
    assert winner.figure is not None and (winner.figure.trial, winner.figure.seeds) == (number, seeds)
    assert winner.figure.value == pytest.approx(value)
    assert [config.root.number for config in winner.race] == ([0, 1] if kind == "racing" else [])
    words = winner.figure.words()

    assert best_text(study) == f"best {words} (trial {number})"
    capsys.readouterr()
    assert main(["show", kind, "--storage", url]) == 0
    assert f"best trial {number}: {words}" in capsys.readouterr().out
    assert main(["best", kind, "--storage", url]) == 0
    assert capsys.readouterr().out.startswith(f"# best trial {number}: {words}\n")
    assert top_trials(study, 1) == [winner.best]
    reader = open_reader(StudyRef(url, kind))
    view = build_study_view(reader.ref, reader.refresh())
    assert view.best == (number,) and view.best_figure == winner.figure
