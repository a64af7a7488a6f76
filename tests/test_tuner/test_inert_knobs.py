"""Searched knobs that cannot act (tuner.study.inert_knobs): a study file that searches the clip with one optimizer
step per rollout is warned before it runs, and a finished study whose clip fraction stayed 0 is told its clip search
did nothing, by run, show and the dashboard's advice."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from helpers.studies import write_study

from ppo_tune.cli import main
from tuner.study.inert_knobs import inert_findings, inert_notice, inert_searched
from tuner.study.study_file import load_study_spec

ROOT = Path(__file__).resolve().parents[2]
STORED_V7 = ROOT / "benchmarks/results/real_model_study/real_model_study_v7/study.db"
CLIP = {"cliprange": {"type": "float", "low": 0.1, "high": 0.3}}


def test_the_shipped_seventh_task_study_searches_a_clip_its_base_makes_inert() -> None:
    spec = load_study_spec(ROOT / "benchmarks/studies/smollm2_v7.yaml")
    assert inert_searched(spec.search_space, spec.base) == ["cliprange"]
    notice = inert_notice(spec.search_space, spec.base)
    assert notice is not None and notice.startswith("warning: this study searches cliprange, which cannot act here")


@pytest.mark.parametrize(("base", "space", "inert"), [
    ({"num_ppo_epochs": 1}, {}, ["cliprange"]),
    ({"num_ppo_epochs": 2}, {}, []),  # a second step on the same rollout moves the ratio
    ({"num_ppo_epochs": 1, "num_mini_batches": 2, "gradient_accumulation_steps": 2}, {}, []),
    ({"num_ppo_epochs": 1}, {"num_ppo_epochs": {"type": "int", "low": 1, "high": 4}}, []),  # some trials step twice
])
def test_the_clip_is_inert_only_where_every_trial_takes_one_optimizer_step(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, base: dict[str, int], space: dict[str, object],
        inert: list[str]) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, base=base,
                       search_space={"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3}, **CLIP, **space})
    spec = load_study_spec(path)
    assert inert_searched(spec.search_space, spec.base) == inert


def test_run_warns_before_and_says_after_that_the_clip_did_nothing(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2, base={"num_ppo_epochs": 1},
                       search_space={"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3}, **CLIP})
    assert main(["run", str(path)]) == 0
    printed = capsys.readouterr().err  # run reports on stderr, as it goes
    assert "warning: this study searches cliprange, which cannot act here" in printed
    assert "cliprange did nothing: policy/clipfrac_avg was 0 in all 16 updates of 2 trials" in printed
    # It tunes its own reward with no held-out judge, and run says what that was measured to cost.
    assert "warning: this study tunes objective/scores with no held-out judge" in printed
    assert "benchmarks/results/proxy_regret/README.md" in printed


def test_show_on_the_stored_seventh_task_study_says_its_clip_did_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "smollm2_v7", "--storage", f"sqlite:///{STORED_V7}"]) == 0
    assert "cliprange did nothing: policy/clipfrac_avg was 0 in all 521 updates of 12 trials" in capsys.readouterr().out


def test_a_clip_that_acted_once_is_no_finding() -> None:
    space = load_study_spec(ROOT / "benchmarks/studies/smollm2_v7.yaml").search_space
    metrics = pd.DataFrame({"trial_number": [0, 0, 1], "policy/clipfrac_avg": [0.0, 0.02, 0.0]})
    assert inert_findings(metrics, space) == []
    assert [f.param for f in inert_findings(metrics.assign(**{"policy/clipfrac_avg": 0.0}), space)] == ["cliprange"]
    assert inert_findings(metrics.drop(columns="policy/clipfrac_avg"), space) == []  # nothing logged: no evidence
