"""The study file's ``population:`` section: population-based training instead of a search of whole runs.

A population study trains ``size`` members side by side, each a run of the study's full horizon cut into segments of
``segment`` updates. The first segments' configurations come from the study's sampler (and warm starts); at every
segment's end the members are ranked on the study's first objective, which must be a held-out judge (gold, a judge
score or a win rate): never the proxy the policy trains on, which a hacking member would win. The ``quantile`` at the
bottom, and every member that was stopped (the KL guard, a hacking guard) or broke the study's constraints, copy a
member of the top ``quantile`` (its checkpoint, its records and its schedule so far) and perturb the knobs in
``mutate``: each is multiplied by one of ``perturb``, in log space and clipped to its search range, or, with
probability ``resample``, drawn afresh from that range. What comes out is a schedule (``learning_rate_schedule``,
``kl_coef_schedule`` in ppo_core's config) that ``best`` prints and ``validate`` replays from scratch.

With ``backtrack`` (a probability, 0 by default: off) a recipient that copies goes back instead, with that
probability, to the population's elite: the best earlier segment end of any lineage (``tuner.population.backtrack``),
when it is ahead of the generation's best donor. That undoes a hack that began after a member's peak.

``exploit_on`` ranks the members on another metric at each segment's end, reduced as the first objective is: another
held-out judge, or the proxy (``eval/score``) as a control only, which shows what ranking on the judge buys
(``benchmarks/results/population_quality/``): ranked on the proxy, a population copies whichever member games it.
The study's winner is still chosen by its first objective, which must be a held-out judge either way.

Example::

    population: {size: 8, segment: 6, quantile: 0.25, mutate: [learning_rate, kl_coef]}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ppo_core.config.value_types import fits
from ppo_core.metric_names import EVAL_SCORE, HELD_OUT_JUDGE_METRICS
from tuner.search.space import ParamSpec, choose_point, config_values, first_value
from tuner.study.seed_policy import SeedPolicy
from tuner.study.values import as_mapping, check_keys, fail, show_value

SCHEDULED = {"learning_rate": "learning_rate_schedule", "kl_coef": "kl_coef_schedule", "beta": "kl_coef_schedule"}
"""Each knob a population may perturb mid-run, and the config's schedule of it."""
JUDGE_PREFIX = "eval/judge/"
"""One named judge's own metric (``eval/judge/<name>``), a held-out judge as much as their mean."""
KEYS = ("size", "segment", "quantile", "mutate", "perturb", "resample", "margin", "seed", "backtrack",
        "exploit_on")


