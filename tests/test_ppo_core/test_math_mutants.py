"""Math tests that can fail: each one kills mutants of ppo_core's math that the other math tests let through.

Every expectation comes from a slow reference written here (plain Python loops over rows and tokens, float64 inputs),
never from a number copied out of the code. The mutants come from a mutation probe and from
``python -m tools.mutation_score`` (tools/README.md, "Mutation score of ppo_core's math"); each test says
which mutant it is there for.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from ppo_core.algorithm.advantages import discounted_returns, gae, whiten_advantages, whiten_rewards
from ppo_core.algorithm.estimators import AdvantageInputs, estimate_advantages
from ppo_core.algorithm.group_advantages import (
    ScaleRewards,
    batch_std,
    group_mean_baseline,
    group_reward_stats,
    grpo_advantages,
    rloo_advantages,
)
from ppo_core.algorithm.kl import AdaptiveKLController, FixedKLController, make_kl_controller
from ppo_core.algorithm.losses import (
    StepTotals,
    aggregate_loss,
    clipped_policy_loss,
    clipped_value_loss,
    entropy_from_log_probs,
    importance_log_ratio,
)
from ppo_core.algorithm.masked import masked_var, masked_whiten
from ppo_core.config.ppo_config import GRPO_STD_EPSILON

EPS = 1e-8  # masked_whiten's epsilon under the square root
LENGTHS = [5, 2, 4, 1, 3]  # ragged responses, one of a single token
WIDTH = 6
FRACTION_TOLERANCE = 1e-6  # the diagnostics count in float32; two shares of 15 tokens differ by 1/15


# --------------------------------------------------------------------------------------------------- references


def mask_of(lengths: list[int], width: int = WIDTH) -> torch.Tensor:
    return torch.tensor([[t < n for t in range(width)] for n in lengths])


def random_batch(seed: int, lengths: list[int] = LENGTHS, width: int = WIDTH) -> torch.Tensor:
    """A float64 [B, width] batch whose padded positions hold NaN, which no valid result may read."""
    values = torch.randn(len(lengths), width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    values[~mask_of(lengths, width)] = float("nan")
    return values


def valid_rows(tensor: torch.Tensor, lengths: list[int] = LENGTHS) -> list[list[float]]:
    return [[float(tensor[i, t]) for t in range(n)] for i, n in enumerate(lengths)]


def mean_and_variance(rows: list[list[float]]) -> tuple[float, float]:
    """The mean of every value, and their sample variance (n - 1)."""
    flat = [value for row in rows for value in row]
    mean = sum(flat) / len(flat)
    return mean, sum((value - mean) ** 2 for value in flat) / (len(flat) - 1)


def whiten_loop(rows: list[list[float]], keep_mean: bool) -> list[list[float]]:
    """x <- (x - mean) / sqrt(var + eps), plus the mean back when ``keep_mean``."""
    mean, variance = mean_and_variance(rows)
    back = mean if keep_mean else 0.0
    return [[(value - mean) / math.sqrt(variance + EPS) + back for value in row] for row in rows]


def gae_loop(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """A_t = sum_{l >= 0} (gamma lam)^l delta_{t+l}, delta_t = r_t + gamma V_{t+1} - V_t, V = 0 past the end."""
    n = len(rewards)
    deltas = [rewards[t] + gamma * (values[t + 1] if t + 1 < n else 0.0) - values[t] for t in range(n)]
    return [sum((gamma * lam) ** k * deltas[t + k] for k in range(n - t)) for t in range(n)]


def token_rewards_loop(kl_rewards: list[list[float]], scores: list[float]) -> list[list[float]]:
    """r_t = kl_reward_t, plus the score on each response's last token."""
    return [[reward + (scores[i] if t == len(row) - 1 else 0.0) for t, reward in enumerate(row)]
            for i, row in enumerate(kl_rewards)]


def twice(statistic: torch.Tensor) -> torch.Tensor:
    """A ``total`` for two processes that hold the same rows: every summed statistic doubles."""
    return 2 * statistic


def assert_rows(tensor: torch.Tensor, expected: list[list[float]], lengths: list[int] = LENGTHS) -> None:
    """``tensor`` holds ``expected`` on the valid tokens and exactly 0 on the padding."""
    for i, n in enumerate(lengths):
        assert [float(tensor[i, t]) for t in range(n)] == pytest.approx(expected[i], rel=1e-9, abs=1e-12), i
        assert all(float(tensor[i, t]) == 0.0 for t in range(n, tensor.shape[1])), i


