"""Each PPO formula against a slow, direct reference written here."""

from __future__ import annotations

import math
import random
import threading

import pytest
import torch

from ppo_core.algorithm.advantages import gae, shape_rewards, whiten_advantages
from ppo_core.algorithm.kl import AdaptiveKLController, FixedKLController, kl_per_token
from ppo_core.algorithm.kl_reach import adaptive_reach
from ppo_core.algorithm.losses import clipped_policy_loss, clipped_value_loss, entropy_from_log_probs
from ppo_core.algorithm.masked import masked_mean, masked_var, masked_whiten
from ppo_core.models.sequences import position_ids_from_mask, response_mask_after_stop


def reference_gae(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """A_t = sum_{l>=0} (gamma lam)^l delta_{t+l}, with V past the end = 0, as an explicit double sum."""
    n = len(rewards)
    deltas = [rewards[t] + gamma * (values[t + 1] if t + 1 < n else 0.0) - values[t] for t in range(n)]
    return [sum((gamma * lam) ** k * deltas[t + k] for k in range(n - t)) for t in range(n)]


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 0.95), (0.9, 0.5), (1.0, 1.0), (0.99, 0.0)])
def test_gae_matches_explicit_sums_and_ignores_padding(gamma: float, lam: float) -> None:
    torch.manual_seed(0)
    lengths = [5, 3, 1]
    rewards = torch.randn(3, 5)
    values = torch.randn(3, 5)
    mask = torch.tensor([[t < n for t in range(5)] for n in lengths])
    # Padded positions hold garbage, including NaN, which must not leak into valid ones.
    rewards[~mask] = float("nan")
    values[~mask] = 1e6
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    for row, n in enumerate(lengths):
        expected = reference_gae(rewards[row, :n].tolist(), values[row, :n].tolist(), gamma, lam)
        assert advantages[row, :n].tolist() == pytest.approx(expected, abs=1e-5)
        assert returns[row, :n].tolist() == pytest.approx(
            [a + v for a, v in zip(expected, values[row, :n].tolist(), strict=True)], abs=1e-4
        )
        assert torch.all(advantages[row, n:] == 0) and torch.all(returns[row, n:] == 0)


def test_shape_rewards_puts_score_on_last_valid_token() -> None:
    kl = torch.tensor([[0.5, 0.25, 9.0], [1.0, 9.0, 9.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    rewards, kl_rewards = shape_rewards(torch.tensor([2.0, -1.0]), kl, 0.1, mask)
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 2.0 - 0.025, 0.0], [-1.0 - 0.1, 0.0, 0.0]]))
    torch.testing.assert_close(kl_rewards, torch.tensor([[-0.05, -0.025, 0.0], [-0.1, 0.0, 0.0]]))


@pytest.mark.parametrize(
    ("ratio", "advantage", "expected_loss", "clipped"),
    [
        (1.5, 1.0, -1.2, True),  # positive advantage: gain capped at 1 + eps
        (0.5, 1.0, -0.5, False),  # positive advantage, ratio below the band: unclipped (pessimistic)
        (0.5, -1.0, 0.8, True),  # negative advantage: loss floored at 1 - eps
        (1.5, -1.0, 1.5, False),  # negative advantage, ratio above: unclipped (pessimistic)
        (1.1, 2.0, -2.2, False),  # inside the band
    ],
)
def test_clipped_policy_loss_hand_cases(ratio: float, advantage: float, expected_loss: float, clipped: bool) -> None:
    old = torch.tensor([[math.log(0.4)]])
    new = old + math.log(ratio)
    out = clipped_policy_loss(new, old, torch.tensor([[advantage]]), torch.tensor([[True]]), cliprange_low=0.2)
    assert float(out.loss) == pytest.approx(expected_loss, rel=1e-5)
    assert float(out.clipfrac) == (1.0 if clipped else 0.0)
    assert float(out.approxkl) == pytest.approx(0.5 * math.log(ratio) ** 2, rel=1e-5)


def test_clipped_policy_loss_masks_padding() -> None:
    logprobs = torch.tensor([[-1.0, float("nan")]])
    out = clipped_policy_loss(logprobs, torch.tensor([[-1.2, 0.0]]), torch.tensor([[1.0, 5.0]]),
                              torch.tensor([[True, False]]), cliprange_low=0.2)
    # ratio exp(0.2) > 1.2 with a positive advantage: clipped to 1.2; the NaN position is ignored.
    assert float(out.loss) == pytest.approx(-1.2, rel=1e-5)


