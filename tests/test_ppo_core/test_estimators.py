"""The advantage estimators (ppo_core.algorithm.estimators), the loss aggregations and asymmetric clip
(ppo_core.algorithm.losses), against direct loop-by-loop references; then whole runs of each estimator on tiny real
models."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
import torch

from ppo_core import PPOConfig, PPOTrainer, reported_metrics
from ppo_core.algorithm.advantages import discounted_returns
from ppo_core.algorithm.estimators import ESTIMATORS, AdvantageInputs, estimate_advantages
from ppo_core.algorithm.group_advantages import batch_std
from ppo_core.algorithm.losses import aggregate_loss, clipped_policy_loss
from ppo_core.config.estimator_traits import estimator_names
from ppo_core.config.ppo_config import GRPO_STD_EPSILON, ConfigError

GROUP = 3
SCORES = torch.tensor([0.2, 1.0, -0.5, 0.3, 0.3, 0.3])  # two prompts x three responses; the second group all equal
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0]]).bool()
KL = torch.tensor([[0.1, -0.2, 0.3, 9.0], [0.5, 0.1, 9.0, 9.0], [0.0, 0.2, 0.1, 0.4],
                   [0.3, 9.0, 9.0, 9.0], [0.1, 0.1, 0.1, 9.0], [0.2, 0.2, 9.0, 9.0]])  # 9.0: padding, never read
BETA = 0.1


def _inputs(values: torch.Tensor | None = None, gamma: float = 1.0, lam: float = 0.95,
            scale: str = "group") -> AdvantageInputs:
    kl_rewards = torch.where(MASK, -BETA * KL, torch.zeros_like(KL))
    return AdvantageInputs(scores=SCORES, kl_rewards=kl_rewards, values=values, response_mask=MASK, group_size=GROUP,
                           gamma=gamma, lam=lam, whiten_advantages=False, whiten_rewards=False,
                           scale_rewards=scale)  # type: ignore[arg-type]


def _lengths() -> list[int]:
    return [int(row.sum()) for row in MASK]


def _penalised_rewards() -> list[float]:
    """R_i = score_i - beta * sum_t KL_it over the response's own tokens."""
    return [float(SCORES[i]) - BETA * sum(float(KL[i, t]) for t in range(n)) for i, n in enumerate(_lengths())]


def _token_rewards(scores: list[float]) -> list[list[float]]:
    rows = []
    for i, n in enumerate(_lengths()):
        rows.append([-BETA * float(KL[i, t]) + (scores[i] if t == n - 1 else 0.0) for t in range(n)])
    return rows


def _returns_loop(rewards: list[list[float]], gamma: float) -> list[list[float]]:
    out = []
    for row in rewards:
        returns, running = [0.0] * len(row), 0.0
        for t in reversed(range(len(row))):
            running = row[t] + gamma * running
            returns[t] = running
        out.append(returns)
    return out


def _whiten_loop(rows: list[list[float]]) -> list[list[float]]:
    flat = [value for row in rows for value in row]
    mean, var = statistics.fmean(flat), statistics.variance(flat)
    return [[(value - mean) / math.sqrt(var + 1e-8) for value in row] for row in rows]


def _as_rows(tensor: torch.Tensor) -> list[list[float]]:
    return [tensor[i, :n].tolist() for i, n in enumerate(_lengths())]


def _assert_padding_zero(tensor: torch.Tensor) -> None:
    assert (tensor[~MASK] == 0).all()


# --- the math ------------------------------------------------------------------------------------


def test_every_configurable_estimator_is_registered() -> None:
    assert set(ESTIMATORS) == set(estimator_names())


