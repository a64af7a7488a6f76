"""Held-out judges (ppo_core.rewards.judges, ppo_core.run.judging): they score the held-out answers and nothing else,
their means are what the run reports, and bad judges get one line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import judge_functions
import pytest
import torch

from ppo_core import PPOConfig, PPOTrainer, reported_metrics
from ppo_core.config.ppo_config import ConfigError
from ppo_core.metric_names import EVAL_PREFIX, HACKING_SIGNALS, run_metrics
from ppo_core.rewards.judges import JudgeError, PairwiseJudge, win_count

JUDGES = {"judge_funcs": ["judge_functions:count_letter_b", "judge_functions:word_count"],
          "judge_weights": [1.0, 0.5], "pairwise_judge": "judge_functions:LongerWins"}


def small_config(lm: Path, prompts: Path, **overrides: object) -> PPOConfig:
    """Three updates of 8 episodes, evaluating after updates 2 and 3 on 3 prompts x 2 answers; trained on 'a'."""
    values: dict[str, object] = dict(
        task=None, sft_model_path=str(lm), dataset_name=str(prompts),
        reward_model_path="reward_functions:count_letter_a", response_length=6, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, num_ppo_epochs=1, total_episodes=24, num_sample_generations=0,
        num_eval_prompts=3, num_eval_samples=2, eval_steps=2, learning_rate=1e-3, seed=5,
    )
    values.update(overrides)
    return PPOConfig(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def judged(tiny_lm_dir: Path, prompts_file: Path) -> dict[str, Any]:
    """The same seeded run without judges and with two pointwise judges and a pairwise one, and what each judge
    was shown."""
    plain = PPOTrainer(small_config(tiny_lm_dir, prompts_file)).train().metrics
    judge_functions.clear()
    config = small_config(tiny_lm_dir, prompts_file, **JUDGES)
    trainer = PPOTrainer(config)
    metrics = trainer.train().metrics
    seen = {name: list(calls) for name, calls in judge_functions.SEEN.items()}
    return {"plain": plain, "metrics": metrics, "config": config, "seen": seen,
            "held_out": trainer.setup.eval_prompts.texts}


def test_judges_change_no_training_metric(judged: dict[str, Any]) -> None:
    # The trained reward never sees a judge: without the judges' own metrics the runs are the same, number for number.
    def training(metrics: list[dict[str, float]]) -> list[dict[str, float]]:
        return [{k: v for k, v in run_metrics(m).items() if not k.startswith(EVAL_PREFIX)} for m in metrics]

    assert training(judged["metrics"]) == training(judged["plain"])


def test_judges_see_the_held_out_answers_and_nothing_else(judged: dict[str, Any]) -> None:
    held_out = judged["held_out"]
    letters = judged["seen"]["letters"]
    assert len(letters) == 2  # one call per evaluation (updates 2 and 3), none for a training rollout
    for prompts, _, _ in letters:
        assert prompts == [text for text in held_out for _ in range(2)]  # every prompt, num_eval_samples times


def test_the_judge_score_is_the_weighted_mean_of_the_judges_scores(judged: dict[str, Any]) -> None:
    metrics = [m for m in judged["metrics"] if "eval/judge_score" in m]
    assert len(metrics) == 2
    for m, (_, _, letters), (_, _, words) in zip(metrics, judged["seen"]["letters"], judged["seen"]["length"],
                                                 strict=True):
        # A judge's None (an empty answer) leaves that judge out of the row's sum and out of its own mean.
        total = [b + 0.5 * (w or 0.0) for b, w in zip(letters, words, strict=True)]
        assert m["eval/judge_score"] == pytest.approx(sum(total) / len(total))
        assert m["eval/judge/count_letter_b"] == pytest.approx(sum(letters) / len(letters))
        scored = [w for w in words if w is not None]
        assert m["eval/judge/word_count"] == pytest.approx(sum(scored) / len(scored))


def test_the_win_rate_sets_each_answer_against_the_same_reference_answer(judged: dict[str, Any]) -> None:
    pairs = judged["seen"]["pairs"]
    assert len(pairs) == 2
    references = [[pair[1] for pair in call[1]] for call in pairs]
    assert references[0] == references[1]  # the frozen reference answers once a run
    policies = [[pair[0] for pair in call[1]] for call in pairs]
    assert policies[0] == judged["seen"]["letters"][0][1]  # the policy's held-out answers, in order
    metrics = [m for m in judged["metrics"] if "eval/judge_win_rate" in m]
    for m, (_, completions) in zip(metrics, pairs, strict=True):
        choices = [-1 if len(a) == len(b) else int(len(b) > len(a)) for a, b in completions]
        assert m["eval/judge_win_rate"] == pytest.approx(win_count(choices) / len(choices))


def test_a_judged_run_reports_exactly_the_metrics_known_before_it(judged: dict[str, Any]) -> None:
    reported = set().union(*judged["metrics"])
    assert reported == set(reported_metrics(judged["config"]))
    assert {"eval/judge_score", "eval/judge/count_letter_b", "eval/judge/word_count",
            "eval/judge_win_rate"} <= reported
    assert set(HACKING_SIGNALS) <= reported


def test_win_count_counts_an_undecided_pair_as_half() -> None:
    assert win_count([0, 1, -1, 0]) == 2.5
    assert win_count([]) == 0.0


@pytest.mark.parametrize(("values", "message"), [
    ({"judge_funcs": ["judge_functions:count_letter_b"], "eval_steps": None},
     r"judge_funcs: needs eval_steps \(a judge scores the held-out evaluations only\)"),
    ({"pairwise_judge": "judge_functions:LongerWins", "eval_steps": None}, "pairwise_judge: needs eval_steps"),
    ({"pairwise_judge": "LongerWins"}, "pairwise_judge: expected 'module:name'"),
    ({"judge_funcs": ["judge_functions:count_letter_b"], "judge_weights": [1.0, 2.0]},
     "judge_weights: 2 weights for 1 judges"),
    ({"judge_weights": [1.0]}, "judge_weights: 1 weights for 0 judges"),
])
def test_bad_judge_settings_are_one_line_config_errors(tiny_lm_dir: Path, prompts_file: Path,
                                                       values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        small_config(tiny_lm_dir, prompts_file, **values)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_module:Judge", "pairwise_judge: cannot import module 'no_such_module'"),
    ("judge_functions:count_letter_b", "is not a pairwise judge"),
])
def test_a_judge_that_cannot_load_is_one_line(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PairwiseJudge(spec)


def test_a_pairwise_judge_that_answers_badly_is_one_line() -> None:
    judge = PairwiseJudge("judge_functions:WrongLength")
    with pytest.raises(JudgeError, match=r"returned .* expected 3 choices of 0, 1 or -1$"):
        judge.choices(["p"] * 3, ["a"] * 3, ["b"] * 3)


def test_a_built_in_tasks_gold_is_its_judge(tmp_path: Path) -> None:
    config = PPOConfig(task="shortest_path_tiny", task_cache_dir=str(tmp_path), total_episodes=16,
                       per_device_train_batch_size=8, eval_steps=1, num_eval_prompts=4, num_sample_generations=0,
                       seed=0)
    assert {"eval/judge_score", "eval/gold_score"} <= reported_metrics(config)
    metrics = PPOTrainer(config).train().metrics
    for m in metrics:
        assert m["eval/judge_score"] == m["eval/gold_score"]
        assert math.isfinite(m["eval/judge_score"])
    assert torch.isfinite(torch.tensor([m["eval/entropy"] for m in metrics])).all()