# --------------------------------------------------------------------------------------------------- estimators


def gae_inputs(whiten_advantages: bool, whiten_rewards: bool, gamma: float = 0.9,
               lam: float = 0.8) -> AdvantageInputs:
    mask = mask_of(LENGTHS)
    kl_rewards = torch.where(mask, -0.1 * random_batch(1).abs(), torch.zeros(mask.shape, dtype=torch.float64))
    scores = torch.tensor([1.5, -0.5, 0.25, 2.0, -1.0], dtype=torch.float64)
    return AdvantageInputs(scores=scores, kl_rewards=kl_rewards, values=random_batch(2), response_mask=mask,
                           group_size=1, gamma=gamma, lam=lam, whiten_advantages=whiten_advantages,
                           whiten_rewards=whiten_rewards, scale_rewards="none")


def gae_estimator_loop(inputs: AdvantageInputs) -> tuple[list[list[float]], list[list[float]]]:
    """GAE's advantages and returns, token by token: rewards (whitened keeping their mean when asked), GAE per row,
    the advantages whitened over the batch when asked; the returns are the unwhitened advantages plus V."""
    rewards = token_rewards_loop(valid_rows(inputs.kl_rewards), inputs.scores.tolist())
    if inputs.whiten_rewards:
        rewards = whiten_loop(rewards, keep_mean=True)
    assert inputs.values is not None
    values = valid_rows(inputs.values)
    advantages = [gae_loop(r, v, inputs.gamma, inputs.lam) for r, v in zip(rewards, values, strict=True)]
    returns = [[a + v for a, v in zip(ra, rv, strict=True)] for ra, rv in zip(advantages, values, strict=True)]
    if inputs.whiten_advantages:
        advantages = whiten_loop(advantages, keep_mean=False)
    return advantages, returns


@pytest.mark.parametrize("whiten_advantages", [True, False])
@pytest.mark.parametrize("whiten_rewards", [True, False])
def test_gae_estimator_whitens_what_it_is_asked_to(whiten_advantages: bool, whiten_rewards: bool) -> None:
    # Kills: gae_estimator's `if inputs.whiten_advantages:` -> `if False:` (and its whiten_rewards twin).
    inputs = gae_inputs(whiten_advantages, whiten_rewards)
    advantages, returns = estimate_advantages("gae", inputs)
    expected_advantages, expected_returns = gae_estimator_loop(inputs)
    assert returns is not None
    assert_rows(advantages, expected_advantages)
    assert_rows(returns, expected_returns)


def test_whitened_gae_advantages_have_zero_mean_and_unit_variance() -> None:
    # The property whitening is for, on the estimator's output (the reference above says the same, formula by formula).
    advantages, _ = estimate_advantages("gae", gae_inputs(whiten_advantages=True, whiten_rewards=False))
    mean, variance = mean_and_variance(valid_rows(advantages))
    assert mean == pytest.approx(0.0, abs=1e-12)
    assert variance == pytest.approx(1.0, rel=1e-6)


# --------------------------------------------------------------------------------------------------- whiten_rewards


def test_whiten_rewards_rescales_and_keeps_the_mean() -> None:
    # Kills: whiten_rewards' shift_mean=False -> True (the rewards would lose their mean).
    rewards = random_batch(3) + 2.0  # a mean far from 0, so losing it shows
    whitened = whiten_rewards(rewards, mask_of(LENGTHS))
    expected = whiten_loop(valid_rows(rewards), keep_mean=True)
    assert_rows(whitened, expected)
    mean, variance = mean_and_variance(valid_rows(whitened))
    assert mean == pytest.approx(mean_and_variance(valid_rows(rewards))[0], rel=1e-9)
    assert variance == pytest.approx(1.0, rel=1e-6)


# --------------------------------------------------------------------------------------------------- the losses


