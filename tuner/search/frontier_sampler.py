"""The frontier-guided search as an Optuna sampler: each new trial aims at the KL where the study's objective peaks.

Before a trial's parameters are suggested (``before_trial``), the sampler reads the study's own data from its
storage: every evaluation of every trial, pruned and guarded ones included (``tuner.search.frontier_points``). It reads
where the objective peaks in KL, and whether that peak is found, by the one reading the Frontier page and Health also
read (``tuner.search.peak_reading``), fits the KL a configuration reaches from its knobs
(``tuner.search.kl_model``), draws :data:`tuner.search.frontier_aim.CANDIDATES` random configurations, and picks one the
model says lands at the aim (``tuner.search.frontier_aim``). The trial's suggest calls then return that configuration's
values, and the aim is stored on the trial (:data:`AIM_ATTR`) for ``ppo-tune show`` and the dashboard.

Everything a proposal depends on comes from storage, and its random draws from the study's seed and the trial's
number: a study killed with ``kill -9`` proposes on resume what it would have proposed, and two workers propose their
trials apart. Enqueued trials (warm starts, racing re-runs, validation runs) keep their fixed values; one that leaves
searched knobs open (a population's first generation is queued with none fixed) is proposed like any other trial.
Whatever goes wrong in reading or fitting, the trial is proposed by exploring, and the aim's reason says why: a
sampler never fails a worker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from ppo_core.errors import first_line
from ppo_core.metric_names import EVAL_JUDGE_SCORE, EVAL_KL
from tuner.search.frontier_aim import (
    CANDIDATES,
    Aim,
    aim_weights,
    budget_weights,
    choose_aim,
    pick_by_quantile,
    random_points,
    start_aim,
    within_budget,
)
from tuner.search.frontier_peak import KL_FLOOR
from tuner.search.gold_model import GoldModel, choose_near_aim, knob_row, study_gold_model
from tuner.search.kl_model import KLModel, design_row, log10_step_mass, study_kl_model
from tuner.search.space import ParamSpec

if TYPE_CHECKING:  # pandas is imported when a proposal reads the study: a study file's check never loads it
    import pandas as pd

    from tuner.search.peak_reading import PeakReading

FRONTIER_SAMPLER = "frontier"
"""The sampler's name in a study file (``sampler: {name: frontier}``)."""
FRONTIER_METRICS = (EVAL_KL, EVAL_JUDGE_SCORE)
"""What it reads: where the held-out judge's score (a built-in task's gold, unless the run names other judges) peaks
in held-out KL. A study whose runs report neither is refused as its file is read; one that maximises another held-out
judge's metric (``eval/judge_win_rate``, or ``eval/gold_score`` as older studies named gold) reads that one."""
AIM_ATTR = "frontier_aim"
"""A proposed trial's aim: kind, center, spread, target and reason (``tuner.search.frontier_aim.Aim``), and the chosen
configuration's predicted ln KL and its sd (None before the KL model exists)."""
FIXED_PARAMS_SYSTEM_ATTR = "fixed_params"  # where Optuna keeps an enqueued trial's values


def _fixed(trial: FrozenTrial) -> Mapping[str, Any]:
    """The values an enqueued trial was queued with (none for a trial the sampler proposes). Its open knobs used to
    come from a random sampler seeded alike in every worker, so two workers drew the same ones."""
    fixed = trial.system_attrs.get(FIXED_PARAMS_SYSTEM_ATTR)
    return fixed if isinstance(fixed, Mapping) else {}

MetricsReader = Callable[[str], "pd.DataFrame"]
"""The study's metrics frame by study name (``tuner.store.records.read_metrics`` on the study's database)."""


def kl_points(metrics: pd.DataFrame, params: Mapping[int, Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any],
                                                                                             float, float]]:
    """(trial, its point, updates run, KL there) for every evaluation of a trial whose point is known, from the
    metrics the frontier reads (``frontier_source``: held-out where recorded)."""
    from tuner.search.frontier_points import TRIAL_COLUMN, frontier_source

    if metrics.empty:
        return []
    source = frontier_source(metrics)
    if source.kl not in metrics.columns:
        return []
    rows = metrics[metrics[source.kl].notna() & metrics[TRIAL_COLUMN].isin(list(params))]
    return [(int(trial), params[int(trial)], float(update), float(kl)) for trial, update, kl in
            zip(rows[TRIAL_COLUMN], rows["update"], rows[source.kl], strict=True)]


