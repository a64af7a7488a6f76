"""Studies for the dashboard tests, built once per test session.

``dash``: real tuner trials on the conftest models (one pruned for KL blow-up, one adaptive-KL and one
fixed-β complete, one failed on a NaN reward), whose exact shapes the AppTest tests assert. ``pareto``: a small
synthetic two-objective study with gold scores (tools.demo_study), for the views a real tiny study cannot show.
Both live in one SQLite file. The browser tests use tools.real_studies' set on the built-in task instead: built
once into ``$PPO_TUNE_CACHE`` and reused by later sessions until its specs or the code that writes studies change.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest

from helpers.studies import TESTS_DIR, write_study
from tools.demo_study import DemoSpec, build_demo_study
from tools.real_studies import cached_set
from tuner.run.worker import run_worker
from tuner.store.attrs import DEFAULT_KL_METRIC, DEFAULT_KL_THRESHOLD, KL_GUARD_ATTR
from tuner.study.study_file import load_study_spec

REAL, PARETO = "dash", "pareto"
KL_THRESHOLD = 2.0
ADAPTIVE_TARGET = 1.0
BLOW_UP_LR = {"learning_rate": {"type": "float", "low": 2e-2, "high": 3e-2, "log": True}}


@dataclass(frozen=True)
class DashboardStudies:
    url: str
    directory: Path
    pruned: int  # trial numbers in the real study
    adaptive: int
    fixed: int
    failed: int


_built: list[DashboardStudies] = []  # both dashboard test modules share one build per session
_real: list[str] = []


def _run(directory: Path, lm_dir: Path, prompts: Path, url: str, n_trials: int | None, seed: int,
         **overrides: Any) -> None:
    path = write_study(directory, lm_dir, prompts, name=REAL, storage=url, sampler={"name": "random", "seed": seed},
                       kl_guard={"threshold": KL_THRESHOLD, "predict": False}, **overrides)
    # A timeout this short lets exactly one trial start: how the failing trial is kept to one.
    # One study built in stages, each with a base of its own: a changed definition, allowed.
    run_worker(load_study_spec(path), n_trials=n_trials, timeout=None if n_trials else 0.01, threads=None,
               allow_changes=True)


def shared_studies(factory: pytest.TempPathFactory, lm_dir: Path, prompts: Path) -> DashboardStudies:
    """Both studies, built on the first call of the session and reused after."""
    if not _built:
        _built.append(build_studies(factory.mktemp("dashboard"), lm_dir, prompts))
    return _built[0]


def real_studies_url() -> str:
    """The storage URL of tools.real_studies' set: from the cache, built there first when it has none."""
    if not _real:  # its custom-reward trials import tools.real_studies by name: pytest's pythonpath has it
        _real.append(cached_set())
    return _real[0]


def build_studies(directory: Path, lm_dir: Path, prompts: Path) -> DashboardStudies:
    """Both studies in ``directory/dash.db``."""
    if str(TESTS_DIR) not in sys.path:  # the trials import the test reward functions by name
        sys.path.insert(0, str(TESTS_DIR))
    url = f"sqlite:///{directory / 'dash.db'}"
    _run(directory, lm_dir, prompts, url, 1, 0, search_space=BLOW_UP_LR,
         base={"kl_coef": 0.0001, "total_episodes": 128})
    _run(directory, lm_dir, prompts, url, 2, 1, base={"kl_target": ADAPTIVE_TARGET})
    _run(directory, lm_dir, prompts, url, 3, 2, base={})
    _run(directory, lm_dir, prompts, url, None, 3, base={"reward_model_path": "reward_functions:nan_reward"})
    # The tuner does not record its KL guard on the study yet; the dashboard reads it from here when it does.
    study = optuna.load_study(study_name=REAL, storage=url)
    study.set_user_attr(KL_GUARD_ATTR, {"threshold": KL_THRESHOLD, "metric": DEFAULT_KL_METRIC})
    build_demo_study(url, DemoSpec(name=PARETO, n_trials=10, n_updates=24, sample_every=8,
                                   threshold=DEFAULT_KL_THRESHOLD, objectives=("objective/scores", "objective/kl")))
    return DashboardStudies(url, directory, pruned=0, adaptive=1, fixed=2, failed=3)