def value_loss_loop(values: list[list[float]], old: list[list[float]], returns: list[list[float]],
                    eps: float) -> tuple[float, float]:
    """L^V = 1/2 mean_t max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2), and the share of tokens whose
    clipped error is strictly the larger."""
    losses, clipped_larger = [], []
    for row_v, row_old, row_r in zip(values, old, returns, strict=True):
        for v, v_old, r in zip(row_v, row_old, row_r, strict=True):
            clipped_v = v_old + min(max(v - v_old, -eps), eps)
            unclipped_error, clipped_error = (v - r) ** 2, (clipped_v - r) ** 2
            losses.append(0.5 * max(unclipped_error, clipped_error))
            clipped_larger.append(1.0 if clipped_error > unclipped_error else 0.0)
    return sum(losses) / len(losses), sum(clipped_larger) / len(clipped_larger)


def test_clipped_value_loss_and_its_clip_fraction_against_a_loop() -> None:
    # Kills: the clip fraction's `clipped_error > unclipped_error` -> `<` (it would count the tokens where the
    # clipped error is the smaller). Old values spread wide of the new ones, so both kinds of token are present.
    values, returns = random_batch(4), random_batch(5)
    old = values + 0.6 * random_batch(6)
    mask = mask_of(LENGTHS)
    loss, clipfrac = clipped_value_loss(values, old, returns, mask, cliprange_value=0.2)
    expected_loss, expected_clipfrac = value_loss_loop(valid_rows(values), valid_rows(old), valid_rows(returns), 0.2)
    assert 0.0 < expected_clipfrac < 1.0  # the case tells '>' from '<' only with both kinds of token
    assert float(loss) == pytest.approx(expected_loss, rel=1e-12)
    assert float(clipfrac) == pytest.approx(expected_clipfrac, abs=FRACTION_TOLERANCE)


def policy_diagnostics_loop(ratios: list[list[float]], advantages: list[list[float]], low: float,
                            high: float) -> dict[str, float]:
    """Per token: the loss max(-A r, -A clip(r, 1 - low, 1 + high)) and whether the clipped term is strictly the
    larger; clip_low counts A < 0 with r < 1 - low, clip_high A > 0 with r > 1 + high. Means over the tokens."""
    rows: dict[str, list[float]] = {"loss": [], "clipfrac": [], "clip_low": [], "clip_high": []}
    for row_r, row_a in zip(ratios, advantages, strict=True):
        for r, a in zip(row_r, row_a, strict=True):
            unclipped, clipped = -a * r, -a * min(max(r, 1.0 - low), 1.0 + high)
            rows["loss"].append(max(unclipped, clipped))
            rows["clipfrac"].append(1.0 if clipped > unclipped else 0.0)
            rows["clip_low"].append(1.0 if a < 0 and r < 1.0 - low else 0.0)
            rows["clip_high"].append(1.0 if a > 0 and r > 1.0 + high else 0.0)
    return {name: sum(values) / len(values) for name, values in rows.items()}


def test_asymmetric_clip_diagnostics_count_only_their_own_side() -> None:
    # Kills: clip_low without its `(advantages < 0) &` (it would also count positive advantages below 1 - eps_low,
    # which the clip never holds: their unclipped term is the larger). Each of the four (sign of A, side of the
    # band) corners is present, twice, with a ratio well clear of the bounds.
    ratio_rows = [[0.5, 0.6, 1.5, 1.6, 1.0], [0.5, 1.5], [0.6, 1.6, 1.1, 0.95], [0.55], [1.45, 0.65, 1.2]]
    advantage_rows = [[1.0, -1.0, 1.0, -1.0, 0.5], [-2.0, 2.0], [2.0, 0.5, -0.5, 1.5], [0.75], [-0.3, -1.2, 0.2]]
    mask = mask_of(LENGTHS)
    old = random_batch(7)
    ratios = torch.ones(mask.shape, dtype=torch.float64)
    advantages = torch.full(mask.shape, float("nan"), dtype=torch.float64)
    for i, n in enumerate(LENGTHS):
        ratios[i, :n] = torch.tensor(ratio_rows[i], dtype=torch.float64)
        advantages[i, :n] = torch.tensor(advantage_rows[i], dtype=torch.float64)
    out = clipped_policy_loss(old + ratios.log(), old, advantages, mask, cliprange_low=0.2, cliprange_high=0.28,
                              loss_type="token_mean")
    expected = policy_diagnostics_loop(ratio_rows, advantage_rows, low=0.2, high=0.28)
    assert expected["clip_low"] > 0 and expected["clip_high"] > 0
    assert float(out.loss) == pytest.approx(expected["loss"], rel=1e-12)
    for name in ("clipfrac", "clip_low", "clip_high"):
        assert float(getattr(out, name)) == pytest.approx(expected[name], abs=FRACTION_TOLERANCE), name