@dataclass(frozen=True)
class Population:
    """A population study's settings, as the study file gives them (see the module's docstring)."""

    size: int
    segment: int
    """Updates between two rankings of the population; the last segment ends at the run's horizon."""
    quantile: float = 0.25
    mutate: tuple[str, ...] = ()
    perturb: tuple[float, ...] = (0.8, 1.25)
    resample: float = 0.25
    margin: float = 0.0
    """How far ahead (in the first objective) a donor must be for a member to copy it: one held-out evaluation's
    standard error is a fair choice, so that no member copies another for noise alone."""
    seed: int = 0
    backtrack: float = 0.0
    """The chance that a recipient which copies goes back to the elite (the best earlier segment end of any lineage,
    ahead of the generation's best donor) rather than to a current donor; 0: never."""
    exploit_on: str | None = None
    """The metric members are ranked on at each segment's end, where it is not the first objective: another held-out
    judge, or the proxy as a control; None: the first objective."""

    @property
    def cut(self) -> int:
        """Members replaced at each ranking (at least): ceil(size * quantile), at least 1, at most size // 2, so that
        there are always as many donors as recipients."""
        return max(1, min(self.size // 2, math.ceil(self.size * self.quantile - 1e-9)))  # 8 x 0.25 is 2, not 3

    def as_mapping(self) -> dict[str, Any]:
        return {"size": self.size, "segment": self.segment, "quantile": self.quantile, "mutate": list(self.mutate),
                "perturb": list(self.perturb), "resample": self.resample, "margin": self.margin, "seed": self.seed,
                "backtrack": self.backtrack, **({"exploit_on": self.exploit_on} if self.exploit_on else {})}


def _whole(raw: Mapping[str, Any], key: str, default: int | None, least: int) -> int:
    value = raw.get(key, default)
    if value is None or not fits(value, int) or value < least:
        raise fail(f"population.{key}: expected a whole number >= {least}, got {show_value(value)}")
    return int(value)


def _fraction(raw: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = raw.get(key, default)
    if not fits(value, float) or not low <= value <= high:
        raise fail(f"population.{key}: expected a number in [{low:g}, {high:g}], got {show_value(value)}")
    return float(value)


def _mutated(raw: Any, space: Mapping[str, ParamSpec]) -> tuple[str, ...]:
    """The knobs to perturb: the study file's list, or every searched knob a schedule can change."""
    if raw is None:
        found = tuple(name for name in SCHEDULED if name in space)
        if not found:
            raise fail(f"population.mutate: the search space has none of {', '.join(SCHEDULED)}, the knobs a "
                       "population can change mid-run; search one of them")
        return found
    if not isinstance(raw, list) or not raw:
        raise fail(f"population.mutate: expected a list of searched knobs among {', '.join(SCHEDULED)}, got "
                   f"{show_value(raw)}")
    for name in raw:
        if name not in SCHEDULED:
            raise fail(f"population.mutate: {show_value(name)} cannot change mid-run; expected some of "
                       f"{', '.join(SCHEDULED)}")
        param = space.get(name)
        if param is None or param.type != "float":
            raise fail(f"population.mutate: {name} must be searched as a float range (its perturbations stay inside "
                       "its search range)")
    if len(set(raw)) != len(raw) or ({"kl_coef", "beta"} <= set(raw)):
        raise fail("population.mutate: each knob once, and one KL coefficient (kl_coef or beta, whichever the "
                   "estimator puts in force)")
    return tuple(raw)


def _exploit_on(raw: Any, first_metric: str) -> str | None:
    """The metric ranked on where it is not the first objective (None where it is, or is not given)."""
    if raw is None or raw == first_metric:
        return None
    if not isinstance(raw, str) or not (raw in HELD_OUT_JUDGE_METRICS or raw.startswith(JUDGE_PREFIX) or
                                        raw == EVAL_SCORE):
        raise fail(f"population.exploit_on: expected a held-out judge ({', '.join(HELD_OUT_JUDGE_METRICS)}, "
                   f"{JUDGE_PREFIX}<name>) or, as a control, the proxy {EVAL_SCORE}; got {show_value(raw)}")
    return raw


def parse_population(raw: Any, space: Mapping[str, ParamSpec], first_metric: str) -> Population | None:
    """The ``population:`` section (None when absent), or StudySpecError naming the key that is wrong."""
    if raw is None:
        return None
    mapping = as_mapping(raw, "population")
    check_keys(mapping, KEYS, "population.")
    if first_metric not in HELD_OUT_JUDGE_METRICS and not first_metric.startswith(JUDGE_PREFIX):
        raise fail(f"population: members are ranked on the first objective, which must be a held-out judge "
                   f"({', '.join(HELD_OUT_JUDGE_METRICS)}), not {first_metric}: ranked on the reward it trains on, "
                   "the population would copy whichever member games it")
    perturb = mapping.get("perturb", [0.8, 1.25])
    if not isinstance(perturb, list) or not perturb or not all(fits(f, float) and f > 0 for f in perturb):
        raise fail(f"population.perturb: expected a list of positive factors such as [0.8, 1.25], got "
                   f"{show_value(perturb)}")
    margin = mapping.get("margin", 0.0)
    if not fits(margin, float) or margin < 0:
        raise fail(f"population.margin: expected a number >= 0, got {show_value(margin)}")
    return Population(
        size=_whole(mapping, "size", None, 2), segment=_whole(mapping, "segment", None, 1),
        quantile=_fraction(mapping, "quantile", 0.25, 0.0, 0.5), mutate=_mutated(mapping.get("mutate"), space),
        perturb=tuple(float(f) for f in perturb), resample=_fraction(mapping, "resample", 0.25, 0.0, 1.0),
        margin=float(margin), seed=_whole(mapping, "seed", 0, 0),
        backtrack=_fraction(mapping, "backtrack", 0.0, 0.0, 1.0),
        exploit_on=_exploit_on(mapping.get("exploit_on"), first_metric),
    )


def population_seed_policy(data: Mapping[str, Any], trainer: str) -> SeedPolicy:
    """A population study's seed policy: ``single`` (its members are its seeds' runs, ranked at every segment, and
    racing whole configurations on more seeds has no meaning there); a study file that asks for racing, or a trainer
    that cannot stop and resume mid-run (TRL's), is refused."""
    raw = data.get("seed_policy")
    if raw is not None and (not isinstance(raw, Mapping) or raw.get("name") != "single"):
        raise fail("seed_policy: a population ranks its members at every segment; only {name: single} goes with it")
    if trainer != "ppo_core":
        raise fail(f"population: needs trainer ppo_core, whose runs stop and resume mid-way; {trainer} trials do not")
    if data.get("n_trials") is not None:
        raise fail("n_trials: a population study trains its members to the run's horizon, population.size runs' "
                   "worth of updates; drop n_trials (a timeout still stops it)")
    return SeedPolicy()


def _horizon_knob(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> str | None:
    """The first searched knob that gives runs of different lengths in updates: the run's episodes or epochs, or a
    knob whose values (its choices, or its range's ends) change the episodes per update, the others at their first
    values; None when every run is as long."""
    from tuner.search.kl_model import rollout_episodes

    def per_update(name: str, value: Any) -> int:
        return rollout_episodes(choose_point(space, lambda p: value if p.name == name else first_value(p), base), base)

    for name, param in space.items():
        ends = param.choices if param.type == "categorical" else (param.low, param.high)
        if name in ("total_episodes", "num_train_epochs") or len({per_update(name, value) for value in ends}) > 1:
            return name
    return None


def check_population(spec: Any, population: Population, build: Callable[[dict[str, Any]], Any]) -> None:
    """The population's checks against the rest of the study (``spec``: a StudySpec), or StudySpecError: every
    segment's end is evaluated (``eval_steps`` a whole number of updates dividing ``segment``), no adaptive
    controller or searched placement moves the KL coefficient it perturbs (the search space's own check refuses a
    coefficient that is never in force), and its warm starts fit in its first generation."""
    # base and the low end of every searched range: the checks read fields no search changes here
    config = build({**spec.base, **config_values(choose_point(spec.search_space, first_value, spec.base), spec.base)})
    steps = config.eval_steps
    if steps is None or steps < 1 or not float(steps).is_integer() or population.segment % int(steps):
        raise fail(f"population.segment: every segment's end must be evaluated, so base.eval_steps must be a whole "
                   f"number of updates dividing segment {population.segment}; got eval_steps {show_value(steps)}")
    kl_knobs = [name for name in population.mutate if SCHEDULED[name] == "kl_coef_schedule"]
    moved = {"kl_in_reward", "kl_control", "kl_target"} & set(spec.search_space) or config.kl_target is not None
    if kl_knobs and moved:
        raise fail(f"population.mutate: {kl_knobs[0]} cannot be perturbed where the KL placement or an adaptive "
                   "KL controller is searched or set: the coefficient in force would not be the one perturbed")
    varying = _horizon_knob(spec.search_space, spec.base)
    if varying is not None:
        raise fail(f"population: searched {varying} changes how many updates a run makes, and a population ranks its "
                   "members at the same update; fix it in base")
    if len(spec.enqueue) > population.size:
        raise fail(f"population.size: {population.size} members cannot start from {len(spec.enqueue)} warm starts")


__all__ = ["KEYS", "SCHEDULED", "Population", "check_population", "parse_population", "population_seed_policy"]