class FrontierSampler(optuna.samplers.BaseSampler):
    """Aims each trial at the KL where the study's objective peaks (module docstring).

    ``n_startup_trials``: trials spread over the step mass before the KL model steers, unless the measured trials
    already show where the objective turns (the model needs two measured trials in any case). ``candidates``:
    random configurations drawn per proposal. ``seed``: the study's; each trial's draws come from it and the trial's
    number. Two options under evaluation (benchmarks/replay/README.md, "A second design round"), off by default:
    ``prefer_gold`` takes, among the candidates that hit the aim about as well, the one whose other knobs the study's
    trials say add the most gold at a given KL (``tuner.search.gold_model``); ``pilot`` (a step-mass quantile) starts
    the study with one run at that quantile, whose guarded path sweeps KL. ``within_budget`` (off by default) draws an
    aim past the study's KL budget back to it (``tuner.search.frontier_aim.within_budget``) and proposes only
    configurations the KL model predicts keep the budget on a fresh seed with probability
    ``tuner.search.frontier_aim.KEEP_BUDGET`` (``budget_weights``); off, it aims at the
    objective's peak wherever it lies, as the search pre-registered at a74c0c8 does. Replayed on the text table, the
    hold was slower, not faster (benchmarks/README.md, "The budget hold, post hoc"), so it stays an option.

    :meth:`attach` gives it the study's search space, base, metrics and KL budget; until then (or if reading them
    fails) it proposes as Optuna's random sampler does.
    """

    def __init__(self, seed: int | None = None, n_startup_trials: int = 4, candidates: int = CANDIDATES,
                 prefer_gold: bool = False, pilot: float | None = None, within_budget: bool = False) -> None:
        if candidates < 1:
            raise ValueError(f"candidates: must be at least 1, got {candidates}")
        if n_startup_trials < 0:
            raise ValueError(f"n_startup_trials: must be at least 0, got {n_startup_trials}")
        self.seed = seed if seed is not None else int(np.random.SeedSequence().generate_state(1)[0])
        self.n_startup_trials = n_startup_trials
        self.candidates = candidates
        self.prefer_gold = prefer_gold
        if pilot is not None and not 0.0 <= pilot <= 1.0:
            raise ValueError(f"pilot: a step-mass quantile in [0, 1], got {pilot}")
        self.pilot = pilot
        self.within_budget = within_budget
        self._kl_budget: float | None = None
        self._fallback = optuna.samplers.RandomSampler(seed=self.seed)
        self._space: Mapping[str, ParamSpec] = {}
        self._base: Mapping[str, Any] = {}
        self._read: MetricsReader | None = None
        self._judge: str | None = None
        self._chosen: dict[int, dict[str, Any]] = {}

    def attach(self, space: Mapping[str, ParamSpec], base: Mapping[str, Any], read_metrics: MetricsReader,
               kl_budget: float | None = None, judge: str | None = None) -> FrontierSampler:
        """The study's search space, base, metrics reader, KL budget (the tightest bound its constraints put on
        held-out KL; None: no budget) and the held-out judge metric it maximises (None: the first recorded)."""
        self._space, self._base, self._read, self._judge = space, base, read_metrics, judge
        self._kl_budget = kl_budget
        return self

    def reseed_rng(self) -> None:
        self._fallback.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self._read is None or not self._space or set(self._space) <= set(_fixed(trial)):
            return
        point, aim = self.propose(study, trial.number)
        self._chosen[trial._trial_id] = point
        study._storage.set_trial_user_attr(trial._trial_id, AIM_ATTR, aim)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        point = self._chosen.get(trial._trial_id, {})
        if param_name in point:
            value = point[param_name]
            if param_distribution._contains(param_distribution.to_internal_repr(value)):
                return value
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._chosen.pop(trial._trial_id, None)

    def propose(self, study: optuna.Study, number: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Trial ``number``'s point of the space and its aim (as stored under :data:`AIM_ATTR`)."""
        rng = np.random.default_rng([self.seed, number])
        candidates = random_points(self._space, self._base, self.candidates, rng)
        gold: GoldModel | None = None
        try:
            reading, model, measured, finals = self._read_study(study)
            if self.prefer_gold:
                gold = study_gold_model(self._space, self._base, reading.peak if reading else None, finals)
        except Exception as error:  # a database that cannot be read now: explore, and say why
            reading, model, measured = None, None, 0
            reason = f"could not read the study ({type(error).__name__}: {first_line(error)}); exploring"
        else:
            reason = ""
        peak, found = (reading.peak, reading.found) if reading is not None else (None, False)
        if model is None or (measured < self.n_startup_trials and not (reading is not None and reading.highest_inside)):
            if self.pilot is not None and number == 0:  # an aggressive first run, whose path sweeps KL
                aim = Aim("start", self.pilot, 0.0, self.pilot, "a pilot run at a high step mass: its path sweeps KL")
            else:
                aim = start_aim(number - (self.pilot is not None), float(np.random.default_rng(self.seed).random()))
            masses = np.array([log10_step_mass(point, self._base) for point in candidates])
            chosen = pick_by_quantile(masses, aim.target)
            prediction: tuple[float | None, float | None] = (None, None)
            if model is not None:
                mean, sd = model.predict(design_row(self._space, candidates[chosen], self._base))
                prediction = (float(mean[0]), float(sd[0]))
        else:
            rows = np.array([design_row(self._space, point, self._base) for point in candidates])
            mean, sd = model.predict(rows)
            aim = choose_aim(peak, mean, rng, found=found)
            budget = self._kl_budget if self.within_budget else None
            aim = within_budget(aim, budget)
            weights = budget_weights(aim_weights(mean, sd, aim.target), mean, sd, budget)
            if gold is not None:  # among the candidates that hit the aim about as well, the best drawn residual
                scores = np.array([knob_row(self._space, point, self._base) for point in candidates]) @ gold.draw(rng)
                chosen = choose_near_aim(weights, scores)
            else:
                chosen = int(np.argmax(weights))
            prediction = (float(mean[chosen]), float(sd[chosen]))
        if reason:
            aim = Aim(aim.kind, aim.center, aim.spread, aim.target, reason)
        summary = {**aim.to_dict(), "predicted_ln_kl": prediction[0], "predicted_sd": prediction[1],
                   "trials_measured": measured}
        return candidates[chosen], summary

    def _read_study(self, study: optuna.Study) -> tuple[PeakReading | None, KLModel | None, int,
                                                       list[tuple[Mapping[str, Any], float, float]]]:
        """The study's peak as the one reading reads it (``tuner.search.peak_reading``), its KL model, how many trials
        have a measured KL, and each trial's last (point, KL, gold)."""
        from tuner.search.frontier_points import frontier_source, trajectories
        from tuner.search.peak_reading import read_metrics_peak

        assert self._read is not None
        metrics = self._read(study.study_name)
        params = {t.number: t.params for t in study.get_trials(deepcopy=False) if t.params}
        points = kl_points(metrics, params)
        model = study_kl_model(self._space, self._base, points, KL_FLOOR)
        reading = read_metrics_peak(metrics, self._judge) if not metrics.empty else None
        finals: list[tuple[Mapping[str, Any], float, float]] = []
        if self.prefer_gold and not metrics.empty:
            paths = trajectories(metrics, frontier_source(metrics, self._judge)).dropna(subset=["kl", "gold"])
            last = paths.groupby("trial").tail(1)
            finals = [(params[int(t)], float(k), float(g)) for t, k, g in zip(last["trial"], last["kl"], last["gold"],
                                                                             strict=True) if int(t) in params]
        return reading, model, len({trial for trial, *_ in points}), finals