# --------------------------------------------------------------------------------------------------- returns


def test_gae_and_returns_of_one_token_responses() -> None:
    # Kills: the loops' start `zeros_like(rewards[:, 0])` -> `rewards[:, 1]`, which fails on a one-token response
    # length (response_length 1).
    lengths = [1, 1, 0]
    rewards, values = random_batch(8, lengths, width=1), random_batch(9, lengths, width=1)
    mask = mask_of(lengths, width=1)
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    expected = [gae_loop(r, v, 0.9, 0.8) for r, v in zip(valid_rows(rewards, lengths), valid_rows(values, lengths),
                                                          strict=True)]
    assert_rows(advantages, expected, lengths)
    assert_rows(returns, [[a + v for a, v in zip(ra, rv, strict=True)] for ra, rv in
                          zip(expected, valid_rows(values, lengths), strict=True)], lengths)
    assert_rows(discounted_returns(rewards, mask, gamma=0.9), valid_rows(rewards, lengths), lengths)


# --------------------------------------------------------------------------------------------------- every process


def doubled(rows: list[list[float]]) -> list[list[float]]:
    """The rows of two processes that hold the same rows."""
    return rows + rows


def test_whitening_runs_over_every_process() -> None:
    # Kills: whiten_advantages' and whiten_rewards' `total=total` dropped (each process would whiten its own rows).
    values, mask = random_batch(10) + 1.0, mask_of(LENGTHS)
    rows = valid_rows(values)
    assert_rows(whiten_advantages(values, mask, total=twice), whiten_loop(doubled(rows), keep_mean=False)[:5])
    assert_rows(whiten_rewards(values, mask, total=twice), whiten_loop(doubled(rows), keep_mean=True)[:5])


def returns_loop(rewards: list[list[float]], gamma: float) -> list[list[float]]:
    """G_t = sum_{s >= t} gamma^(s - t) r_s, row by row."""
    return [[sum(gamma ** (s - t) * row[s] for s in range(t, len(row))) for t in range(len(row))] for row in rewards]


def group_means(values: list[float], group: int) -> list[float]:
    """Each value's group mean, groups of ``group`` consecutive values."""
    return [sum(values[i - i % group: i - i % group + group]) / group for i in range(len(values))]