def test_discounted_returns_against_a_loop() -> None:
    rewards = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    expected = _returns_loop(_as_rows(rewards), 0.9)
    got = discounted_returns(rewards, MASK, 0.9)
    assert _as_rows(got) == [pytest.approx(row, abs=1e-6) for row in expected]
    _assert_padding_zero(got)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_spreads_the_group_normalised_penalised_reward_over_each_response(scale: str) -> None:
    rewards = _penalised_rewards()
    expected = []
    for start in range(0, len(rewards), GROUP):
        group = rewards[start:start + GROUP]
        divisor = {"group": statistics.stdev(group) + GRPO_STD_EPSILON,
                   "batch": statistics.stdev(rewards) + GRPO_STD_EPSILON, "none": 1.0}[scale]
        expected += [(r - statistics.fmean(group)) / divisor for r in group]
    advantages, returns = estimate_advantages("grpo", _inputs(scale=scale))
    assert returns is None
    for row, n, value in zip(advantages, _lengths(), expected, strict=True):
        assert row[:n].tolist() == pytest.approx([value] * n, abs=1e-5)
    _assert_padding_zero(advantages)


def test_rloo_subtracts_the_other_responses_mean_penalised_reward() -> None:
    rewards = _penalised_rewards()
    expected = []
    for start in range(0, len(rewards), GROUP):
        group = rewards[start:start + GROUP]
        expected += [r - (sum(group) - r) / (GROUP - 1) for r in group]
    advantages, _ = estimate_advantages("rloo", _inputs())
    for row, n, value in zip(advantages, _lengths(), expected, strict=True):
        assert row[:n].tolist() == pytest.approx([value] * n, abs=1e-6)
    _assert_padding_zero(advantages)


@pytest.mark.parametrize("baseline", [False, True])
def test_reinforce_pp_whitens_the_token_returns_over_the_batch(baseline: bool) -> None:
    scores = SCORES.tolist()
    if baseline:  # the group's mean score subtracted before the returns
        means = [statistics.fmean(scores[s:s + GROUP]) for s in range(0, len(scores), GROUP)]
        scores = [score - means[i // GROUP] for i, score in enumerate(scores)]
    expected = _whiten_loop(_returns_loop(_token_rewards(scores), 0.9))
    name = "reinforce_pp_baseline" if baseline else "reinforce_pp"
    advantages, returns = estimate_advantages(name, _inputs(gamma=0.9))
    assert returns is None
    assert _as_rows(advantages) == [pytest.approx(row, abs=1e-5) for row in expected]
    _assert_padding_zero(advantages)


def test_gae_needs_values_and_returns_value_targets() -> None:
    with pytest.raises(ValueError, match="value network"):
        estimate_advantages("gae", _inputs())
    values = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    advantages, returns = estimate_advantages("gae", _inputs(values=values, gamma=1.0, lam=1.0))
    assert returns is not None
    # With gamma = lam = 1 the advantage is the return minus the value, and the return the token rewards' sum ahead.
    expected = _returns_loop(_token_rewards(SCORES.tolist()), 1.0)
    assert _as_rows(returns) == [pytest.approx(row, abs=1e-5) for row in expected]
    assert _as_rows(advantages) == [pytest.approx([r - v for r, v in zip(rr, vv, strict=True)], abs=1e-5)
                                    for rr, vv in zip(expected, _as_rows(values), strict=True)]


def test_batch_std_is_the_sample_standard_deviation() -> None:
    assert float(batch_std(SCORES)) == pytest.approx(statistics.stdev(SCORES.tolist()), rel=1e-6)
    assert float(batch_std(torch.tensor([2.0]))) == 0.0


@pytest.mark.parametrize("loss_type", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_loss_aggregation_against_a_loop(loss_type: str) -> None:
    per_token = torch.randn(6, 4, generator=torch.Generator().manual_seed(2))
    per_token[~MASK] = float("nan")  # padding must never be read
    rows = _as_rows(per_token)
    if loss_type == "token_mean":
        expected = statistics.fmean(value for row in rows for value in row)
    elif loss_type == "seq_mean_token_mean":
        expected = statistics.fmean(statistics.fmean(row) for row in rows)
    else:
        expected = statistics.fmean(sum(row) / 10 for row in rows)
    assert float(aggregate_loss(per_token, MASK, loss_type, max_length=10)) == pytest.approx(expected, rel=1e-5)


def test_seq_mean_weighs_every_response_alike_and_token_mean_every_token() -> None:
    # One long response with loss 1 per token, one short with loss 0: token_mean leans to the long one.
    per_token = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]]).bool()
    assert float(aggregate_loss(per_token, mask, "token_mean", 4)) == pytest.approx(0.8)
    assert float(aggregate_loss(per_token, mask, "seq_mean_token_mean", 4)) == pytest.approx(0.5)
    assert float(aggregate_loss(per_token, mask, "seq_mean_token_sum_norm", 8)) == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("ratio", "advantage", "expected_loss", "low", "high"),
    [
        (1.25, 1.0, -1.25, 0.0, 0.0),  # inside [0.8, 1.28]: DAPO's higher bound leaves it unclipped
        (1.40, 1.0, -1.28, 0.0, 1.0),  # positive advantage held at 1 + eps_high
        (0.70, -1.0, 0.8, 1.0, 0.0),  # negative advantage held at 1 - eps_low
        (1.40, -1.0, 1.4, 0.0, 0.0),  # negative advantage above the band: unclipped (pessimistic)
    ],
)
def test_asymmetric_clip_hand_cases(ratio: float, advantage: float, expected_loss: float, low: float,
                                    high: float) -> None:
    old = torch.tensor([[math.log(0.3)]])
    out = clipped_policy_loss(old + math.log(ratio), old, torch.tensor([[advantage]]), torch.tensor([[True]]),
                              cliprange_low=0.2, cliprange_high=0.28)
    assert float(out.loss) == pytest.approx(expected_loss, rel=1e-5)
    assert (float(out.clip_low), float(out.clip_high)) == (low, high)


