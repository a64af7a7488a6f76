"""The study file (``studies/*.yaml``): what to tune, how to search, how to judge and when to stop a trial.

Every problem raises :class:`StudySpecError` with one line naming the key; the CLI exits with 2.

This module reads a study file and composes its parts: the spec it fills (``tuner.study.spec``), the value readers
and the error (``tuner.study.values``), the ``search_space:`` parser (``tuner.study.space_section``), the other
sections' parsers (``tuner.study.sections``) and the checks across them (``tuner.study.cross_checks``). It also
re-exports the types a parsed study is made of (StudySpec, Objective, KLGuard, ParamSpec), the error and parse_param,
which the study file's callers import from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ppo_core.config.io import build_config, read_mapping
from ppo_core.config.ppo_config import ConfigError
from tuner.search.space import ParamSpec
from tuner.store.database import default_storage_url
from tuner.study.cross_checks import check_study
from tuner.study.population_section import check_population, parse_population, population_seed_policy
from tuner.study.sections import (
    parse_constraints,
    parse_enqueue,
    parse_hacking_guard,
    parse_kl_guard,
    parse_objectives,
    parse_pruner,
    parse_run_settings,
    parse_sampler,
    parse_study_seed_policy,
    parse_trainer,
    target_filled_base,
    trainer_names_read,
)
from tuner.study.space_section import field_values, parse_param, parse_search_space
from tuner.study.spec import KLGuard, Objective, StudySpec
from tuner.study.values import StudySpecError, as_mapping, check_keys, fail

__all__ = [
    "KLGuard",
    "Objective",
    "ParamSpec",
    "StudySpec",
    "StudySpecError",
    "build_config",
    "load_study_spec",
    "parse_param",
    "parse_study",
]

_field_values = field_values  # read here by tests/test_ppo_core/test_estimator_registry.py under its former name

TOP_LEVEL_KEYS = ("name", "storage", "n_trials", "timeout", "sampler", "pruner", "objectives", "kl_guard", "base",
                  "search_space", "heartbeat_interval", "description", "trial_timeout", "processes_per_trial",
                  "enqueue", "constraints", "target", "seed_policy", "trainer", "hacking_guard", "population")


def parse_study(data: dict[str, Any], path: Path, storage: str | None = None) -> StudySpec:
    """Validate a study mapping (as read from ``path``); ``storage``, when given, is used instead of the mapping's
    (a ``--storage`` flag), and is not added to the mapping the study stores."""
    check_keys(data, TOP_LEVEL_KEYS, "")
    run = parse_run_settings(data, storage)
    trainer, target = parse_trainer(data.get("trainer"), data.get("target"))
    raw_base, raw_space = trainer_names_read(trainer, data.get("base"), data.get("search_space"))
    base = as_mapping(raw_base, "base")
    search_space = parse_search_space(raw_space)
    objectives = parse_objectives(data.get("objectives"))
    population = parse_population(data.get("population"), search_space, objectives[0].metric)
    seed_policy = parse_study_seed_policy(data.get("seed_policy"), len(objectives)) if population is None \
        else population_seed_policy(data, trainer)
    base = target_filled_base(target, base, search_space)
    spec = StudySpec(
        name=run.name,
        storage=run.storage or default_storage_url(path, run.name),
        path=path,
        n_trials=run.n_trials,
        timeout=run.timeout,
        sampler=parse_sampler(data.get("sampler"), objectives),
        pruner=parse_pruner(data.get("pruner")),
        objectives=objectives,
        kl_guard=parse_kl_guard(data.get("kl_guard")),
        base=base,
        search_space=search_space,
        heartbeat_interval=run.heartbeat_interval,
        trial_timeout=run.trial_timeout,
        processes_per_trial=run.processes_per_trial,
        enqueue=parse_enqueue(data.get("enqueue"), search_space, base),
        constraints=parse_constraints(data.get("constraints")),
        hacking_guard=parse_hacking_guard(data.get("hacking_guard")),
        seed_policy=seed_policy,
        trainer=trainer,
        target=target,
        population=population,
        mapping=data,
    )
    # build_config is looked up here at each parse, so a caller that replaces this module's (a test recording the
    # configs the checks build) sees every build.
    check_study(spec, build_config)
    if population is not None:
        check_population(spec, population, build_config)
    return spec


def load_study_spec(path: str | Path, storage: str | None = None) -> StudySpec:
    """Read and validate a study file; ``storage`` replaces the file's (a ``--storage`` flag)."""
    try:
        data = read_mapping(path, "study")
    except ConfigError as error:
        raise fail(str(error)) from None
    spec = parse_study(data, Path(path), storage)
    if not spec.search_space:
        # Every trial would run the same configuration.
        raise fail("search_space: empty; a study needs at least one parameter to search, e.g. learning_rate: "
                   "{type: float, low: 1.0e-6, high: 1.0e-4, log: true}")
    return spec
