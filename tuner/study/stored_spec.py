"""A study's stored spec read once: the study file's mapping a study carries (``tuner.store.attrs.SPEC_ATTR``) parsed
into the typed parts that the worker, the CLI and the dashboard read of it.

Each section is parsed by the study file's own parser (``tuner.study.sections``, ``tuner.study.space_section``), a TRL
study's fields read in ppo-tune's names as its worker read them, and no config is built: reading a study loads
neither torch nor transformers. A section that no longer parses (a spec an older ppo-tune stored) reads as its
default, so one stale section never hides the rest. Nothing parsed here is stored again: the stored mapping is the
one record.

Example::

    spec = read_stored_spec(study.user_attrs, len(study.directions))
    spec.kl_guard.threshold, spec.objectives[0].metric, spec.search_space.keys()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tuner.search.space import ParamSpec
from tuner.store.attrs import KL_GUARD_ATTR, OBJECTIVES_ATTR, SPEC_ATTR
from tuner.study.constraints import Constraint, upper_limit
from tuner.study.population_section import Population, parse_population
from tuner.study.sections import (
    PPO_CORE,
    parse_constraints,
    parse_kl_guard,
    parse_objectives,
    parse_study_seed_policy,
    parse_trainer,
    trainer_names_read,
)
from tuner.study.seed_policy import SeedPolicy
from tuner.study.space_section import parse_param
from tuner.study.spec import KLGuard, Objective
from tuner.study.values import StudySpecError

T = TypeVar("T")


@dataclass(frozen=True)
class StoredSpec:
    """What a study's stored spec says, typed; the defaults where it says nothing (or stored none)."""

    mapping: Mapping[str, Any] | None = None
    trainer: str = "ppo_core"
    target: str | None = None
    objectives: tuple[Objective, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    kl_guard: KLGuard = field(default_factory=KLGuard)
    search_space: Mapping[str, ParamSpec] = field(default_factory=dict)
    seed_policy: SeedPolicy | None = None
    """None for a study stored without a spec (it raced nothing)."""
    population: Population | None = None
    """A population study's settings; None for a search of whole runs."""

    @property
    def base(self) -> Mapping[str, Any]:
        """The study file's base config as stored; empty for a study that stored no spec."""
        base = (self.mapping or {}).get("base")
        return base if isinstance(base, Mapping) else {}

    @property
    def racing(self) -> bool:
        """Whether the study races configurations on seeds (its winner is a mean over seeds)."""
        return self.seed_policy is not None and self.seed_policy.racing

    def upper_limit(self, metric: str) -> float | None:
        """The tightest constraint ``metric <= max`` of the study, if it has one."""
        return upper_limit(self.constraints, metric)


def stored_spec_mapping(user_attrs: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The study file's mapping stored on a study (``SPEC_ATTR``); None for a study that stored none (made by an
    older ppo-tune, or by another tool). Every reader of the stored spec goes through here, but for
    ``tuner.study.spec_record.record_spec``, which writes it and compares the raw value it replaces."""
    mapping = user_attrs.get(SPEC_ATTR)
    return mapping if isinstance(mapping, Mapping) else None


def _lenient(parse: Callable[[], T], default: T) -> T:
    try:
        return parse()
    except StudySpecError:
        return default


def read_stored_spec(user_attrs: Mapping[str, Any], n_objectives: int) -> StoredSpec:
    """The study whose user attributes are ``user_attrs`` (and which has ``n_objectives`` objectives), read from
    its stored spec. A study stored without one (an older ppo-tune's) keeps the KL guard and objectives it recorded
    apart, where it did."""
    mapping = stored_spec_mapping(user_attrs)
    if mapping is None:
        return _recorded_apart(user_attrs)
    trainer, target = _lenient(lambda: parse_trainer(mapping.get("trainer"), mapping.get("target")),
                               (PPO_CORE, None))
    _, raw_space = _lenient(lambda: trainer_names_read(trainer, mapping.get("base") or {},
                                                       mapping.get("search_space")),
                            ({}, mapping.get("search_space")))
    objectives: list[Objective] = _lenient(lambda: parse_objectives(mapping.get("objectives")), [])
    space = _search_space(raw_space)
    population = _population(mapping.get("population"), space, objectives)
    return StoredSpec(
        mapping=mapping,
        trainer=trainer,
        target=target if isinstance(target, str) else None,
        objectives=tuple(objectives),
        constraints=tuple(_lenient(lambda: parse_constraints(mapping.get("constraints")), [])),
        kl_guard=_lenient(lambda: parse_kl_guard(mapping.get("kl_guard")), KLGuard()),
        search_space=space,
        # A population races no configuration on seeds, whatever the default for its objectives.
        seed_policy=SeedPolicy() if population is not None else
        _lenient(lambda: parse_study_seed_policy(mapping.get("seed_policy"), n_objectives), None),
        population=population,
    )


def _population(raw: Any, space: Mapping[str, ParamSpec], objectives: Sequence[Objective]) -> Population | None:
    """The stored population section, or None (none, or one that no longer parses)."""
    if raw is None or not objectives:
        return None
    return _lenient(lambda: parse_population(raw, space, objectives[0].metric), None)

def _search_space(raw: Any) -> dict[str, ParamSpec]:
    """Each stored parameter parsed as the study file's parser does; one that no longer parses is left out."""
    if not isinstance(raw, Mapping):
        return {}
    space = {}
    for name, entry in raw.items():
        try:
            space[str(name)] = parse_param(str(name), entry)
        except StudySpecError:
            continue
    return space


def _recorded_apart(user_attrs: Mapping[str, Any]) -> StoredSpec:
    """What a study stored before specs were stored: its KL guard and objectives, each as a mapping of fields."""
    guard = user_attrs.get(KL_GUARD_ATTR)
    known = set(KLGuard.__dataclass_fields__)
    kl_guard = _lenient(lambda: parse_kl_guard({k: v for k, v in guard.items() if k in known}), KLGuard()) \
        if isinstance(guard, Mapping) else KLGuard()
    objectives = []
    for entry in user_attrs.get(OBJECTIVES_ATTR) or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("metric"), str):
            objectives.append(Objective(**{k: v for k, v in entry.items() if k in Objective.__dataclass_fields__}))
    return StoredSpec(kl_guard=kl_guard, objectives=tuple(objectives))
