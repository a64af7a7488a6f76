"""A sampler's name means one search on every install of the Optuna range pyproject allows."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import optuna
import pytest
from helpers.studies import write_study
from packaging.requirements import Requirement

from tuner.study.study_file import load_study_spec
from tuner.trial.factory import TPE_MEANING, make_sampler

ROOT = Path(__file__).resolve().parents[2]


def optuna_requirement() -> Requirement:
    # pyproject's own line (tomllib is Python 3.11+, and ppo-tune runs on 3.10): the first quoted requirement on
    # optuna, the dependencies list coming before the extras.
    found = re.search(r'"(optuna[<>=!~][^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert found is not None
    return Requirement(found.group(1))


def test_the_installed_optuna_is_in_the_pinned_range_which_excludes_4x() -> None:
    requirement = optuna_requirement()
    assert requirement.specifier.contains(metadata.version("optuna"))
    # 4.x read {name: tpe} as independent TPE: a study file would mean another search there.
    assert not requirement.specifier.contains("4.6.0")


@pytest.mark.parametrize(("sampler", "multivariate", "liar"), [
    ({"name": "tpe", "seed": 0}, True, True),
    ({"name": "tpe", "seed": 0, "multivariate": False, "constant_liar": False}, False, False),
])
def test_tpe_options_whose_default_optuna_changed_are_always_set(
        sampler: dict[str, object], multivariate: bool, liar: bool, tmp_path: Path, tiny_lm_dir: Path,
        prompts_file: Path) -> None:
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file, sampler=sampler))
    made = make_sampler(spec)
    assert isinstance(made, optuna.samplers.TPESampler)
    assert (made._multivariate, made._constant_liar) == (multivariate, liar)
    assert set(TPE_MEANING) == {"multivariate", "constant_liar"}
