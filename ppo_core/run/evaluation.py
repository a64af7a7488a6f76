"""Held-out evaluation inside a run: every ``eval_steps`` PPO updates and after the last, the policy answers each
held-out prompt ``num_eval_samples`` times, and the mean score, gold score, KL to the reference and response length
join that update's metrics, where a tuner can optimise them, with the run's judges' verdicts (``ppo_core.run.judging``)
and the answers' signals of hacking (``ppo_core.run.hacking_signals``): judges see these answers and nothing else.

Its sampling draws from a stream of its own, so a run's training metrics are the same with and without evaluation.

Example::

    interval = evaluation_interval(config.eval_steps, num_updates)
    if is_evaluation_update(update, num_updates, interval):
        metrics.update(evaluate(rollout, setup, config, group, update))
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

import torch

from ppo_core.algorithm.kl import kl_per_token
from ppo_core.algorithm.masked import per_row_sum
from ppo_core.config.ppo_config import PPOConfig
from ppo_core.metric_names import (
    EVAL_ENTROPY,
    EVAL_GOLD_SCORE,
    EVAL_KL,
    EVAL_RESPONSE_LENGTH,
    EVAL_SCORE,
    EVAL_SECONDS,
)
from ppo_core.models.prompt_data import PromptSet
from ppo_core.rollout.collect import Rollout, Scored
from ppo_core.run.distributed import ProcessGroup, rank_share
from ppo_core.run.hacking_signals import text_signals
from ppo_core.setup.run_setup import RunSetup

# Spaces each evaluation's seed from the next; the rank is added, so ranks sample differently (a prime, as the
# sample recordings' 7919 is, so that the two families of seeds rarely meet).
EVAL_SEED_STRIDE = 104_729


class Judging(Protocol):
    """What an evaluation asks of its judges (``ppo_core.run.judging.HeldOutJudging``): sums over this rank's
    answers that add across ranks, and the metrics their totals give."""

    @property
    def size(self) -> int: ...

    def sums(self, batch: PromptSet, answered: Rollout, setup: RunSetup) -> torch.Tensor: ...

    def means(self, totals: list[float]) -> dict[str, float]: ...


def evaluation_interval(eval_steps: float | None, num_updates: int) -> int | None:
    """PPO updates between evaluations (TrainingArguments' rule for ``eval_steps``): none without eval_steps,
    eval_steps itself when it is >= 1, and a fraction f < 1 of the run's N updates otherwise, max(1, ceil(f N)).

    >>> evaluation_interval(0.25, 10), evaluation_interval(4.0, 10), evaluation_interval(None, 10)
    (3, 4, None)
    """
    if eval_steps is None:
        return None
    if eval_steps >= 1:
        return int(eval_steps)
    return max(1, math.ceil(eval_steps * num_updates))


def count_updates(config: PPOConfig, num_prompts: int) -> int:
    """PPO updates a run makes: ceil(E / B), E = total_episodes, else num_train_epochs x prompts x num_generations
    (an epoch answers every prompt G times), B the rollout batch; at least one."""
    episodes = config.total_episodes or int(config.num_train_epochs * num_prompts * config.generations_per_prompt)
    return max(1, math.ceil(episodes / config.batch_size))


def sample_interval(num_updates: int, num_sample_generations: int) -> int:
    """Updates between sample recordings: max(1, N // num_sample_generations), or 0 (none) when that is 0."""
    return max(1, num_updates // num_sample_generations) if num_sample_generations else 0


def is_evaluation_update(update: int, num_updates: int, interval: int | None) -> bool:
    """Whether update u of N (counted from 1) evaluates: u mod interval = 0, or u = N (the last always does);
    never when the interval is None."""
    return interval is not None and (update % interval == 0 or update == num_updates)


def evaluation_seed(seed: int, update: int, rank: int) -> int:
    """The seed of update u's evaluation on rank r: seed + 104729 u + r."""
    return seed + EVAL_SEED_STRIDE * update + rank


@contextmanager
def separate_rng(device: torch.device, seed: int) -> Iterator[None]:
    """Random numbers inside the block come from a stream seeded with ``seed``; the run's own streams (the CPU's
    and ``device``'s) are restored afterwards, so what the block samples cannot change what training samples."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def first_answers(rollout: Rollout, num_prompts: int, num_samples: int) -> Scored:
    """What a sample recording shows of a one-process evaluation: the first of each prompt's ``num_samples``
    answers, whose rows hold every held-out prompt in order, each ``num_samples`` times in a row
    (:func:`held_out_rows` on one rank): rows 0, S, 2S, ..."""
    rows = (torch.arange(num_prompts) * num_samples).to(rollout.scores.device)
    gold = rollout.gold_scores
    return Scored(response_texts=[rollout.response_texts[row] for row in rows.tolist()],
                  has_stop=rollout.has_stop[rows], scores=rollout.scores[rows],
                  reward_scores={name: part[rows] for name, part in rollout.reward_scores.items()},
                  gold_scores=None if gold is None else gold[rows])


def held_out_rows(num_prompts: int, num_samples: int, rank: int, world_size: int) -> list[int]:
    """This rank's share of the held-out prompts, by index, each prompt repeated ``num_samples`` times; together
    the ranks hold every sample of every prompt."""
    rows = [index for index in range(num_prompts) for _ in range(num_samples)]
    return rank_share(rows, rank, world_size)


def sequence_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                estimator: str) -> torch.Tensor:
    """KL_i = sum_t m_it k(log r_it), each response's summed per-token estimate k of KL(pi_theta || pi_ref):
    the per-response KL that ``objective/kl`` averages over a training rollout."""
    return per_row_sum(kl_per_token(logprobs, ref_logprobs, estimator), mask)


EVALUATION_SUMS = 6
"""The length of :func:`evaluation_sums`' tensor."""


def evaluation_sums(rollout: Rollout, kl_estimator: str) -> torch.Tensor:
    """[sum_i s_i, sum_i g_i, sum_i KL_i, sum_i L_i, n, sum_it -m_it log pi_it] over a rollout's n responses: s the
    score, g the gold score (0 without a gold scorer), KL_i as in ``sequence_kl``, L_i = sum_t m_it the response's
    tokens, and the last the sampled tokens' summed negative log-probability."""
    mask = rollout.response_mask
    gold = rollout.gold_scores if rollout.gold_scores is not None else torch.zeros_like(rollout.scores)
    return torch.stack([
        rollout.scores.float().sum(),
        gold.float().sum(),
        sequence_kl(rollout.logprobs, rollout.ref_logprobs, mask, kl_estimator).float().sum(),
        mask.sum().float(),
        torch.tensor(float(len(rollout.scores)), device=mask.device),
        -(rollout.logprobs.float() * mask).sum(),
    ])


def evaluation_means(sums: list[float], has_gold: bool) -> dict[str, float]:
    """Each of ``evaluation_sums``' sums, over every rank's responses, divided by their number n; the entropy
    estimate by the number of tokens, sum_it -m_it log pi_it / sum_i L_i (the sampled tokens' mean surprisal, whose
    expectation is the policy's per-token entropy)."""
    score, gold, kl, length, count, surprisal = sums
    means = {EVAL_SCORE: score / count, EVAL_KL: kl / count, EVAL_RESPONSE_LENGTH: length / count,
             EVAL_ENTROPY: surprisal / length if length else float("nan")}
    if has_gold:
        means[EVAL_GOLD_SCORE] = gold / count
    return means


def evaluate(rollout: Callable[[PromptSet], Rollout], setup: RunSetup, config: PPOConfig, group: ProcessGroup,
             update: int, seen: Callable[[Rollout], None] | None = None,
             judging: Judging | None = None) -> dict[str, float]:
    """The held-out metrics of the policy after ``update``: ``rollout`` (the run's own, with its sampling config and
    autocast) answers this rank's share of the held-out samples, and the means are over every rank's, with the
    judges' verdicts where ``judging`` is given and the signals of hacking over every rank's answers. ``seen``, when
    given, is handed this rank's rollout."""
    started = time.perf_counter()
    device = group.accelerator.device
    rows = held_out_rows(len(setup.eval_prompts), config.num_eval_samples, group.rank, group.world_size)
    # A rank with no share still joins the sums.
    sums = torch.zeros(EVALUATION_SUMS, device=device)
    verdicts = torch.zeros(judging.size if judging is not None else 0, dtype=torch.float64, device=device)
    answers: list[tuple[str, bool]] = []
    if rows:
        batch = setup.eval_prompts.select(rows)
        with separate_rng(device, evaluation_seed(config.seed, update, group.rank)):
            answered = rollout(batch)
            sums = evaluation_sums(answered, config.kl_estimator).to(device)
        if judging is not None:
            verdicts = judging.sums(batch, answered, setup).to(device)
        answers = list(zip(answered.response_texts, answered.has_stop.tolist(), strict=True))
        if seen is not None:
            seen(answered)
    means = evaluation_means(group.total(sums).cpu().tolist(), has_gold=setup.models.gold_score is not None)
    if judging is not None:
        means.update(judging.means(group.total(verdicts).cpu().tolist()))
    everyone = group.gathered(answers)
    signals = text_signals([text for text, _ in everyone], [bool(stop) for _, stop in everyone])
    means.update({name: value for name, value in signals.items() if math.isfinite(value)})  # nan: nothing to measure
    (seconds,) = group.maxima(time.perf_counter() - started)  # the slowest rank's
    return {**means, EVAL_SECONDS: seconds}