# --- whole runs -----------------------------------------------------------------------------------


def letter_config(lm: Path, prompts: Path, **overrides: object) -> PPOConfig:
    """Three updates of 8 episodes (2 prompts x 4 responses for the group estimators), rewarded for saying 'a'."""
    values: dict[str, object] = dict(
        task=None, sft_model_path=str(lm), dataset_name=str(prompts),
        reward_model_path="reward_functions:count_letter_a", response_length=6, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, num_mini_batches=2, num_ppo_epochs=2, total_episodes=24,
        num_sample_generations=0, learning_rate=1e-3, seed=5,
    )
    values.update(overrides)
    return PPOConfig(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def estimator_runs(tiny_lm_dir: Path, prompts_file: Path) -> dict[str, tuple[PPOConfig, PPOTrainer, list]]:
    runs = {}
    for name in estimator_names():
        config = letter_config(tiny_lm_dir, prompts_file, advantage_estimator=name, cliprange_high=0.28,
                               loss_type="seq_mean_token_mean" if name == "grpo" else "token_mean")
        trainer = PPOTrainer(config)
        runs[name] = (config, trainer, trainer.train().metrics)
    return runs


@pytest.mark.parametrize("name", estimator_names())
def test_each_estimator_runs_and_reports_exactly_the_metrics_known_before_it(estimator_runs: dict,
                                                                            name: str) -> None:
    config, _, metrics = estimator_runs[name]
    assert len(metrics) == 3
    assert set().union(*metrics) == reported_metrics(config)
    assert all(math.isfinite(value) for m in metrics for value in m.values())


@pytest.mark.parametrize("name", [n for n in estimator_names() if n != "gae"])
def test_critic_free_estimators_build_no_value_network(estimator_runs: dict, name: str) -> None:
    config, trainer, metrics = estimator_runs[name]
    assert not config.uses_critic
    assert trainer.setup.models.value_model is None and trainer.optimisation.value_model is None
    assert trainer.optimisation.value_optimizer is None and len(trainer.schedulers) == 1
    assert set(trainer.parameter_counts) == {"policy"}
    assert not {"loss/value_avg", "lr_value", "val/explained_variance"} & set(metrics[-1])


def test_gae_still_trains_its_value_network(estimator_runs: dict) -> None:
    _, trainer, metrics = estimator_runs["gae"]
    assert trainer.setup.models.value_model is not None and "value" in trainer.parameter_counts
    assert metrics[-1]["val/mean_value"] != 0.0  # the zero-initialised head moved


def test_group_metrics_and_kl_placement_are_reported(estimator_runs: dict) -> None:
    _, _, grpo = estimator_runs["grpo"]
    _, _, rloo = estimator_runs["rloo"]
    assert all(m["objective/kl_in_reward"] == 0.0 and m["objective/non_score_reward"] == 0.0 for m in grpo)
    assert all(m["objective/kl_in_reward"] == 1.0 and "loss/kl_avg" not in m for m in rloo)
    for m in grpo + rloo:
        assert 0.0 <= m["objective/frac_reward_zero_std"] <= 1.0 and m["objective/reward_std"] >= 0.0


def test_kl_is_measured_and_logged_at_beta_zero(tiny_lm_dir: Path, prompts_file: Path) -> None:
    config = letter_config(tiny_lm_dir, prompts_file, advantage_estimator="grpo", beta=0.0, learning_rate=3e-3)
    metrics = PPOTrainer(config).train().metrics
    assert all(m["objective/kl_coef"] == 0.0 for m in metrics)
    # The policy moved, so its KL to the reference is positive, and it is reported though nothing penalises it.
    assert metrics[-1]["objective/kl"] > 0.0 and metrics[-1]["loss/kl_avg"] > 0.0


def test_each_prompt_is_answered_num_generations_times_in_a_row(tiny_lm_dir: Path, prompts_file: Path) -> None:
    trainer = PPOTrainer(letter_config(tiny_lm_dir, prompts_file, advantage_estimator="rloo", num_generations=4,
                                       total_episodes=8))
    texts = trainer._next_prompts().texts
    groups = [texts[start:start + 4] for start in range(0, len(texts), 4)]
    assert len(texts) == 8 and all(len(set(group)) == 1 for group in groups)
    assert groups[0][0] != groups[1][0]


@pytest.mark.parametrize(("values", "message"), [
    ({"advantage_estimator": "rloo", "num_generations": 1}, "num_generations: advantage_estimator rloo"),
    ({"advantage_estimator": "grpo", "num_generations": 3}, "num_generations: 3 must divide the rollout batch"),
    ({"cliprange_low": 1.0}, "cliprange_low: must be < 1"),
    ({"cliprange_high": 0.0}, "cliprange_high: must be > 0"),
    ({"advantage_estimator": "grpo", "beta": 0.0, "kl_target": 3.0}, "beta: must be > 0 when kl_target is set"),
    ({"advantage_estimator": "ppo"}, "advantage_estimator: expected one of"),
    ({"loss_type": "dapo"}, "loss_type: expected one of .*; TRL GRPOConfig's 'dapo' is 'token_mean' here"),
])
def test_bad_estimator_settings_are_one_line_config_errors(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        PPOConfig(**values)
    assert "\n" not in str(caught.value)



def test_num_train_epochs_passes_over_every_prompt_once_per_epoch_with_groups(tiny_lm_dir: Path,
                                                                               prompts_file: Path) -> None:
    # 64 prompts, one epoch: 64 prompts x 4 responses = 256 episodes, 32 updates of 8, not a quarter of the prompts.
    config = letter_config(tiny_lm_dir, prompts_file, advantage_estimator="rloo", num_generations=4,
                           total_episodes=None, num_train_epochs=1.0)
    trainer = PPOTrainer(config)
    prompts = len(trainer.setup.train_prompts)
    assert trainer.num_updates * config.batch_size == prompts * 4
