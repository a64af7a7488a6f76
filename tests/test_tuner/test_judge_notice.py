"""What ``ppo-tune run`` and the Study page say of a study that tunes no held-out judge (tuner.study.judge_notice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.study.judge_notice import PROXY_COST, no_judge_notice
from tuner.study.spec import Objective


def own_task(lm: Path, prompts: Path, **values: Any) -> dict[str, Any]:
    return {"task": None, "sft_model_path": str(lm), "dataset_name": str(prompts),
            "reward_model_path": "reward_functions:count_letter_a", "eval_steps": 2, **values}


def test_a_study_that_tunes_a_judge_gets_no_notice(tiny_lm_dir: Path, prompts_file: Path) -> None:
    judged = own_task(tiny_lm_dir, prompts_file, judge_funcs=["judge_functions:count_letter_b"])
    assert no_judge_notice([Objective("eval/judge_score")], judged) is None
    assert no_judge_notice([Objective("eval/gold_score")], {"task": "shortest_path", "eval_steps": 2}) is None
    assert no_judge_notice([Objective("objective/gold_score")], {"task": "shortest_path"}) is None


def test_a_study_of_the_proxy_with_no_judge_is_told_what_it_tunes_and_its_measured_cost(
        tiny_lm_dir: Path, prompts_file: Path) -> None:
    line = no_judge_notice([Objective("eval/score")], own_task(tiny_lm_dir, prompts_file))
    assert line is not None and line.startswith("warning: this study tunes eval/score with no held-out judge")
    assert PROXY_COST and PROXY_COST in line
    assert "judge_funcs" in line and "\n" not in line


@pytest.mark.parametrize(("values", "judge"), [
    ({"judge_funcs": ["judge_functions:count_letter_b"]}, "eval/judge_score"),
    ({"pairwise_judge": "judge_functions:LongerWins"}, "eval/judge_win_rate"),
])
def test_a_study_of_the_proxy_whose_runs_report_a_judge_is_pointed_at_it(
        tiny_lm_dir: Path, prompts_file: Path, values: dict[str, Any], judge: str) -> None:
    line = no_judge_notice([Objective("eval/score")], own_task(tiny_lm_dir, prompts_file, **values))
    assert line is not None and line.startswith(f"note: this study tunes eval/score, not the held-out judge its "
                                                f"runs report ({judge})")


def test_the_measured_cost_quotes_the_proxy_regret_results() -> None:
    import json

    summary = json.loads((Path(__file__).parents[2] / "benchmarks" / "results" / "proxy_regret" /
                          "proxy_regret.json").read_text())["summary"]
    for task in ("text", "graph"):
        figure = summary[task]
        assert f"{figure['mean']:.3f} [{figure['ci_low']:.3f}, {figure['ci_high']:.3f}]" in PROXY_COST, task
    gain = summary["graph"]["gold_gain"]
    assert f"{gain['mean']:.3f} [{gain['ci_low']:.3f}, {gain['ci_high']:.3f}]" in PROXY_COST
    assert summary["page"] in PROXY_COST