def test_clipped_policy_loss_gradient_stays_finite_through_padding() -> None:
    # A padded position may hold any log-prob gap; exp(1000) overflows to inf, and inf * 0 in the backward
    # pass would be NaN unless the gap is masked before the exp.
    logprobs = torch.tensor([[-1.0, 500.0]], requires_grad=True)
    old_logprobs = torch.tensor([[-1.2, -500.0]])
    mask = torch.tensor([[True, False]])
    out = clipped_policy_loss(logprobs, old_logprobs, torch.tensor([[1.0, 1.0]]), mask, cliprange_low=0.2)
    out.loss.backward()
    assert logprobs.grad is not None and torch.isfinite(logprobs.grad).all(), logprobs.grad
    assert torch.isfinite(out.loss) and torch.isfinite(out.approxkl)
    assert float(out.ratio[0, 0].detach()) == pytest.approx(math.exp(0.2), rel=1e-6)


@pytest.mark.parametrize(
    ("value", "old_value", "target", "expected"),
    [
        (1.0, 0.0, 1.0, 0.5 * 0.8**2),  # moved 1.0 but clipped to 0.2: the clipped error is larger
        (0.1, 0.0, 1.0, 0.5 * 0.9**2),  # inside the clip range
        (-1.0, 0.0, -2.0, 0.5 * 1.8**2),
    ],
)
def test_clipped_value_loss_hand_cases(value: float, old_value: float, target: float, expected: float) -> None:
    loss, _ = clipped_value_loss(torch.tensor([[value]]), torch.tensor([[old_value]]), torch.tensor([[target]]),
                                 torch.tensor([[True]]), cliprange_value=0.2)
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def exact_kl(p: torch.Tensor, q: torch.Tensor) -> float:
    return float((p * (p / q).log()).sum())


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_approach_exact_categorical_kl(estimator: str) -> None:
    generator = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(6, generator=generator) * 0.3, dim=0)
    q = torch.softmax(torch.randn(6, generator=generator) * 0.3, dim=0)
    samples = torch.multinomial(p, 400_000, replacement=True, generator=generator)
    estimate = kl_per_token(p.log()[samples], q.log()[samples], estimator).mean()
    # k1 and k3 are unbiased; k2 is biased, but by O(KL^3), negligible for nearby distributions.
    assert float(estimate) == pytest.approx(exact_kl(p, q), rel=0.05)


def test_kl_estimators_exact_values() -> None:
    logp, logq = torch.tensor([-1.0]), torch.tensor([-1.5])
    log_ratio = -0.5
    assert float(kl_per_token(logp, logq, "k1")) == pytest.approx(0.5)
    assert float(kl_per_token(logp, logq, "k2")) == pytest.approx(0.125)
    assert float(kl_per_token(logp, logq, "k3")) == pytest.approx(math.exp(log_ratio) - 1 - log_ratio)
    assert float(kl_per_token(logp, logq, "abs")) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_per_token(logp, logq, "k9")


@pytest.mark.parametrize(("observed_kl", "direction"), [(12.0, 1), (2.0, -1), (6.0, 0)])
def test_adaptive_controller_moves_beta_toward_target(observed_kl: float, direction: int) -> None:
    controller = AdaptiveKLController(value=0.1, target=6.0, horizon=10_000)
    for _ in range(50):
        controller.update(observed_kl, n_steps=64)
    assert math.copysign(1, controller.value - 0.1) == direction or (direction == 0 and controller.value == 0.1)
    # One step follows the published rule exactly: error clipped to +-0.2.
    single = AdaptiveKLController(value=0.1, target=6.0, horizon=10_000)
    single.update(observed_kl, n_steps=64)
    error = min(max(observed_kl / 6.0 - 1, -0.2), 0.2)
    assert single.value == pytest.approx(0.1 * (1 + error * 64 / 10_000))


@pytest.mark.parametrize(("episodes", "batch", "horizon"), [(1536, 16, 512), (1536, 32, 512), (1536, 32, 10_000),
                                                          (100, 30, 50), (6144, 32, 154)])
def test_adaptive_reach_is_the_most_the_controller_moves_beta_over_a_run(episodes: int, batch: int,
                                                                         horizon: int) -> None:
    """The slow reference: the controller itself, run for the trainer's updates (ceil(E / n)) with the KL far above
    its target, then far below; the reach is the larger of the two factors, and no KL sequence moves beta further."""
    updates = math.ceil(episodes / batch)
    factors = []
    for kl in (1e6, 0.0):
        controller = AdaptiveKLController(value=1.0, target=1.0, horizon=horizon)
        for _ in range(updates):
            controller.update(kl, n_steps=batch)
        factors.append(max(controller.value, 1 / controller.value))
    assert adaptive_reach(episodes, batch, horizon) == pytest.approx(max(factors), rel=1e-12)
    rng = random.Random(episodes + batch + horizon)
    wandering = AdaptiveKLController(value=1.0, target=1.0, horizon=horizon)
    for _ in range(updates):
        wandering.update(rng.uniform(0.0, 3.0), n_steps=batch)
    assert max(wandering.value, 1 / wandering.value) <= adaptive_reach(episodes, batch, horizon)


