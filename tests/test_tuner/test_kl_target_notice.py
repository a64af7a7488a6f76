"""A study whose adaptive KL controller cannot steer is told so in one line when it runs; the shipped studies, which
search a fixed coefficient, are not."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from helpers.studies import TESTS_DIR, write_study

from benchmarks.curve_table import TABLE_SPACE
from ppo_tune.cli import main
from tuner.search.kl_target_notice import reach_notice, study_reach
from tuner.study.study_file import load_study_spec

REPO = Path(__file__).resolve().parents[2]
ADAPTIVE = {"kl_control": {"type": "categorical", "choices": ["fixed", "adaptive"]},
            "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
            "kl_target": {"type": "float", "low": 3.0, "high": 12.0}}


def test_the_tables_space_cannot_steer_and_the_shipped_studies_do_not_search_a_target() -> None:
    tables = load_study_spec(TABLE_SPACE)
    reach = study_reach(tables.search_space, tables.base)
    assert reach is not None and reach[1:] == (1536, 512) and reach[0] == pytest.approx(1.83, abs=0.005)
    notice = reach_notice(tables.search_space, tables.base)
    assert notice is not None and "x1.83" in notice and "kl_horizon near 153" in notice and "\n" not in notice
    for shipped in ("quickstart", "estimators"):
        spec = load_study_spec(REPO / "studies" / f"{shipped}.yaml")
        assert "kl_target" not in spec.search_space and study_reach(spec.search_space, spec.base) is None, shipped


@pytest.mark.parametrize(("space", "base", "says"), [
    (ADAPTIVE, {"total_episodes": 64}, True),  # PPOConfig's horizon of 10,000 episodes: x1.00
    (ADAPTIVE, {"total_episodes": 64, "kl_horizon": 16}, False),  # x2.3: it steers
    ({"kl_coef": ADAPTIVE["kl_coef"]}, {"total_episodes": 64, "kl_target": 6.0}, True),  # a target set in the base
    (ADAPTIVE, {"num_train_epochs": 1}, False),  # the length depends on the dataset: not judged
])
def test_the_notice_is_given_exactly_when_an_adaptive_controller_in_use_cannot_double_its_coefficient(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, space: dict[str, Any], base: dict[str, Any],
        says: bool) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, search_space=space, base=base)
    if "total_episodes" not in base:
        import yaml

        definition = yaml.safe_load(path.read_text())
        definition["base"].pop("total_episodes")
        path.write_text(yaml.safe_dump(definition))
    spec = load_study_spec(path)
    assert (reach_notice(spec.search_space, spec.base) is not None) == says


@pytest.mark.heavy  # runs a study
def test_ppo_tune_run_prints_the_notice_once_and_still_runs(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, search_space=ADAPTIVE)
    assert main(["run", str(path), "--storage", f"sqlite:///{tmp_path / 'reach.db'}"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kl_target barely steers")]
    assert len(lines) == 1 and "kl_horizon 10000" in lines[0] and "x1.00" in lines[0], lines
