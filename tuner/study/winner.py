"""Which trial won a stored study, and why: the one place that joins the seed policy, the constraints and the race.

A study's winner depends on three things it stored: its seed policy (racing chooses the best mean over the most
seeds, ``single`` the best run), its constraints (only a run that keeps every bound can win, as Optuna counts them on
each trial) and, under racing, the state of the race (each configuration's runs, seeds and mean). The worker's
progress line, ``ppo-tune show``, ``best`` and ``validate`` and the dashboard all read the one answer
:func:`read_winner` gives, so no two views can disagree on who won or on the figure it won with.

Example::

    winner = read_winner(study)
    winner.best.number, winner.figure.words()  # 3, "0.7480, mean of 2 seeds"
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tuner.store.attrs import CONFIG_ATTR
from tuner.store.segments import ENDED, generation_slots, last_generation
from tuner.study.constraints import Constraint, feasible
from tuner.study.seed_policy import RacedConfig, SeedPolicy, best_raced, raced_configs, ranked
from tuner.study.stored_spec import read_stored_spec


@dataclass(frozen=True)
class BestFigure:
    """The best trial's headline figure, as every view shows it: the value the study chose it on."""

    trial: int
    value: float
    seeds: int
    """Runs the value is the mean of: a raced configuration's seeds, else 1 (its own run)."""

    @property
    def what(self) -> str:
        """"mean of 2 seeds" or "one seed"."""
        return f"mean of {self.seeds} seeds" if self.seeds > 1 else "one seed"

    def words(self) -> str:
        """"0.7480, mean of 2 seeds" or "0.7427, one seed"."""
        return f"{self.value:.4f}, {self.what}"


@dataclass(frozen=True)
class Winner:
    """Who won a stored study and why, read once by :func:`read_winner`."""

    trials: tuple[FrozenTrial, ...]
    """The best trial, or for several objectives the Pareto front ordered by the first objective; empty while no
    completed trial keeps every constraint."""
    seed_policy: SeedPolicy | None
    """What chose the winner; None for a study stored without a spec (it raced nothing)."""
    constraints: tuple[Constraint, ...]
    """The bounds the study's spec names; each trial's own values of them decide whether it may win."""
    race: tuple[RacedConfig, ...]
    """Under racing, every configuration with a completed run, best first (every run feasible, then the mean shrunk
    by the seed noise: :func:`tuner.study.seed_policy.ranked`); empty for a study that does not race."""
    ranked: tuple[FrozenTrial, ...]
    """Every configuration best first as the study ranks them, each once, as its first trial: the race's order under
    racing, else completed runs by the first objective, feasible ones first."""
    figure: BestFigure | None
    """The winner's first objective as the study chose it on; None without a winner, or for several objectives (a
    front has no one figure)."""

    @property
    def racing(self) -> bool:
        """Whether the winner is a mean over seeds rather than one run."""
        return self.seed_policy is not None and self.seed_policy.racing

    @property
    def best(self) -> FrozenTrial | None:
        """The winning trial (a front's first); None while there is none."""
        return self.trials[0] if self.trials else None


def read_winner(study: optuna.Study) -> Winner:
    """Who won ``study``, read from its stored spec (seed policy, constraints) and its trials."""
    spec = read_stored_spec(study.user_attrs, len(study.directions))
    trials = study.get_trials(deepcopy=False)
    racing = spec.racing
    race = tuple(ranked(raced_configs(trials), study.directions[0])) if racing else ()
    if spec.population is not None:  # a member's last segment is its whole run; earlier ones are part-runs
        trials = finalists(trials)
        best = rank_completed(trials, study.directions)[:1]
        best = [trial for trial in best if feasible(trial)]
    else:
        best = _best(study, trials, racing)
    return Winner(
        trials=tuple(best),
        seed_policy=spec.seed_policy,
        constraints=spec.constraints,
        race=race,
        ranked=tuple(config.root for config in race) if racing else tuple(_distinct(rank_completed(trials,
                                                                                                  study.directions))),
        figure=_figure(best, race, len(study.directions)),
    )


def finalists(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """A population's members as the latest generation whose segments have all ended left them: each member's run
    so far, of which only the last generation's are whole runs."""
    for generation in range(last_generation(trials), -1, -1):
        slots = generation_slots(trials, generation)
        if slots and all(trial.state in ENDED for trial in slots.values()):
            return sorted(slots.values(), key=lambda trial: trial.number)
    return []


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The winning trial, or a study of several objectives' Pareto front (:attr:`Winner.trials`)."""
    return list(read_winner(study).trials)


def _best(study: optuna.Study, trials: Sequence[FrozenTrial], racing: bool) -> list[FrozenTrial]:
    """As Optuna chooses among feasible trials; under racing the best mean shrunk by the seed noise, not the luckiest
    run."""
    if not any(feasible(t) for t in trials if t.state == TrialState.COMPLETE):
        return []  # study.best_trial would raise ValueError
    if racing:
        return best_raced(trials, study.directions[0])
    if len(study.directions) == 1:
        return [study.best_trial]
    sign = -1 if study.directions[0] == StudyDirection.MAXIMIZE else 1
    return sorted(study.best_trials, key=lambda t: sign * t.values[0])


def _figure(best: Sequence[FrozenTrial], race: Sequence[RacedConfig], objectives: int) -> BestFigure | None:
    if not best or objectives > 1:
        return None
    for config in race:  # a raced winner is chosen on its mean: that is its figure, not its first run's value
        if config.root.number == best[0].number:
            return BestFigure(best[0].number, config.mean, len(config.values))
    return BestFigure(best[0].number, best[0].values[0], 1)


def rank_completed(trials: Sequence[FrozenTrial], directions: Sequence[StudyDirection]) -> list[FrozenTrial]:
    """Completed trials with a finite first objective, feasible ones first, each group best first by the first
    objective (ties in trial order)."""
    sign = -1.0 if directions[0] == StudyDirection.MAXIMIZE else 1.0
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values and math.isfinite(t.values[0])]
    return sorted(complete, key=lambda t: (not feasible(t), sign * t.values[0], t.number))


def config_key(config: dict[str, Any]) -> str:
    """A configuration's identity but for its seed: runs of one configuration on several seeds share it."""
    return repr(sorted((key, repr(value)) for key, value in config.items() if key != "seed"))


def _distinct(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Each configuration's first trial in ``trials``: one run twice (a warm start the sampler proposed again, or a
    retried trial) counts once."""
    chosen: list[FrozenTrial] = []
    seen: set[str] = set()
    for trial in trials:
        key = config_key(trial.user_attrs.get(CONFIG_ATTR, {}))
        if key not in seen:
            seen.add(key)
            chosen.append(trial)
    return chosen
