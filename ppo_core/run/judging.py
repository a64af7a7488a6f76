"""A held-out evaluation's verdicts: what the run's judges make of its answers (``ppo_core.rewards.judges``).

The pointwise judges' scores and the pairwise judge's wins are kept as sums over this process's answers, so that
the evaluation adds them over every process in one collective, as it adds the score and KL; the means are taken
from the totals.

Example::

    judging = HeldOutJudging(judges, reference_answers)
    totals = group.total(judging.sums(batch, answered, setup))
    metrics.update(judging.means(totals.tolist()))
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.metric_names import EVAL_JUDGE_SCORE, EVAL_JUDGE_WIN_RATE, judge_metric
from ppo_core.models.prompt_data import PromptSet
from ppo_core.rewards.base import RewardInputs, RewardScores
from ppo_core.rewards.judges import GoldJudge, Judges, win_count
from ppo_core.rollout.collect import Rollout, collect_samples, response_token_ids
from ppo_core.run.evaluation import EVAL_SEED_STRIDE, separate_rng
from ppo_core.setup.run_setup import RunSetup

AnswersOf = Callable[[PromptSet], list[str]]
"""The reference policy's answer to each of a batch's prompts, for a pairwise judge to set the policy's against."""


def reference_seed(seed: int, rank: int) -> int:
    """The seed of the reference policy's answers to the held-out prompts on rank r, sampled once a run for a
    pairwise judge: seed - 104729 + r, a stream no evaluation (update >= 0) draws from."""
    return seed - EVAL_SEED_STRIDE + rank


class ReferenceAnswers:
    """The reference policy's answer to each held-out prompt, sampled once a run (the reference is frozen) on a
    stream of its own, so that a pairwise judge sets every evaluation's answers against the same ones."""

    def __init__(self, config: PPOConfig, device: torch.device, rank: int) -> None:
        self.config, self.device, self.rank = config, device, rank
        self._answers: dict[tuple[str, ...], list[str]] = {}

    def answers(self, setup: RunSetup, batch: PromptSet) -> list[str]:
        key = tuple(batch.texts)
        if key not in self._answers:
            with separate_rng(self.device, reference_seed(self.config.seed, self.rank)), \
                    setup.models.reference_policy() as reference:
                scored = collect_samples(setup, batch, self.config, self.device, reference)
            self._answers[key] = scored.response_texts
        return self._answers[key]


def judge_inputs(batch: PromptSet, answered: Rollout, setup: RunSetup) -> RewardInputs:
    """A held-out rollout as a judge reads it: what a reward reads of a training rollout, the run's progress
    (``setup.trainer_state``: the updates made before the evaluation) included."""
    return RewardInputs(
        prompts=batch, completions=answered.response_texts,
        completion_ids=response_token_ids(answered.responses, answered.response_mask), queries=answered.queries,
        query_mask=answered.query_mask, responses=answered.responses, response_mask=answered.response_mask,
        has_stop=answered.has_stop, tokenizer=setup.tokenizer, trainer_state=setup.trainer_state,
    )


class HeldOutJudging:
    """Scores held-out answers with a run's judges: sums that add across processes, then their means."""

    def __init__(self, judges: Judges, reference_answers: AnswersOf | None) -> None:
        if judges.pairwise is not None and reference_answers is None:
            raise ValueError("a pairwise judge needs the reference policy's answers")
        self.judges = judges
        self.reference_answers = reference_answers

    @property
    def size(self) -> int:
        """The sums' length: [sum J, n] with pointwise judges, then [sum j_k, n_k] for each of several judges, then
        [wins, pairs] with a pairwise judge."""
        names = len(self.judges.names)
        pointwise = 2 + (2 * names if names > 1 else 0) if names else 0
        return pointwise + (2 if self.judges.pairwise is not None else 0)

    def sums(self, batch: PromptSet, answered: Rollout, setup: RunSetup) -> torch.Tensor:
        """This process's sums (layout: :attr:`size`) over its answers to ``batch``."""
        device = answered.scores.device
        parts: list[float] = []
        pointwise = self.judges.pointwise
        if pointwise is not None:
            inputs = judge_inputs(batch, answered, setup)
            scores = [_precomputed(judge, answered) or judge(inputs) for judge in pointwise.rewards]
            values = torch.stack([s.values.to(device=device, dtype=torch.float32) for s in scores], dim=1)
            scored = torch.stack([s.scored.to(device) for s in scores], dim=1)
            weights = torch.tensor(pointwise.weights, dtype=torch.float32, device=device)
            total = torch.where(scored, values * weights, torch.zeros_like(values)).sum(dim=1)
            parts += [float(total.sum()), float(len(total))]
            if len(scores) > 1:
                for k in range(len(scores)):
                    parts += [float(values[scored[:, k], k].sum()), float(scored[:, k].sum())]
        if self.judges.pairwise is not None:
            assert self.reference_answers is not None  # checked when built
            choices = self.judges.pairwise.choices(batch.texts, answered.response_texts,
                                                   self.reference_answers(batch))
            parts += [win_count(choices), float(len(choices))]
        return torch.tensor(parts, dtype=torch.float64, device=device)

    def means(self, totals: list[float]) -> dict[str, float]:
        """``eval/judge_score`` = sum_i J_i / n, J_i = sum_k w_k j_ki over the judges that scored answer i;
        ``eval/judge/<name>`` = each judge's mean over the answers it scored (with several judges);
        ``eval/judge_win_rate`` = wins / pairs."""
        means: dict[str, float] = {}
        names = self.judges.names
        at = 0
        if names:
            means[EVAL_JUDGE_SCORE] = totals[0] / totals[1] if totals[1] else float("nan")
            at = 2
            if len(names) > 1:
                for name in names:
                    total, count = totals[at], totals[at + 1]
                    means[judge_metric(name)] = total / count if count else float("nan")
                    at += 2
        if self.judges.pairwise is not None:
            wins, pairs = totals[at], totals[at + 1]
            means[EVAL_JUDGE_WIN_RATE] = wins / pairs if pairs else float("nan")
        return means


def held_out_judging(judges: Judges | None, config: PPOConfig, device: torch.device, rank: int,
                     setup: Callable[[], RunSetup]) -> HeldOutJudging | None:
    """The judging of a run's held-out evaluations, None without judges; a pairwise judge's reference answers are
    sampled from the reference of ``setup()``, the run's setup as it is when they are first needed (a TRL trial
    builds one around the policy TRL holds)."""
    if judges is None:
        return None
    reference = ReferenceAnswers(config, device, rank)
    return HeldOutJudging(judges, lambda batch: reference.answers(setup(), batch))


def _precomputed(judge: object, answered: Rollout) -> RewardScores | None:
    """A built-in task's gold as the rollout already scored it (every rollout scores gold, for the training
    metric), rather than a second pass of the same scorer over the same answers."""
    if isinstance(judge, GoldJudge) and answered.gold_scores is not None:
        return RewardScores.every_row(answered.gold_scores)
    return None
