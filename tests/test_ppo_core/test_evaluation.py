"""Held-out evaluation inside a run (ppo_core.run.evaluation), and the metrics a run reports, known before it runs
(ppo_core.setup.reported_metrics)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers.built_tasks import task_cache as built_task_cache

from ppo_core import PPOConfig, PPOTrainer, evaluation_metrics, reported_metrics
from ppo_core.algorithm.kl import kl_per_token
from ppo_core.config.io import build_config
from ppo_core.config.ppo_config import ConfigError
from ppo_core.metric_names import EVAL_PREFIX, run_metrics
from ppo_core.rollout.collect import Rollout
from ppo_core.run.callbacks import TrainerCallback
from ppo_core.run.distributed import rank_share
from ppo_core.run.evaluation import (
    evaluation_interval,
    evaluation_means,
    evaluation_sums,
    held_out_rows,
    is_evaluation_update,
    sequence_kl,
)

TINY_TASK = "shortest_path_tiny"


def small_config(lm: Path, prompts: Path, **overrides: object) -> PPOConfig:
    """Three updates of 8 episodes; with eval_steps 2 it evaluates after updates 2 and 3."""
    values: dict[str, object] = dict(
        task=None, sft_model_path=str(lm), dataset_name=str(prompts),
        reward_model_path="reward_functions:count_letter_a", response_length=6, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, num_ppo_epochs=1, total_episodes=24, num_sample_generations=1,
        num_eval_prompts=3, num_eval_samples=2, learning_rate=1e-3, seed=5,
    )
    values.update(overrides)
    return PPOConfig(**values)  # type: ignore[arg-type]


def reported_keys(metrics: list[dict[str, float]]) -> set[str]:
    return set().union(*metrics)


# --- when to evaluate ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eval_steps", "num_updates", "interval"),
    [
        (None, 10, None),
        (4.0, 10, 4),
        (1.0, 10, 1),
        (20.0, 5, 20),  # longer than the run: only the last update evaluates
        (0.25, 10, 3),  # ceil(2.5)
        (0.5, 4, 2),
        (0.01, 10, 1),  # a fraction never rounds down to "never"
    ],
)
def test_evaluation_interval(eval_steps: float | None, num_updates: int, interval: int | None) -> None:
    assert evaluation_interval(eval_steps, num_updates) == interval


@pytest.mark.parametrize(
    ("num_updates", "interval", "updates"),
    [(10, 3, [3, 6, 9, 10]), (9, 3, [3, 6, 9]), (5, 20, [5]), (4, 1, [1, 2, 3, 4]), (4, None, [])],
)
def test_every_interval_th_update_and_the_last_evaluate(num_updates: int, interval: int | None,
                                                        updates: list[int]) -> None:
    assert [u for u in range(1, num_updates + 1) if is_evaluation_update(u, num_updates, interval)] == updates


@pytest.mark.parametrize(("values", "message"), [
    ({"eval_steps": 0}, r"^eval_steps: must be > 0, got 0.0$"),
    ({"eval_steps": -1}, r"^eval_steps: must be > 0, got -1.0$"),
    ({"eval_steps": 2.5}, r"^eval_steps: must be a whole number of updates when >= 1 .*, got 2.5$"),
    ({"eval_steps": "often"}, r"^eval_steps: expected float or null, got 'often'$"),
    ({"num_eval_samples": 0}, r"^num_eval_samples: must be >= 1, got 0$"),
    ({"eval_on_start": True}, r"^eval_on_start: must be false without eval_steps .*, got True$"),
])
def test_bad_evaluation_settings_are_one_line_config_errors(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        build_config(values)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("eval_steps", [None, 0.1, 0.999, 1, 3, 10.0])
def test_good_eval_steps_are_accepted(eval_steps: float | None) -> None:
    assert build_config({"eval_steps": eval_steps}).eval_steps == eval_steps


# --- what is evaluated, and how it is averaged -----------------------------------------------


@pytest.mark.parametrize(("num_prompts", "num_samples", "world_size"), [(3, 2, 1), (3, 2, 4), (8, 4, 3), (1, 1, 2)])
def test_ranks_share_every_sample_of_every_prompt_once(num_prompts: int, num_samples: int, world_size: int) -> None:
    shares = [held_out_rows(num_prompts, num_samples, rank, world_size) for rank in range(world_size)]
    assert sorted(row for share in shares for row in share) == sorted(list(range(num_prompts)) * num_samples)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def random_rollout(rows: int, width: int, gold: bool, seed: int = 0) -> Rollout:
    """A hand-made rollout with ragged response masks; only the fields evaluation reads are meaningful."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=generator)
    mask = torch.arange(width)[None] < lengths[:, None]
    blank = torch.zeros(rows, width)
    return Rollout(
        prompts=[""] * rows, response_texts=[""] * rows, queries=blank.long(), query_mask=blank.bool(),
        responses=blank.long(), response_mask=mask, has_stop=torch.zeros(rows, dtype=torch.bool),
        logprobs=-torch.rand(rows, width, generator=generator) * 3,
        ref_logprobs=-torch.rand(rows, width, generator=generator) * 3,
        values=blank, scores=torch.randn(rows, generator=generator), reward_scores={},
        gold_scores=torch.rand(rows, generator=generator) if gold else None,
    )


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
def test_sequence_kl_against_a_loop(estimator: str) -> None:
    rollout = random_rollout(6, 5, gold=False)
    expected = []
    for i in range(6):
        log_r = [float(rollout.ref_logprobs[i, t] - rollout.logprobs[i, t]) for t in range(5)
                 if rollout.response_mask[i, t]]
        per_token = {"k1": [-x for x in log_r], "k2": [x * x / 2 for x in log_r],
                     "k3": [math.expm1(x) - x for x in log_r], "abs": [abs(x) for x in log_r]}[estimator]
        expected.append(sum(per_token))
    got = sequence_kl(rollout.logprobs, rollout.ref_logprobs, rollout.response_mask, estimator)
    torch.testing.assert_close(got, torch.tensor(expected), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("gold", [True, False])
def test_means_over_ranks_are_the_means_over_every_response(gold: bool) -> None:
    rollout = random_rollout(10, 4, gold)
    # Three ranks of uneven shares (4, 3, 3) of the 10 responses, summed as ProcessGroup.total sums them.
    shares = [rank_share(list(range(10)), rank, 3) for rank in range(3)]
    sums = sum(evaluation_sums(select(rollout, rows), "k3") for rows in shares)
    assert isinstance(sums, torch.Tensor)
    means = evaluation_means(sums.tolist(), has_gold=gold)
    lengths = rollout.response_mask.sum(dim=1).float()
    kl = (kl_per_token(rollout.logprobs, rollout.ref_logprobs, "k3") * rollout.response_mask).sum(dim=1)
    # The entropy estimate pools tokens: sum of -log pi over every response's tokens / their number.
    surprisal = -(rollout.logprobs * rollout.response_mask).sum() / rollout.response_mask.sum()
    expected = {"eval/score": rollout.scores.mean(), "eval/kl": kl.mean(), "eval/response_length": lengths.mean(),
                "eval/entropy": surprisal}
    if gold:
        assert rollout.gold_scores is not None
        expected["eval/gold_score"] = rollout.gold_scores.mean()
    assert means == pytest.approx({name: float(value) for name, value in expected.items()}, abs=1e-5)


def select(rollout: Rollout, rows: list[int]) -> Rollout:
    index = torch.tensor(rows, dtype=torch.long)
    return Rollout(
        prompts=rollout.prompts, response_texts=rollout.response_texts, queries=rollout.queries[index],
        query_mask=rollout.query_mask[index], responses=rollout.responses[index],
        response_mask=rollout.response_mask[index], has_stop=rollout.has_stop[index],
        logprobs=rollout.logprobs[index], ref_logprobs=rollout.ref_logprobs[index],
        values=rollout.values[index] if rollout.values is not None else None,
        scores=rollout.scores[index], reward_scores={},
        gold_scores=rollout.gold_scores[index] if rollout.gold_scores is not None else None,
    )


# --- whole runs ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def letter_runs(tiny_lm_dir: Path, tiny_rm_dir: Path, prompts_file: Path) -> dict[str, tuple[PPOConfig, list]]:
    """The same seeded run with and without evaluation; three rewards, two of them the same function."""
    rewards = {"reward_funcs": ["reward_functions:count_letter_a", str(tiny_rm_dir)]}
    runs = {}
    for name, eval_steps in (("plain", None), ("evaluated", 2)):
        config = small_config(tiny_lm_dir, prompts_file, eval_steps=eval_steps, **rewards)
        runs[name] = (config, PPOTrainer(config).train().metrics)
    return runs


def test_training_metrics_are_the_same_with_and_without_evaluation(letter_runs: dict) -> None:
    (_, plain), (_, evaluated) = letter_runs["plain"], letter_runs["evaluated"]
    without_eval = [{k: v for k, v in run_metrics(m).items() if not k.startswith(EVAL_PREFIX)} for m in evaluated]
    assert without_eval == [run_metrics(m) for m in plain]


def test_evaluation_is_reported_on_the_evaluation_updates_only(letter_runs: dict) -> None:
    config, metrics = letter_runs["evaluated"]
    expected = evaluation_metrics(config)
    assert expected == {"eval/score", "eval/kl", "eval/response_length", "time/eval_s", "eval/entropy",
                        "eval/distinct_2grams", "eval/repeated_3grams", "eval/at_length_limit"}
    assert [sorted(expected & set(m)) for m in metrics] == [[], sorted(expected), sorted(expected)]
    for m in metrics[1:]:
        assert all(math.isfinite(m[name]) for name in expected)
        assert 1 <= m["eval/response_length"] <= config.response_length
        assert m["time/eval_s"] > 0
        assert m["eval/entropy"] > 0  # a sampled token's surprisal under a temperature-1 policy
        assert 0 < m["eval/distinct_2grams"] <= 1 and 0 <= m["eval/repeated_3grams"] < 1
        assert 0 <= m["eval/at_length_limit"] <= 1


def test_eval_on_start_evaluates_the_untuned_policy_as_update_0(tiny_lm_dir: Path, prompts_file: Path) -> None:
    class Recorder(TrainerCallback):
        def __init__(self) -> None:
            self.updates: list[tuple[int, dict[str, float]]] = []

        def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
            self.updates.append((update, metrics))
            return None

    config = small_config(tiny_lm_dir, prompts_file, eval_steps=2, eval_on_start=True,
                          reward_funcs=["reward_functions:count_letter_a"])
    recorder = Recorder()
    result = PPOTrainer(config, callbacks=[recorder]).train()
    (first, start), *rest = recorder.updates
    assert first == 0 and start["update"] == 0.0
    assert evaluation_metrics(config) <= set(start) and start["eval/kl"] == 0.0  # the policy is its reference
    # The updates' own metrics, and what a run summarises from them, stay the updates'.
    assert [m for _, m in rest] == result.metrics and all(m["update"] >= 1 for m in result.metrics)


@pytest.mark.parametrize("name", ["plain", "evaluated"])
def test_a_run_reports_exactly_the_metrics_known_before_it(letter_runs: dict, name: str) -> None:
    config, metrics = letter_runs[name]
    assert reported_keys(metrics) == reported_metrics(config)
    rewards = {key for key in reported_metrics(config) if key.startswith("rewards/")}
    model_name = Path(config.reward_funcs[1]).name  # a reward model is named by its directory
    assert rewards == {"rewards/count_letter_a", "rewards/count_letter_a_2", f"rewards/{model_name}"}


@pytest.fixture(scope="module")
def task_cache() -> Path:
    return built_task_cache(TINY_TASK)


def test_the_tiny_task_run_reports_gold_scores_and_exactly_the_metrics_known_before_it(task_cache: Path) -> None:
    config = PPOConfig(task=TINY_TASK, task_cache_dir=str(task_cache), per_device_train_batch_size=8,
                       total_episodes=24, num_ppo_epochs=1, num_sample_generations=0, num_eval_prompts=4,
                       num_eval_samples=2, eval_steps=0.5, seed=3)  # 3 updates: evaluates after updates 2 and 3
    metrics = PPOTrainer(config).train().metrics
    assert reported_keys(metrics) == reported_metrics(config)
    assert "eval/gold_score" in evaluation_metrics(config) and "objective/gold_score" in reported_metrics(config)
    assert [bool(evaluation_metrics(config) & set(m)) for m in metrics] == [False, True, True]
    assert all(0.0 <= m["eval/gold_score"] <= 1.0 for m in metrics[1:])


def test_evaluating_the_starting_policy_changes_no_training_metric(tiny_lm_dir: Path, prompts_file: Path) -> None:
    config = small_config(tiny_lm_dir, prompts_file, eval_steps=2)
    before = PPOTrainer(config)
    start = before.evaluate(0)  # the SFT policy, as benchmarks.estimators measures it
    assert set(start) == evaluation_metrics(config)
    trained = [run_metrics(m) for m in before.train().metrics]
    assert trained == [run_metrics(m) for m in PPOTrainer(config).train().metrics]


def test_a_sample_recording_at_an_evaluated_update_shows_that_evaluations_first_answers(
        task_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # At the last update a run both evaluates and records samples of the same held-out prompts: the record is the
    # evaluation's first answer to each prompt, not a second pass. With one answer a prompt, the record's mean
    # score and gold are the evaluation's; the record before training still samples on its own.
    import ppo_core.run.trainer as trainer_module

    passes: list[int] = []
    own_pass = getattr(trainer_module, "collect_samples")  # noqa: B009 - the name the trainer calls, patched below

    def counted(*args: object, **kwargs: object) -> object:
        passes.append(1)
        return own_pass(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "collect_samples", counted)
    config = PPOConfig(task=TINY_TASK, task_cache_dir=str(task_cache), per_device_train_batch_size=8,
                       total_episodes=24, num_ppo_epochs=1, num_sample_generations=1, num_eval_prompts=4,
                       num_eval_samples=1, eval_steps=3, seed=3)  # records at 0 and 3; evaluates at 3
    result = PPOTrainer(config).train()
    assert len(passes) == 1  # the record before training
    last = [sample for sample in result.samples if sample.update == 3]
    assert len(last) == 4 and [sample.prompt_index for sample in last] == [0, 1, 2, 3]
    evaluated = result.metrics[-1]
    assert sum(sample.score for sample in last) / 4 == pytest.approx(evaluated["eval/score"], abs=1e-6)
    assert sum(sample.gold_score for sample in last) / 4 == pytest.approx(evaluated["eval/gold_score"], abs=1e-6)