def test_adaptive_reach_of_the_quickstart_runs_and_of_an_unbounded_step() -> None:
    # The curve tables' runs: 1,536 episodes, horizon 512, rollouts of 32 (the study file cites x1.83).
    assert adaptive_reach(1536, 32, 512) == pytest.approx(1.83, abs=0.005)
    assert adaptive_reach(1536, 32, 512) >= math.exp(0.2 * 1536 / 512)  # the small-batch limit is a lower bound
    assert adaptive_reach(100, 300, 50) == math.inf  # one step can drive beta to zero
    for bad in ((-1, 32, 512), (1536, 0, 512), (1536, 32, 0)):
        with pytest.raises(ValueError, match="adaptive_reach"):
            adaptive_reach(*bad)


def test_fixed_controller_never_moves() -> None:
    controller = FixedKLController(0.05)
    controller.update(100.0, 64)
    assert controller.value == 0.05


def test_masked_statistics_match_the_valid_subset() -> None:
    values = torch.tensor([[1.0, 2.0, float("nan")], [3.0, float("inf"), 4.0]])
    mask = torch.tensor([[True, True, False], [True, False, True]])
    valid = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert float(masked_mean(values, mask)) == pytest.approx(float(valid.mean()))
    assert float(masked_var(values, mask)) == pytest.approx(float(valid.var()))
    whitened = masked_whiten(values, mask)
    assert torch.isfinite(whitened).all()
    assert whitened[mask].tolist() == pytest.approx(((valid - valid.mean()) / valid.std()).tolist(), abs=1e-5)
    kept_mean = masked_whiten(values, mask, shift_mean=False)
    assert float(kept_mean[mask].mean()) == pytest.approx(2.5, abs=1e-5)


def test_whiten_advantages_zero_mean_unit_variance() -> None:
    advantages = torch.randn(4, 7) * 5 + 3
    mask = torch.rand(4, 7) > 0.3
    whitened = whiten_advantages(advantages, mask)
    assert float(masked_mean(whitened, mask)) == pytest.approx(0.0, abs=1e-5)
    assert float(masked_var(whitened, mask)) == pytest.approx(1.0, abs=1e-3)


def test_whitening_shares_across_ranks_equals_whitening_the_whole_batch() -> None:
    # Two "ranks" in two threads, each holding half the rows; ``total`` adds a statistic across them, as an
    # all-reduce does. The halves whitened together must equal the whole batch whitened in one place.
    values, mask = torch.randn(8, 6) * 3 + 1, torch.rand(8, 6) > 0.3
    halves = [(values[:4], mask[:4]), (values[4:], mask[4:])]
    barrier, posted = threading.Barrier(2), [torch.zeros(()), torch.zeros(())]
    results: list[torch.Tensor | None] = [None, None]

    def rank(index: int) -> None:
        def total(statistic: torch.Tensor) -> torch.Tensor:
            posted[index] = statistic
            barrier.wait()
            summed = posted[0] + posted[1]
            barrier.wait()  # nobody posts the next statistic before both have read this one
            return summed

        results[index] = masked_whiten(*halves[index], shift_mean=False, total=total)

    threads = [threading.Thread(target=rank, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    together = torch.cat([result for result in results if result is not None])
    torch.testing.assert_close(together, masked_whiten(values, mask, shift_mean=False))
    assert not torch.allclose(together, torch.cat([masked_whiten(*half, shift_mean=False) for half in halves]))


def test_entropy_matches_definition() -> None:
    logits = torch.randn(3, 11)
    p = torch.softmax(logits, dim=-1)
    expected = (-(p * p.log()).sum(-1)).tolist()
    assert entropy_from_log_probs(logits.log_softmax(-1)).tolist() == pytest.approx(expected, abs=1e-5)


def test_response_mask_stops_after_first_stop_token() -> None:
    responses = torch.tensor([[5, 1, 7, 1], [5, 6, 7, 8], [1, 4, 4, 4]])
    expected = [[True, True, False, False], [True, True, True, True], [True, False, False, False]]
    assert response_mask_after_stop(responses, 1).tolist() == expected
    assert response_mask_after_stop(responses, None).all()


def test_position_ids_start_at_zero_after_left_padding() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]
