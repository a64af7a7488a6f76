"""PPOTrainer: the PPO loop for causal language models, reading top to bottom in the algorithm's order."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType, set_seed
from transformers import PreTrainedModel, TrainerState, get_scheduler

from ppo_core.algorithm.advantages import kl_penalty
from ppo_core.algorithm.estimators import AdvantageInputs, estimate_advantages
from ppo_core.algorithm.kl import kl_per_token, make_kl_controller
from ppo_core.algorithm.update import Optimisation, UpdateTargets, ppo_update
from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.errors import NonFiniteError
from ppo_core.memory.peak import peak_memory_gib, reset_peak_memory
from ppo_core.metric_names import GUARDED_METRICS, reward_metric
from ppo_core.models.loading import LoadOptions, copy_tokenizer
from ppo_core.models.lora import ParameterCount, count_parameters, save_merged
from ppo_core.models.prompt_data import PromptSet
from ppo_core.rollout.collect import Rollout, Scored, collect_rollout, collect_samples
from ppo_core.rollout.generation_copy import generation_copy
from ppo_core.rollout.sampling_copy import reference_copy, sampling_copy
from ppo_core.rollout.shared_prompts import PromptMemo
from ppo_core.run.callbacks import SampleGeneration, TrainerCallback
from ppo_core.run.checkpoint import is_save_update, restore_checkpoint, save_checkpoint, save_interval
from ppo_core.run.distributed import ProcessGroup, check_launch, rank_share
from ppo_core.run.evaluation import (
    count_updates,
    evaluate,
    evaluation_interval,
    first_answers,
    is_evaluation_update,
    sample_interval,
    separate_rng,
)
from ppo_core.run.judging import held_out_judging
from ppo_core.run.rollout_metrics import first_non_finite, rollout_metrics
from ppo_core.run.scheduled_values import apply_schedules
from ppo_core.run.trackers import TrackerCallback, tracker_dir
from ppo_core.setup.run_precision import with_run_precision
from ppo_core.setup.run_setup import RunSetup, build_setup, run_sources


@dataclass
class TrainResult:
    metrics: list[dict[str, float]] = field(default_factory=list)
    samples: list[SampleGeneration] = field(default_factory=list)
    num_updates: int = 0
    stop_reason: str | None = None
    resumed_at: int = 0  # the update of the checkpoint the run continued from (0: it ran from the start)


class PPOTrainer:
    """Trains ``config``'s policy with PPO against its reward, reporting to ``callbacks``.

    Under ``accelerate launch`` with N processes each rank trains on its share of every global batch of
    ``batch_size`` prompts; metrics are computed over the global batch, and the callbacks run on the main process
    only (a stop one of them asks for stops every rank).

    Example::

        trainer = PPOTrainer(PPOConfig(task="shortest_path", total_episodes=1024))
        result = trainer.train()
        print(result.metrics[-1]["objective/gold_score"])
    """

    def __init__(self, config: PPOConfig, callbacks: Sequence[TrainerCallback] = ()) -> None:
        # Every model path checked and the task built once, before anything loads: the precision check reads the
        # policy's shapes from them, and so does every role's loader.
        sources = run_sources(config)
        # On a CPU a config that leaves the precision open runs in bf16 where this CPU's bf16 products are measured
        # faster (ppo_core.setup.run_precision); what each update ran in is reported under precision/*.
        config = with_run_precision(config, sources.policy_path,
                                    on_gpu=not config.use_cpu and torch.cuda.is_available())
        self.config = config
        set_seed(config.seed)
        self.accelerator = _accelerator(config, "bf16" if config.uses_bf16(_gpu_supports_bf16(config.use_cpu))
                                        else "no")
        if config.world_size != self.accelerator.num_processes:
            raise ConfigError(f"world_size: the config was built for {config.world_size} processes but this run "
                              f"has {self.accelerator.num_processes}; build it in the launched processes")
        check_launch(self.accelerator.distributed_type)
        self.group = ProcessGroup(self.accelerator)
        self.setup: RunSetup = build_setup(config, sources, self.accelerator.device)
        if self.group.world_size > 1:
            set_seed(config.seed + self.group.rank)  # the same weights everywhere, but each rank samples its own
        # Callbacks write files, trackers and studies: the main process alone runs them, on global metrics.
        self.callbacks: list[TrainerCallback] = []
        if self.group.is_main:
            self.callbacks = [*callbacks, *([TrackerCallback(self.accelerator)] if self.accelerator.log_with else [])]
        self.num_updates = count_updates(config, len(self.setup.train_prompts))
        # Every reward and judge function's trainer_state, as TRL hands its own (ppo_core.rewards.functions).
        self.state = TrainerState(max_steps=self.num_updates, is_world_process_zero=self.group.is_main,
                                  is_local_process_zero=self.accelerator.is_local_main_process)
        self.setup.trainer_state = self.state
        self.eval_interval = evaluation_interval(config.eval_steps, self.num_updates)
        self.parameter_counts: dict[str, ParameterCount] = {"policy": count_parameters(self.setup.models.policy)}
        if self.setup.models.value_model is not None:
            self.parameter_counts["value"] = count_parameters(self.setup.models.value_model)
        self._build_optimisation()
        # One controller for the coefficient in force: kl_coef in the reward, or beta in the loss.
        self.kl_controller = make_kl_controller(config.kl_coefficient, config.kl_target, config.kl_horizon)
        self.prompt_generator = torch.Generator().manual_seed(config.seed)
        self.shuffle_generator = torch.Generator().manual_seed(config.seed + 1)
        self.prompt_order: list[int] = []
        self._non_finite_rewards: list[str] = []  # the latest rollout's rewards that returned NaN or infinity
        self.episode = 0

    def _build_optimisation(self) -> None:
        c = self.config
        models = self.setup.models
        policy_optimizer = _adamw(models.policy, c.learning_rate, c)
        value_optimizer = _adamw(models.value_model, c.effective_value_learning_rate, c) \
            if models.value_model is not None else None
        warmup = c.warmup_steps or math.ceil(c.warmup_ratio * self.num_updates)
        schedule = "constant_with_warmup" if c.lr_scheduler_type == "constant" else c.lr_scheduler_type
        self.schedulers = [
            get_scheduler(schedule, optimizer, num_warmup_steps=warmup, num_training_steps=self.num_updates)
            for optimizer in (policy_optimizer, value_optimizer) if optimizer is not None
        ]
        if models.value_model is not None and value_optimizer is not None:
            policy, value_model, policy_optimizer, value_optimizer = self.accelerator.prepare(
                models.policy, models.value_model, policy_optimizer, value_optimizer
            )
            models.value_model = self.accelerator.unwrap_model(value_model)
        else:
            policy, policy_optimizer = self.accelerator.prepare(models.policy, policy_optimizer)
            value_model = None
        # The rollout runs the unwrapped models (a wrapped one would wait for the other ranks at every forward);
        # the update uses the prepared ones, whose gradients are averaged over the ranks.
        models.policy = self.accelerator.unwrap_model(policy)
        self.optimisation = Optimisation(self.accelerator, policy, value_model, policy_optimizer, value_optimizer)
        self.generation_copy = generation_copy(c, models.policy, self.accelerator.device)
        self.sampling_copy = sampling_copy(c, models.policy, self.accelerator.device) \
            if self.generation_copy is None else None
        # A held-out evaluation steps the reference beside the sampling copy, both made alike (CPU only).
        self.reference_copy = reference_copy(c, models.policy, models.reference, self.sampling_copy) \
            if self.eval_interval is not None else None
        # The held-out prompts come again at every evaluation, and the reference is frozen: its pass over them
        # is made once a run.
        self._held_out_reference = PromptMemo()
        self.judging = held_out_judging(self.setup.judges, c, self.accelerator.device, self.group.rank,
                                        lambda: self.setup)
        self._answers: tuple[int, Scored] | None = None  # the last evaluation's first answers, for a sample recording

    def train(self, resume_from_checkpoint: str | Path | None = None, stop_after: int | None = None) -> TrainResult:
        """Run every PPO update, or until a callback asks to stop, evaluating on the held-out prompts where
        ``eval_steps`` says and writing a checkpoint where ``save_steps`` says; raises NonFiniteError on divergence.
        From a checkpoint (``resume_from_checkpoint``, else the config's) it makes the updates after the
        checkpoint's, as the run that wrote it would have made them (ppo_core.run.checkpoint).

        ``stop_after``: make the updates up to that one only, as a segment of the whole run (its horizon, schedulers
        and evaluations stay the whole run's), with a checkpoint after it where ``save_steps`` is set and the samples
        recorded there; another trainer continues from that checkpoint. ValueError unless 1 <= stop_after <=
        num_updates and past the checkpoint resumed."""
        if stop_after is not None and not 1 <= stop_after <= self.num_updates:
            raise ValueError(f"stop_after: must be in [1, {self.num_updates}] (the run's updates), got {stop_after}")
        result = TrainResult()
        result.resumed_at = resumed_at = self._resume(resume_from_checkpoint or self.config.resume_from_checkpoint)
        last = self.num_updates if stop_after is None else stop_after
        if stop_after is not None and stop_after <= resumed_at:
            raise ValueError(f"stop_after: must be past the checkpoint's update {resumed_at}, got {stop_after}")
        for callback in self.callbacks:
            callback.on_train_begin(self.config, self.num_updates)
        sample_every = sample_interval(self.num_updates, self.config.num_sample_generations)
        if sample_every and self.group.is_main and not resumed_at:
            self._record_samples(0, result)
        if self.config.eval_on_start and self.eval_interval is not None and not resumed_at:
            # To the callbacks (the metrics file, trackers, a tuner trial's store), not among the updates' metrics.
            start = {"update": 0.0, "episode": 0.0, **self.evaluate(0)}
            for callback in self.callbacks:
                callback.on_update(0, start)  # the untuned policy: nothing to stop yet
        save_every = save_interval(self.config, self.num_updates)
        for update in range(resumed_at + 1, last + 1):
            metrics = self.step(update)
            if is_evaluation_update(update, self.num_updates, self.eval_interval):
                metrics.update(evaluate(self._held_out_rollout, self.setup, self.config, self.group, update,
                                        seen=functools.partial(self._keep_answers, update), judging=self.judging))
            result.metrics.append(metrics)
            result.num_updates = update
            stop_reason = None
            for callback in self.callbacks:
                stop_reason = callback.on_update(update, metrics) or stop_reason
            stop_reason = self.group.from_main(stop_reason)
            bad_metric = first_non_finite(metrics, GUARDED_METRICS)
            if bad_metric is not None:
                # A non-finite score came from a reward, not from the optimisation: say which one.
                culprits = f" ({'; '.join(self._non_finite_rewards)})" \
                    if bad_metric == "objective/scores" and self._non_finite_rewards else ""
                raise NonFiniteError(f"{bad_metric} is {metrics[bad_metric]} at update {update}{culprits}")
            if sample_every and self.group.is_main and \
                    (update % sample_every == 0 or update == last or stop_reason):
                self._record_samples(update, result)
            # Once the update's records are written; a segment's end too, for the next segment to continue from.
            if is_save_update(update, self.num_updates, save_every) or (update == last and save_every is not None):
                save_checkpoint(self, update)
            if stop_reason:
                result.stop_reason = stop_reason
                break
        for callback in self.callbacks:
            callback.on_train_end(result.num_updates, result.stop_reason)
        return result

    def step(self, update: int) -> dict[str, float]:
        """One PPO update: rollout, the KL penalty where it goes, advantages by the config's estimator, then the
        clipped-objective optimisation."""
        c = self.config
        # The schedules' values for this update, before its rollout: the KL penalty of this update uses them.
        apply_schedules(c, self.schedulers, self.kl_controller, update)
        started = time.perf_counter()
        reset_peak_memory(self.accelerator.device)
        self.state.global_step = update - 1  # the rewards score this rollout before the update
        rollout = self._rollout(self._next_prompts())
        self._non_finite_rewards = list(self.setup.models.rewards.non_finite)  # before an evaluation scores again
        # KL to the reference is measured whatever its placement, so a run with beta = 0 still reports it; where
        # the update's forward supplies the policy's log-probabilities, once it has run (KL is then not in the
        # reward, so nothing before the update reads it).
        pending = rollout.logprobs_pending
        kl = torch.zeros_like(rollout.ref_logprobs) if pending else \
            kl_per_token(rollout.logprobs, rollout.ref_logprobs, c.kl_estimator)
        kl_coefficient = self.kl_controller.value  # in force: kl_coef in the reward, beta in the loss
        in_reward = c.kl_penalty_in_reward
        # -kl_coef KL_t per token when KL is in the reward (TRL's non_score_reward), else zeros.
        kl_rewards = kl_penalty(kl, kl_coefficient if in_reward else 0.0, rollout.response_mask)
        total = self.group.total  # whitening and averages over the global batch, not this rank's share
        advantages, returns = estimate_advantages(c.advantage_estimator, AdvantageInputs(
            scores=rollout.scores, kl_rewards=kl_rewards, values=rollout.values,
            response_mask=rollout.response_mask, group_size=c.generations_per_prompt, gamma=c.gamma, lam=c.lam,
            whiten_advantages=c.whiten_advantages, whiten_rewards=c.whiten_rewards, scale_rewards=c.scale_rewards,
            scale_rewards_epsilon=c.scale_rewards_epsilon, total=total,
        ))
        rollout_seconds = time.perf_counter() - started

        lrs = [scheduler.get_last_lr()[0] for scheduler in self.schedulers]
        targets = UpdateTargets(advantages, returns, None if in_reward else kl_coefficient)
        update_stats = ppo_update(rollout, targets, self.optimisation, c, self.shuffle_generator, total,
                                  self.setup.generation_config.max_new_tokens)
        self.state.global_step = update  # an evaluation or sample recording from here on comes after it
        if pending:
            kl = kl_per_token(rollout.logprobs, rollout.ref_logprobs, c.kl_estimator)
        for copy in (self.generation_copy, self.sampling_copy):  # the next rollout samples the policy as it now is
            if copy is not None:
                copy.refresh()
        for scheduler in self.schedulers:
            scheduler.step()
        self.episode += c.batch_size
        # kl_rewards feed TRL's metric objective/non_score_reward (rollout_metrics), whose name stays TRL's.
        per_token = [kl, kl_rewards] + ([returns] if returns is not None else [])
        seen, gathered = self.group.global_rollout(rollout, *per_token)
        metrics = rollout_metrics(seen, gathered[0], gathered[1], gathered[2] if returns is not None else None,
                                  c.generations_per_prompt)
        if len(seen.reward_scores) > 1:  # with one reward, objective/scores already says it
            metrics.update({reward_metric(name): float(part.nanmean()) for name, part in seen.reward_scores.items()})
        self.kl_controller.update(metrics["objective/kl"], c.batch_size)  # every rank steps alike, on global KL
        # The slowest rank's times and the fullest rank's memory.
        rollout_seconds, update_seconds, peak_gib = self.group.maxima(
            rollout_seconds, time.perf_counter() - started - rollout_seconds, peak_memory_gib(self.accelerator.device))
        return {
            "update": float(update),
            "episode": float(self.episode),
            **metrics,
            **update_stats,
            "objective/kl_coef": kl_coefficient,  # TRL's metric name, for the coefficient in force
            "objective/kl_in_reward": float(in_reward),
            "lr": lrs[0],
            **({"lr_value": lrs[1]} if len(lrs) > 1 else {}),
            "time/rollout_s": rollout_seconds,
            "time/update_s": update_seconds,
            "time/tokens_per_s": seen.num_response_tokens / max(rollout_seconds + update_seconds, 1e-9),
            "precision/sampling_bf16": float(self._sampler().dtype == torch.bfloat16),
            "precision/autocast_bf16": float(self.accelerator.mixed_precision == "bf16"),
            # Which code computed the sampled tokens' logits: the copy's fused decoder, or a model's own forward.
            "precision/sampling_fused": float(getattr(self.sampling_copy, "decoder", None) is not None),
            "memory/peak_gib": peak_gib,
        }

    def _resume(self, checkpoint: str | Path | None) -> int:
        """The update the run continues after: the checkpoint's, once restored into this trainer, or 0 without one.
        The main process's checkpoint holds on every rank."""
        chosen = self.group.from_main(str(checkpoint) if checkpoint else None)
        self.state.global_step = restore_checkpoint(self, Path(chosen)) if chosen else 0
        return self.state.global_step

    def evaluate(self, update: int) -> dict[str, float]:
        """The held-out evaluation's metrics (``eval/*``) for the policy as it is now, sampled on the stream
        ``update`` names; ``evaluate(0)`` before ``train()`` measures the starting (SFT) policy. The training RNG
        is untouched."""
        return evaluate(self._held_out_rollout, self.setup, self.config, self.group, update, judging=self.judging)

    def save_model(self, path: str | Path) -> Path:
        """Save the policy and its tokenizer with ``save_pretrained``: a model AutoModelForCausalLM loads, or under
        use_peft the adapter alone, which ``peft.AutoPeftModelForCausalLM`` loads onto its base."""
        directory = Path(path)
        self.accelerator.wait_for_everyone()
        if self.group.is_main:
            policy = self.accelerator.unwrap_model(self.optimisation.policy)
            policy.save_pretrained(directory)
            copy_tokenizer(self.setup.policy_path, LoadOptions.from_config(self.config), directory)
        return directory

    def save_merged_model(self, adapter_dir: str | Path, path: str | Path) -> Path:
        """The adapter saved by ``save_model`` merged into a fresh copy of its base: a plain model, no peft needed."""
        options = LoadOptions.from_config(self.config)
        directory = save_merged(self.setup.policy_path, Path(adapter_dir), options, Path(path))
        copy_tokenizer(self.setup.policy_path, options, directory)
        return directory

    def _sampler(self) -> PreTrainedModel:
        """What the rollout samples responses from: a copy of the policy where the run keeps one, else the policy."""
        for copy in (self.generation_copy, self.sampling_copy):
            if copy is not None:
                return copy.model
        return self.setup.models.policy

    def _rollout(self, batch: PromptSet) -> Rollout:
        with self.accelerator.autocast():
            return collect_rollout(self.setup, batch, self.config, self.accelerator.device, self._sampler())

    def _held_out_rollout(self, batch: PromptSet) -> Rollout:
        with self.accelerator.autocast():
            return collect_rollout(self.setup, batch, self.config, self.accelerator.device, self._sampler(),
                                   for_update=False, reference_memo=self._held_out_reference,
                                   reference_sampler=None if self.reference_copy is None else self.reference_copy.model)

    def _next_prompts(self) -> PromptSet:
        """This rank's share of the next global batch: batch_size / G prompts, each repeated G times in a row (one
        group per prompt), reshuffling whenever an epoch over the prompts runs out. Every rank draws the same global
        batch (the same seeded order), then keeps its own rows, whole groups since G divides its share."""
        prompts = self.setup.train_prompts
        generations = self.config.generations_per_prompt
        rows: list[int] = []
        while len(rows) < self.config.batch_size:
            if not self.prompt_order:
                self.prompt_order = torch.randperm(len(prompts), generator=self.prompt_generator).tolist()
            rows.extend([self.prompt_order.pop()] * generations)
        return prompts.select(rank_share(rows, self.group.rank, self.group.world_size))

    def _keep_answers(self, update: int, answered: Rollout) -> None:
        """Keep what a sample recording at ``update`` would show, from the evaluation just made there: one process
        holds every held-out prompt's answers (a rank's share does not)."""
        if self.group.world_size == 1:
            self._answers = (update, first_answers(answered, len(self.setup.eval_prompts),
                                                   self.config.num_eval_samples))

    def _record_samples(self, update: int, result: TrainResult) -> None:
        prompts = self.setup.eval_prompts
        if self._answers is not None and self._answers[0] == update:
            # The policy answered every held-out prompt at this update already: its first answers are the record,
            # not a second pass over the same prompts.
            scored = self._answers[1]
        else:
            # A separate seeded stream keeps the training RNG, and so the metrics, independent of sampling here.
            with separate_rng(self.accelerator.device, self.config.seed + 7919 * (update + 1)), \
                    self.accelerator.autocast():
                scored = collect_samples(self.setup, prompts, self.config, self.accelerator.device, self._sampler())
        gold = scored.gold_scores.tolist() if scored.gold_scores is not None else [None] * len(prompts)
        samples = [
            SampleGeneration(update, self.episode, index, prompt, response, float(score), gold_value)
            for index, (prompt, response, score, gold_value) in enumerate(
                zip(prompts.texts, scored.response_texts, scored.scores.tolist(), gold, strict=True)
            )
        ]
        result.samples.extend(samples)
        for callback in self.callbacks:
            callback.on_samples(update, samples)


def _adamw(model: torch.nn.Module, learning_rate: float, config: PPOConfig) -> torch.optim.AdamW:
    """AdamW with the fused kernel (one kernel for all parameters: 3-4x faster steps, the same math)."""
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]  # a LoRA base is frozen
    return torch.optim.AdamW(
        trainable, lr=learning_rate, eps=config.adam_epsilon, weight_decay=config.weight_decay, fused=True
    )


def _accelerator(config: PPOConfig, mixed_precision: str) -> Accelerator:
    """An Accelerator with this precision, device and the config's trackers, even when an earlier trainer in this
    process chose another precision or device.

    accelerate keeps one precision and one device per process: it refuses a second precision and ``cpu=True``
    after a GPU run, and silently keeps the CPU for a GPU run after a ``use_cpu`` one. A notebook or a tuner worker
    builds one trainer after another, so the precision part of its state is cleared (the process group is kept), and
    in a single process, where there is no process group to keep, a change of device clears the whole state.
    """
    # Several processes on a machine without GPUs share the work over gloo, which accelerate sets up only when told
    # the run is on the CPU.
    cpu = config.use_cpu or (config.world_size > 1 and not torch.cuda.is_available())
    partial = PartialState._shared_state
    if partial and partial.get("_cpu") != cpu and partial.get("distributed_type") == DistributedType.NO:
        AcceleratorState._reset_state(reset_partial_state=True)
    elif AcceleratorState._shared_state and AcceleratorState().mixed_precision != mixed_precision:
        AcceleratorState._reset_state(reset_partial_state=False)
    trackers = [name for name in config.report_to if name != "none"]
    return Accelerator(cpu=cpu, mixed_precision=mixed_precision, log_with=trackers or None,
                       project_dir=tracker_dir(config) if trackers else None)


def _gpu_supports_bf16(use_cpu: bool) -> bool:
    return not use_cpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported()


__all__ = ["PPOTrainer", "TrainResult"]