def std_loop(values: list[float]) -> float:
    """sqrt(sum (x - mean)^2 / (n - 1)), 0 for one value."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((value - mean) ** 2 for value in values) / (len(values) - 1))


def test_estimators_whiten_and_scale_over_every_process() -> None:
    # Kills: `inputs.total` dropped from gae's two whitenings, from reinforce_pp's and reinforce_pp_baseline's, and
    # from GRPO's batch standard deviation (grpo_estimator's and grpo_advantages'): each would use this process's
    # rows only.
    base = gae_inputs(whiten_advantages=True, whiten_rewards=True)
    values = random_batch(2)[:4]
    inputs = AdvantageInputs(scores=base.scores[:4], kl_rewards=base.kl_rewards[:4], values=values,
                             response_mask=base.response_mask[:4], group_size=2, gamma=0.9, lam=0.8,
                             whiten_advantages=True, whiten_rewards=True, scale_rewards="batch", total=twice)
    lengths = LENGTHS[:4]
    kl_rows, scores = valid_rows(inputs.kl_rewards, lengths), inputs.scores.tolist()

    rewards = whiten_loop(doubled(token_rewards_loop(kl_rows, scores)), keep_mean=True)[:4]
    advantages = [gae_loop(r, v, 0.9, 0.8) for r, v in zip(rewards, valid_rows(values, lengths), strict=True)]
    assert_rows(estimate_advantages("gae", inputs)[0], whiten_loop(doubled(advantages), keep_mean=False)[:4], lengths)

    returns = returns_loop(token_rewards_loop(kl_rows, scores), 0.9)
    assert_rows(estimate_advantages("reinforce_pp", inputs)[0], whiten_loop(doubled(returns), keep_mean=False)[:4],
                lengths)
    centred = [score - mean for score, mean in zip(scores, group_means(scores, 2), strict=True)]
    returns = returns_loop(token_rewards_loop(kl_rows, centred), 0.9)
    assert_rows(estimate_advantages("reinforce_pp_baseline", inputs)[0],
                whiten_loop(doubled(returns), keep_mean=False)[:4], lengths)

    penalised = [score + sum(row) for score, row in zip(scores, kl_rows, strict=True)]
    spread = std_loop(penalised + penalised)
    expected = [(value - mean) / (spread + GRPO_STD_EPSILON)
                for value, mean in zip(penalised, group_means(penalised, 2), strict=True)]
    assert_rows(estimate_advantages("grpo", inputs)[0], [[value] * n for value, n in zip(expected, lengths,
                                                                                        strict=True)], lengths)
    assert float(batch_std(torch.tensor(penalised, dtype=torch.float64), twice)) == pytest.approx(spread, rel=1e-12)


def test_gae_without_values_is_refused_by_name() -> None:
    # Kills: the error's message mangled (it is what a user reads).
    inputs = gae_inputs(whiten_advantages=False, whiten_rewards=False)
    with pytest.raises(ValueError, match=r"^gae needs the value network's values$"):
        estimate_advantages("gae", dataclasses.replace(inputs, values=None))


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_sequence_rewards_take_the_kl_rewards_dtype(name: str) -> None:
    # Kills: sequence_rewards' `scores.to(kl_rewards.dtype)` -> `.to(None)`: float64 scores (a reward function's)
    # would turn the float32 run's advantages into float64.
    mask = mask_of([2, 3, 1, 2], width=3)
    inputs = AdvantageInputs(scores=torch.tensor([0.5, -1.0, 2.0, 0.25], dtype=torch.float64),
                             kl_rewards=torch.where(mask, -0.01, 0.0).float(), values=None, response_mask=mask,
                             group_size=2, gamma=1.0, lam=1.0, whiten_advantages=False, whiten_rewards=False,
                             scale_rewards="group")
    assert estimate_advantages(name, inputs)[0].dtype == torch.float32


# --------------------------------------------------------------------------------------------------- groups


def grpo_loop(scores: list[float], group: int, scale: str) -> list[float]:
    """(r_i - mean_g r) / (s + epsilon), s the group's or the batch's sample std; no division under "none"."""
    out = []
    for start in range(0, len(scores), group):
        members = scores[start: start + group]
        mean = sum(members) / group
        spread = {"group": std_loop(members), "batch": std_loop(scores)}.get(scale)
        out += [value - mean if spread is None else (value - mean) / (spread + GRPO_STD_EPSILON) for value in members]
    return out


SCORES = [0.3, -1.2, 0.8, 0.8, 2.5, -0.4]


@pytest.mark.parametrize("group", [1, 2, 3])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_for_every_group_size_against_a_loop(group: int, scale: ScaleRewards) -> None:
    # Kills: grouped refusing a group of 1 (`< 1` -> `<= 1`, `< 2`), GRPO's group std taken for G = 1 (NaN, the
    # sample std of one value) or skipped for G = 2 (`> 1` -> `>= 1`, `or True`, `> 2`), its zeros_like(None).
    scores = torch.tensor(SCORES, dtype=torch.float64)
    expected = grpo_loop(SCORES, group, scale)
    assert grpo_advantages(scores, group, scale).tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_grpo_scales_by_the_group_unless_told() -> None:
    # Kills: the default scale_rewards="group" mangled.
    assert grpo_advantages(torch.tensor(SCORES, dtype=torch.float64), 3).tolist() == pytest.approx(
        grpo_loop(SCORES, 3, "group"), rel=1e-12)


@pytest.mark.parametrize("group", [1, 2, 3])
def test_group_baselines_and_stats_for_every_group_size(group: int) -> None:
    # Kills: group_reward_stats' std for G = 1 (NaN) or skipped for G = 2, its zeros(None); RLOO refusing G = 2.
    scores = torch.tensor(SCORES, dtype=torch.float64)
    groups = [SCORES[start: start + group] for start in range(0, len(SCORES), group)]
    means = group_means(SCORES, group)
    assert group_mean_baseline(scores, group).tolist() == pytest.approx(
        [value - mean for value, mean in zip(SCORES, means, strict=True)], abs=1e-12)
    reward_std, zero_std = group_reward_stats(scores, group)
    assert reward_std == pytest.approx(sum(map(std_loop, groups)) / len(groups), rel=1e-12, abs=1e-12)
    assert zero_std == pytest.approx(sum(len(set(members)) == 1 for members in groups) / len(groups))
    if group >= 2:
        others = [(sum(SCORES[i - i % group: i - i % group + group]) - value) / (group - 1)
                  for i, value in enumerate(SCORES)]
        assert rloo_advantages(scores, group).tolist() == pytest.approx(
            [value - other for value, other in zip(SCORES, others, strict=True)], rel=1e-12, abs=1e-12)


def test_batch_std_of_two_scores_divides_by_one() -> None:
    # Kills: batch_std's `(count - 1).clamp(min=1)` -> `min=2` (two scores would be divided by 2, not n - 1 = 1).
    assert float(batch_std(torch.tensor([0.5, 2.0], dtype=torch.float64))) == pytest.approx(std_loop([0.5, 2.0]))


# --------------------------------------------------------------------------------------------------- KL controller


@pytest.mark.parametrize("target", [None, 6.0])
def test_make_kl_controller_builds_what_the_config_asks_for(target: float | None) -> None:
    # Kills: make_kl_controller's test inverted and each of its arguments dropped or replaced.
    controller = make_kl_controller(0.05, target, 10_000)
    if target is None:
        assert controller == FixedKLController(0.05)
    else:
        assert controller == AdaptiveKLController(0.05, 6.0, 10_000)


# --------------------------------------------------------------------------------------------------- masked


@pytest.mark.parametrize("lengths", [[1, 0], [1, 1], [3, 2]])
def test_masked_statistics_on_one_two_and_more_tokens(lengths: list[int]) -> None:
    # Kills: masked_var's Bessel correction applied when not asked (`and` -> `or`), on a single token (0 / 0) or
    # skipped on two (`count > 1` -> `>= 1`, `> 2`); masked_whiten's count clamped at 2 in the mean or the variance.
    values, mask = random_batch(11, lengths, width=3), mask_of(lengths, width=3)
    flat = [value for row in valid_rows(values, lengths) for value in row]
    mean = sum(flat) / len(flat)
    squares = sum((value - mean) ** 2 for value in flat)
    assert float(masked_var(values, mask, unbiased=False)) == pytest.approx(squares / len(flat), abs=1e-12)
    assert float(masked_var(values, mask)) == pytest.approx(squares / max(len(flat) - 1, 1), abs=1e-12)
    whitened = [[(value - mean) / math.sqrt(squares / max(len(flat) - 1, 1) + EPS) for value in row]
                for row in valid_rows(values, lengths)]
    assert_rows(masked_whiten(values, mask), whitened, lengths)


# --------------------------------------------------------------------------------------------------- step losses


def share_loop(per_token: list[list[float]], loss_type: str, max_length: int, step: StepTotals | None) -> float:
    """One micro-batch's share of its step's loss, from the definitions: token_mean sum / T (the step's tokens),
    bnpo the micro-batch's own token mean / K, the sequence means sum_i (...) / N (the step's responses); times the
    process count P. No ``step``: the micro-batch is the whole step, on one process."""
    tokens = [value for row in per_token for value in row]
    if step is None:
        step = StepTotals(tokens=float(len(tokens)), rows=float(len(per_token)), micro_batches=1)
    if loss_type == "bnpo":
        return sum(tokens) / len(tokens) / step.micro_batches
    if loss_type == "token_mean":
        return sum(tokens) * step.processes / step.tokens
    norm = {"seq_mean_token_mean": lambda row: len(row), "seq_mean_token_sum_norm": lambda row: max_length}[loss_type]
    return sum(sum(row) / max(norm(row), 1) for row in per_token) * step.processes / max(step.rows, 1.0)


STEP = StepTotals(tokens=40.0, rows=12.0, micro_batches=3, processes=2)


@pytest.mark.parametrize("step", [None, STEP])
@pytest.mark.parametrize("loss_type", ["token_mean", "bnpo", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_aggregations_against_a_loop(loss_type: str, step: StepTotals | None) -> None:
    # Kills: whole_step's micro_batches=1 changed (bnpo with no step), and the token_mean and sequence means dividing
    # by P instead of multiplying.
    per_token = random_batch(12)
    expected = share_loop(valid_rows(per_token), loss_type, 9, step)
    assert float(aggregate_loss(per_token, mask_of(LENGTHS), loss_type, 9, step)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("loss_type", ["seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_sequence_means_of_a_single_response(loss_type: str) -> None:
    # Kills: `max(step.rows, 1.0)` -> `max(step.rows, 2.0)` (one response would count as two).
    per_token = random_batch(13, [4], width=5)
    expected = share_loop(valid_rows(per_token, [4]), loss_type, 5, None)
    assert float(aggregate_loss(per_token, mask_of([4], width=5), loss_type, 5)) == pytest.approx(expected, rel=1e-12)


def test_unknown_settings_are_refused_by_name() -> None:
    # Kills: the two ValueErrors' messages replaced by None.
    per_token, mask = random_batch(14), mask_of(LENGTHS)
    with pytest.raises(ValueError, match=r"^loss_type: unknown aggregation 'seq_sum'$"):
        aggregate_loss(per_token, mask, "seq_sum", 6)
    with pytest.raises(ValueError, match=r"^importance_sampling_level: unknown level 'geometric'$"):
        importance_log_ratio(per_token, per_token, mask, "geometric")


def test_importance_ratio_is_per_token_unless_told() -> None:
    # Kills: the default level="token" mangled.
    logprobs, old, mask = random_batch(15), random_batch(16), mask_of(LENGTHS)
    expected = [[new - before for new, before in zip(row_new, row_old, strict=True)]
                for row_new, row_old in zip(valid_rows(logprobs), valid_rows(old), strict=True)]
    assert_rows(importance_log_ratio(logprobs, old, mask), expected)


def policy_loss_loop(ratios: list[list[float]], advantages: list[list[float]], low: float, high: float,
                     dual_clip: float | None) -> list[list[float]]:
    """l_t = max(-A r, -A clip(r, 1 - low, 1 + high)), then min(l_t, -A c) where A < 0 under a dual clip c."""
    rows = []
    for row_r, row_a in zip(ratios, advantages, strict=True):
        row = []
        for r, a in zip(row_r, row_a, strict=True):
            loss = max(-a * r, -a * min(max(r, 1.0 - low), 1.0 + high))
            row.append(min(loss, -a * dual_clip) if dual_clip is not None and a < 0 else loss)
        rows.append(row)
    return rows


@pytest.mark.parametrize("dual_clip", [None, 3.0])
@pytest.mark.parametrize(("loss_type", "max_length", "step"), [
    ("token_mean", None, None), ("seq_mean_token_sum_norm", None, None), ("seq_mean_token_sum_norm", 9, None),
    ("bnpo", None, STEP), ("seq_mean_token_sum_norm", 9, STEP)])
def test_clipped_policy_loss_against_a_loop(dual_clip: float | None, loss_type: str, max_length: int | None,
                                            step: StepTotals | None) -> None:
    # Kills: the dual clip applied to advantages in [0, 1) (`A < 0` -> `A < 1`: -A c is below any positive
    # advantage's loss); max_length ignored, or the response width used when it is given; the step not passed on.
    # Ratios from 0.2 to 5 against advantages of both signs and of every size, 0.5 among them.
    old = random_batch(17)
    log_ratios = 0.8 * random_batch(18)
    advantages = random_batch(19)
    advantages[0, :3] = torch.tensor([0.5, 0.25, -0.5], dtype=torch.float64)
    log_ratios[0, :3] = torch.tensor([1.5, -1.2, 1.6], dtype=torch.float64)
    mask = mask_of(LENGTHS)
    ratio_rows = [[math.exp(value) for value in row] for row in valid_rows(log_ratios)]
    per_token = policy_loss_loop(ratio_rows, valid_rows(advantages), 0.2, 0.28, dual_clip)
    expected = share_loop(per_token, loss_type, max_length or WIDTH, step)
    out = clipped_policy_loss(old + log_ratios, old, advantages, mask, cliprange_low=0.2, cliprange_high=0.28,
                              loss_type=loss_type, max_length=max_length, step=step, dual_clip=dual_clip)
    assert float(out.loss) == pytest.approx(expected, rel=1e-12)


def test_a_token_on_the_bound_or_with_no_advantage_is_not_held_by_the_clip() -> None:
    # Kills: clip_low's `A < 0` -> `A <= 0` and `r < 1 - eps_low` -> `<=`, clip_high's `A > 0` -> `A >= 0` and
    # `r > 1 + eps_high` -> `>=`. A zero advantage has nothing to clip, and a ratio exactly on a bound is where the
    # clip changes nothing, as clipfrac (strictly larger) says.
    ratio_rows = [[0.5, 2.0, 0.25, 4.0], [0.5, 2.0]]
    advantage_rows = [[-1.0, 1.0, 0.0, 0.0], [1.0, -1.0]]
    lengths = [4, 2]
    mask = mask_of(lengths, width=4)
    ratios = torch.ones(2, 4, dtype=torch.float64)
    advantages = torch.zeros(2, 4, dtype=torch.float64)
    for i, n in enumerate(lengths):
        ratios[i, :n] = torch.tensor(ratio_rows[i], dtype=torch.float64)
        advantages[i, :n] = torch.tensor(advantage_rows[i], dtype=torch.float64)
    old = torch.zeros(2, 4, dtype=torch.float64)
    out = clipped_policy_loss(ratios.log(), old, advantages, mask, cliprange_low=0.5, cliprange_high=1.0)
    assert out.ratio[0, :2].tolist() == [0.5, 2.0]  # exactly on the bounds 1 - 0.5 and 1 + 1.0
    expected = policy_diagnostics_loop(ratio_rows, advantage_rows, low=0.5, high=1.0)
    assert (expected["clip_low"], expected["clip_high"], expected["clipfrac"]) == (0.0, 0.0, 0.0)
    for name in ("clipfrac", "clip_low", "clip_high"):
        assert float(getattr(out, name)) == pytest.approx(expected[name], abs=FRACTION_TOLERANCE), name


@pytest.mark.parametrize("loss_type", ["token_mean", "bnpo", "seq_mean_token_mean"])
@pytest.mark.parametrize("step", [None, STEP])
def test_value_loss_is_a_token_mean_of_the_step(loss_type: str, step: StepTotals | None) -> None:
    # Kills: clipped_value_loss choosing bnpo never, always, or by a mangled name, and dropping the step. The value
    # loss is bnpo under bnpo, and the step's token mean under every other loss_type.
    values, returns = random_batch(20), random_batch(21)
    old = values + 0.6 * random_batch(22)
    rows = {name: valid_rows(tensor) for name, tensor in (("v", values), ("old", old), ("r", returns))}
    per_token = [[0.5 * max((v - r) ** 2, (v_old + min(max(v - v_old, -0.2), 0.2) - r) ** 2)
                  for v, v_old, r in zip(*row, strict=True)]
                 for row in zip(rows["v"], rows["old"], rows["r"], strict=True)]
    expected = share_loop(per_token, "bnpo" if loss_type == "bnpo" else "token_mean", 1, step)
    loss, _ = clipped_value_loss(values, old, returns, mask_of(LENGTHS), 0.2, step=step, loss_type=loss_type)
    assert float(loss) == pytest.approx(expected, rel=1e-12)


def test_entropy_sums_over_the_vocabulary_of_each_token() -> None:
    # Kills: `.sum(dim=-1)` -> `dim=+1`, which a [B, V] input cannot tell apart; the trainer's is [B, T, V].
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(23), dtype=torch.float64)
    log_probs = logits.log_softmax(dim=-1)
    expected = [[-sum(math.exp(float(log_probs[b, t, v])) * float(log_probs[b, t, v]) for v in range(5))
                 for t in range(3)] for b in range(2)]
    entropy = entropy_from_log_probs(log_probs)
    assert entropy.shape == (2, 3)
    assert entropy.tolist() == [pytest.approx(row, rel=1e-12) for row in expected]


def test_batch_std_sums_its_statistics_on_the_scores_device() -> None:
    # Kills: batch_std's count made without `device=scores.device` (on the CPU whatever the scores' device: NCCL's
    # all-reduce, the ``total`` of a multi-GPU run, takes only tensors on the GPU). The meta device stands in for one.
    devices = []

    def recording(statistic: torch.Tensor) -> torch.Tensor:
        devices.append(statistic.device)
        return statistic

    scores = torch.tensor(SCORES, dtype=torch.float64, device="meta")
    batch_std(scores, recording)
    assert devices == [scores.device] * 3
