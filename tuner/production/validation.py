"""Re-validation: the K best configurations of a study, trained again on seeds the study never used.

A tuned winner is partly luck: it won on one seed (Eimer et al., ICML 2023, keep tuning and test seeds apart and
report the test seeds' result). ``ppo-tune validate`` reruns the top configurations on fresh seeds and reports each
one's mean and 95% confidence interval.

The runs live in a study of their own in the same storage, ``<study>:validation``, so the tuned study's trial
count, sampler and best trial stay untouched, while the runs' metrics and samples are stored and shown like any
trial's. Each run is a queued trial carrying its full config (the source trial's, with the new seed) and its
source trial's number; workers run the queue and nothing else, so an interrupted validation resumes where it
stopped, as a study does.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tuner.production.confidence import mean_interval
from tuner.production.horizon import POLICY_FIELD
from tuner.store.attrs import (
    CARRIED_BY_ATTR,
    CONFIG_ATTR,
    PILOT_ATTR,
    RETRY_OF_ATTR,
    SEED_ATTR,
    VALIDATES_ATTR,
    VALIDATION_OF_ATTR,
)
from tuner.study.constraints import feasible
from tuner.study.winner import read_winner

if TYPE_CHECKING:
    from tuner.production.horizon import Carried
    from tuner.study.spec import StudySpec

VALIDATION_SUFFIX = ":validation"
FIRST_VALIDATION_SEED = 1000
"""Validation seeds count up from here, skipping any seed the study trained with: every configuration of every
study meets the same seeds (a paired comparison), and a second ``validate`` with more seeds keeps the first ones."""


def validation_study_name(name: str) -> str:
    return name + VALIDATION_SUFFIX


def fresh_seeds(used: set[int], count: int, first: int = FIRST_VALIDATION_SEED) -> list[int]:
    """The first ``count`` integers from ``first`` up that are not in ``used``."""
    return list(itertools.islice((seed for seed in itertools.count(first) if seed not in used), count))


def top_trials(study: optuna.Study, k: int) -> list[FrozenTrial]:
    """The best ``k`` configurations as the study ranks them (``tuner.study.winner.Winner.ranked``), best first, each
    as its first trial, so that the first is the winner ``ppo-tune best`` names.

    A study that races ranks a configuration on all its runs, so a configuration that the race threw out for a re-run
    past the KL budget is not validated for its luckiest run (SmolLM2's third look validated such a one in place of
    the study's winner)."""
    return list(read_winner(study).ranked[:k])


def validation_spec(spec: StudySpec) -> StudySpec:
    """The validation study's spec: the tuned study's objectives and constraints, every run trained to the end (no
    pruner, no KL guard: a configuration that blows up on a fresh seed must show it), and nothing to search."""
    mapping = copy.deepcopy(spec.mapping)
    mapping.update(name=validation_study_name(spec.name), storage=spec.storage, search_space={},
                   sampler={"name": "random"}, pruner={"name": "none"},
                   kl_guard={**mapping.get("kl_guard", {}), "enabled": False})
    # A fresh seed's hack must show, as its KL's; a population's winner replays its schedule from scratch, a run.
    for key in ("enqueue", "n_trials", "timeout", "hacking_guard", "population"):
        mapping.pop(key, None)
    # Imported here: the study file's module loads transformers (for PPOConfig's parser), which the dashboard, reading
    # validation results through this module, must not load.
    from tuner.study.study_file import parse_study

    return parse_study(mapping, spec.path)


def chosen_trials(study: optuna.Study, top_k: int, numbers: Sequence[int] | None = None) -> list[FrozenTrial]:
    """The configurations to validate: the trials ``numbers`` names, in that order (``validate --trials``: what
    another rule, such as the proxy's, would have picked), else the ``top_k`` best (:func:`top_trials`). A number the
    study has no finished trial of raises ValueError, naming it."""
    if numbers is None:
        return top_trials(study, top_k)
    by_number = {trial.number: trial for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    missing = [number for number in numbers if number not in by_number]
    if missing:
        raise ValueError(f"study {study.study_name!r} has no completed trial {missing[0]}")
    return [by_number[number] for number in numbers]


def queue_runs(study: optuna.Study, validation: optuna.Study, top_k: int, seeds: int,
               carry: Callable[[FrozenTrial], Carried | None] | None = None,
               pilot: bool = False, eval_samples: int | None = None,
               trials: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """Queue a run for every (top configuration, fresh seed) pair that has none yet at its length and on its policy;
    returns the pairs queued. With ``carry``, each configuration runs as ``carry`` carries it to a production run
    (``validate --total-episodes`` / ``--policy-model``: ``tuner.production.horizon``), and its runs are told apart from
    the tuned length's and policy's by their own; a configuration ``carry`` returns None for is left out. ``pilot``
    queues pilots (``tuner.production.pilot``), which are kept apart from the validation runs of the same length and
    policy. ``trials`` names the configurations instead of the top ``top_k`` (:func:`chosen_trials`).
    ``eval_samples`` (``validate --eval-samples``) sets the new runs' ``num_eval_samples``. Their
    runs are not kept apart from the others: drawing more responses for the same prompts changes the noise of a
    run's score, not what it estimates."""
    validation.set_user_attr(VALIDATION_OF_ATTR, study.study_name)
    used = {int(t.user_attrs[CONFIG_ATTR]["seed"]) for t in study.get_trials(deepcopy=False)
            if "seed" in t.user_attrs.get(CONFIG_ATTR, {})}
    chosen_seeds = fresh_seeds(used, seeds)
    present = {(t.user_attrs.get(VALIDATES_ATTR), t.user_attrs.get(SEED_ATTR), run_episodes(t), run_policy(t),
                is_pilot(t)) for t in validation.get_trials(deepcopy=False)}
    evaluation = {} if eval_samples is None else {"num_eval_samples": eval_samples}
    queued = []
    for trial in chosen_trials(study, top_k, trials):
        carried = carry(trial) if carry is not None else None
        if carry is not None and carried is None:
            continue
        config = carried.config if carried is not None else trial.user_attrs[CONFIG_ATTR]
        for seed in chosen_seeds:
            if (trial.number, seed, config.get("total_episodes"), config.get(POLICY_FIELD), pilot) in present:
                continue
            attrs = {CONFIG_ATTR: {**config, **evaluation, "seed": seed}, VALIDATES_ATTR: trial.number,
                     SEED_ATTR: seed}
            if carried is not None:
                attrs[CARRIED_BY_ATTR] = carried.rule
            if pilot:
                attrs[PILOT_ATTR] = True
            validation.enqueue_trial({}, user_attrs=attrs, skip_if_exists=False)
            queued.append((trial.number, seed))
    return queued


def run_episodes(trial: FrozenTrial) -> int | None:
    """The total_episodes a trial (a tuning trial, or a validation run) trains for; None when num_train_epochs sets
    its length."""
    episodes = trial.user_attrs.get(CONFIG_ATTR, {}).get("total_episodes")
    return None if episodes is None else int(episodes)


def run_policy(trial: FrozenTrial) -> str | None:
    """The policy a trial (or a validation run) starts from, its config's ``sft_model_path``; None for the built-in
    task's own."""
    return trial.user_attrs.get(CONFIG_ATTR, {}).get(POLICY_FIELD)


def is_pilot(trial: FrozenTrial) -> bool:
    """Whether a validation run is a pilot (``tuner.production.pilot``), not a validation."""
    return bool(trial.user_attrs.get(PILOT_ATTR))


@dataclass(frozen=True)
class ValidatedConfig:
    """One configuration's validation: its runs' first-objective values on fresh seeds and their 95% interval."""

    trial: int
    tuning_value: float
    values: tuple[float, ...]
    failed: int
    """Runs that ended in failure (a non-finite metric, an error): a configuration that breaks on a fresh seed."""
    pending: int
    """Runs queued or running."""
    feasible_runs: int
    """Completed runs that kept the study's constraints (all of them when it has none)."""
    total_episodes: int | None = None
    """The runs' length: the tuned trial's own, or a production length (``validate --total-episodes``)."""
    rule: str | None = None
    """The rule that carried the configuration to that length (``tuner.production.horizon``); None at the trial's
    own."""
    policy_model: str | None = None
    """The runs' policy where it is another than the tuned trial's (``validate --policy-model``), else None."""

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def interval(self) -> tuple[float, float, float]:
        return mean_interval(self.values)

    @property
    def held(self) -> bool:
        """Whether most of its completed fresh runs kept the study's constraints (2 x feasible_runs > n): a study
        whose winner must keep a KL budget should not carry to production a configuration that kept it on its tuning
        seeds only."""
        return 2 * self.feasible_runs > self.n

    def to_dict(self) -> dict[str, Any]:
        mean, low, high = self.interval
        return {"trial": self.trial, "n": self.n, "mean": _json_number(mean), "ci_low": _json_number(low),
                "ci_high": _json_number(high), "tuning_value": _json_number(self.tuning_value),
                "failed": self.failed, "pending": self.pending, "feasible_runs": self.feasible_runs,
                "total_episodes": self.total_episodes, "rule": self.rule,
                "policy_model": self.policy_model}


def _json_number(value: float) -> float | None:
    return None if math.isnan(value) else value


def validation_results(study: optuna.Study, validation: optuna.Study | None, total_episodes: int | None = None,
                       policy_model: str | None = None) -> list[ValidatedConfig]:
    """Each validated configuration of ``study`` at ``total_episodes`` (by default each tuned trial's own length) on
    ``policy_model`` (by default each tuned trial's own policy), ranked by :func:`rank_validated` (those whose fresh
    runs mostly kept the study's constraints first, each group by validated mean in the first objective's direction);
    a configuration without a completed run comes last. Pilots are not validations."""
    if validation is None:
        return []
    source = {t.number: t for t in study.get_trials(deepcopy=False)}
    runs: dict[int, list[FrozenTrial]] = {}
    retried = {t.user_attrs.get(RETRY_OF_ATTR) for t in validation.get_trials(deepcopy=False)}
    for run in validation.get_trials(deepcopy=False):
        # A retried run's retry stands for it.
        if VALIDATES_ATTR not in run.user_attrs or run.number in retried or is_pilot(run):
            continue
        number = int(run.user_attrs[VALIDATES_ATTR])
        tuned = source.get(number)
        if _runs_at(run, tuned, total_episodes, policy_model):
            runs.setdefault(number, []).append(run)
    results = []
    for number, trials in runs.items():
        complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values and not math.isnan(t.values[0])]
        tuned = source.get(number)
        rules = {t.user_attrs.get(CARRIED_BY_ATTR) for t in trials} - {None}
        results.append(ValidatedConfig(
            trial=number,
            tuning_value=tuned.values[0] if tuned is not None and tuned.values else math.nan,
            values=tuple(t.values[0] for t in complete),
            failed=sum(t.state == TrialState.FAIL for t in trials),
            pending=sum(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in trials),
            feasible_runs=sum(feasible(t) for t in complete),
            total_episodes=run_episodes(trials[0]),
            rule=", ".join(sorted(str(r) for r in rules)) or None,
            policy_model=policy_model if tuned is None or policy_model != run_policy(tuned) else None,
        ))
    return rank_validated(results, study.directions[0] == StudyDirection.MAXIMIZE)


def _runs_at(run: FrozenTrial, tuned: FrozenTrial | None, total_episodes: int | None,
             policy_model: str | None) -> bool:
    """Whether ``run`` is at ``total_episodes`` on ``policy_model``, each by default the tuned trial's own (any run
    of a tuned trial that is gone is at its own)."""
    if tuned is None:
        return total_episodes in (None, run_episodes(run)) and policy_model in (None, run_policy(run))
    length = run_episodes(tuned) if total_episodes is None else total_episodes
    policy = run_policy(tuned) if policy_model is None else policy_model
    return (run_episodes(run), run_policy(run)) == (length, policy)


def rank_validated(results: Sequence[ValidatedConfig], maximize: bool) -> list[ValidatedConfig]:
    """Best validated mean first among the configurations whose fresh runs mostly kept the study's constraints
    (:attr:`ValidatedConfig.held`), then the others by mean: as a study's constraints decide which trials may win,
    before their values do. Configurations with no completed run last, in trial order."""
    sign = -1.0 if maximize else 1.0
    return sorted(results, key=lambda r: (r.n == 0, not r.held, sign * r.interval[0] if r.n else 0.0, r.trial))


def load_validation(study_name: str, storage: str | optuna.storages.BaseStorage) -> optuna.Study | None:
    """The study's validation study in ``storage`` (the study's own), or None when it was never validated."""
    try:
        return optuna.load_study(study_name=validation_study_name(study_name), storage=storage)
    except KeyError:
        return None
