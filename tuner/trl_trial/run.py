"""One trial in TRL's own trainer: the model, prompts and rewards a ppo_core trial of the same config loads, TRL's
GRPOTrainer or RLOOTrainer built from the trial's export (:mod:`tuner.trl_trial.arguments`), and ppo-tune's
callbacks fed once per PPO update (:mod:`tuner.trl_trial.bridge`). A config's learning-rate and KL-coefficient
schedules run in TRL's trainer as a callback (:mod:`tuner.trl_trial.schedule_callback`), counting updates as the
bridge does: one generation each.

KL to the reference is measured at each held-out evaluation whatever beta is: under LoRA against the policy with its
adapter off (no copy), else against a frozen copy of the starting model that the trial loads for the evaluation
alone when TRL holds none (beta 0), which costs one more copy of the policy's weights in memory and a no-grad forward
of the held-out responses per evaluation.

Example::

    run_trl_trial("trl-grpo", build_config({"task": "shortest_path", "advantage_estimator": "grpo",
                                            "total_episodes": 256}), [reporter])
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from datasets import Dataset
from transformers import PrinterCallback, ProgressCallback

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.models.loading import load_causal_lm
from ppo_core.models.paths import is_function_spec
from ppo_core.rewards.base import RewardInputs
from ppo_core.rewards.functions import FunctionReward
from ppo_core.rollout.collect import collect_rollout, collect_samples, decode_responses, encode_prompts
from ppo_core.run.callbacks import SampleGeneration
from ppo_core.run.callbacks import TrainerCallback as UpdateCallback
from ppo_core.run.distributed import ProcessGroup
from ppo_core.run.evaluation import count_updates, evaluate, separate_rng
from ppo_core.run.judging import held_out_judging
from ppo_core.setup.run_setup import RolloutModels, RunParts, load_run_parts, run_sources
from tuner.exports._common import optimizer_steps_per_update
from tuner.trl_trial.arguments import TRL_TRAINERS, TrialArguments, trial_arguments
from tuner.trl_trial.bridge import UpdateBridge
from tuner.trl_trial.schedule_callback import ScheduleCallback

# The dataset column that carries each prompt's row, so a reward knows which prompts TRL handed it.
ROW_COLUMN = "ppo_tune_row"
# Seeds of sample recordings, as ppo_core's trainer spaces them: seed + 7919 (update + 1).
SAMPLE_SEED_STRIDE = 7919


class PromptSetReward:
    """A GRPO-style reward function over ppo_core's rewards (a built-in task's proxy reward model): TRL passes the
    prompts' rows and the completion ids, and the scores are what a ppo_core rollout of the same text gets."""

    def __init__(self, parts: RunParts, config: PPOConfig, name: str) -> None:
        self.parts, self.config, self.__name__ = parts, config, name
        self.gold: list[float] = []  # the task's gold score of each response scored since the last take_gold()

    def take_gold(self) -> tuple[float, int]:
        """The sum and number of the gold scores of the responses this process scored since the last call (one
        update's share)."""
        gold, self.gold = self.gold, []
        return sum(gold), len(gold)

    def __call__(self, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]],
                 **columns: Any) -> list[float]:
        parts, tokenizer = self.parts, self.parts.tokenizer
        batch = parts.train_prompts.select(columns[ROW_COLUMN])
        encoded = encode_prompts(tokenizer, batch, self.config.max_prompt_length)
        width = max(1, max(len(ids) for ids in completion_ids))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        responses = torch.tensor([ids + [pad] * (width - len(ids)) for ids in completion_ids])
        response_mask = torch.tensor([[True] * len(ids) + [False] * (width - len(ids)) for ids in completion_ids])
        has_stop = torch.tensor([bool(ids) and ids[-1] == parts.stop_token_id for ids in completion_ids])
        texts = decode_responses(tokenizer, completion_ids)
        if parts.gold_score is not None:
            self.gold.extend(parts.gold_score(batch.texts, texts))
        scores, _ = parts.rewards(RewardInputs(
            prompts=batch, completions=texts, completion_ids=completion_ids,
            queries=encoded["input_ids"], query_mask=encoded["attention_mask"], responses=responses,
            response_mask=response_mask, has_stop=has_stop, tokenizer=tokenizer,
        ))
        return [float(score) for score in scores]


def training_gold(reward: PromptSetReward, group: ProcessGroup) -> Callable[[], float | None]:
    """The mean gold score of the update's training responses over every process (each scores its own share), or
    None without any: what a ppo_core run reports as objective/gold_score. Collective: every process calls it."""
    def mean() -> float | None:
        total, count = reward.take_gold()
        if group.world_size > 1:
            total, count = group.total(torch.tensor([total, count], dtype=torch.float64,
                                                    device=group.accelerator.device)).tolist()
        return total / count if count else None

    return mean


def trl_reward_funcs(parts: RunParts, config: PPOConfig) -> list[Any]:
    """What TRL's trainer scores with: the config's reward models by path (TRL loads them, as ``trl grpo`` does)
    and its functions as imported; a built-in task's proxy through ppo_core's reward model."""
    if not parts.config.named_rewards:
        return [PromptSetReward(parts, config, "proxy")]
    return [FunctionReward(spec, field).function if is_function_spec(spec) else spec
            for field, spec in parts.config.named_rewards]


def trainer_config(arguments: TrialArguments, device: torch.device, output_dir: str, updates: int,
                   steps_per_update: int) -> Any:
    """TRL's GRPOConfig or RLOOConfig: the export's arguments, the trial's length in optimizer steps, one log per
    PPO update, and the machine's device (MACHINE_FIELDS: the CPU without a GPU); bf16 as the config says, and
    where it says nothing, as ppo_core decides (on a GPU that supports it, not on a CPU)."""
    import trl

    model_init = {"revision": arguments.model.get("model_revision"), "dtype": arguments.model.get("dtype"),
                  "attn_implementation": arguments.model.get("attn_implementation"),
                  "trust_remote_code": arguments.model.get("trust_remote_code")}
    kwargs = {**arguments.config, "output_dir": output_dir, "max_steps": updates * steps_per_update,
              "logging_steps": steps_per_update, "use_cpu": device.type == "cpu",
              "model_init_kwargs": {key: value for key, value in model_init.items() if value is not None}}
    # bf16 as the config says; unset, as ppo_core decides it (on a GPU that supports it), not TRL's default (on).
    kwargs.setdefault("bf16", device.type == "cuda" and torch.cuda.is_bf16_supported())
    return getattr(trl, TRL_TRAINERS[arguments.trainer][0])(**kwargs)


def _device(config: PPOConfig) -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() and not config.use_cpu else "cpu")


def run_trl_trial(trainer_name: str, config: PPOConfig, callbacks: Sequence[UpdateCallback]) -> UpdateBridge:
    """Train ``config`` in TRL's ``trainer_name`` ("trl-grpo" or "trl-rloo"), reporting each PPO update to
    ``callbacks``; the returned bridge says how many updates ran and why it stopped early, if it did."""
    import trl

    # transformers 5 deprecates names TRL 1.16 still passes (gradient_checkpointing, is_gradient_checkpointing):
    # a warning about TRL's code, printed by every trial, that its user can do nothing about.
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing.*")
    device = _device(config)
    parts = load_run_parts(config, run_sources(config), device)
    # What the config leaves to the run made explicit, so that the export (and the trial) sets it: the task's
    # response length (max_completion_length), and bf16 by ppo_core's rule for null (TRL's default is on).
    config = dataclasses.replace(config, response_length=parts.generation_config.max_new_tokens,
                                 bf16=config.uses_bf16(device.type == "cuda" and torch.cuda.is_bf16_supported()))
    arguments = trial_arguments(trainer_name, config)
    steps = optimizer_steps_per_update(config)
    updates = count_updates(config, len(parts.train_prompts))
    dataset = Dataset.from_dict({"prompt": parts.train_prompts.prompts, **parts.train_prompts.columns,
                                 ROW_COLUMN: list(range(len(parts.train_prompts)))})
    model_args = trl.ModelConfig(**{**arguments.model, "model_name_or_path": parts.policy_path})
    with tempfile.TemporaryDirectory(prefix="ppo-tune-trl-") as output_dir:
        reward_funcs = trl_reward_funcs(parts, config)
        trainer = getattr(trl, TRL_TRAINERS[trainer_name][1])(
            model=parts.policy_path, reward_funcs=reward_funcs,
            args=trainer_config(arguments, device, output_dir, updates, steps), train_dataset=dataset,
            processing_class=parts.tokenizer, peft_config=trl.get_peft_config(model_args),
        )
        evaluation = TrialEvaluation(trainer, parts, config, device)
        # The training responses' gold, where the task's proxy scores them (a user's reward functions go to TRL as
        # they are, and no gold is measured beside them).
        golds = [training_gold(reward, evaluation.group) for reward in reward_funcs
                 if isinstance(reward, PromptSetReward)]
        bridge = UpdateBridge(config, callbacks, updates, steps, float(arguments.config.get("beta", 0.0)),
                              evaluation.metrics, evaluation.samples, golds[0] if golds else lambda: None,
                              evaluation.group)
        bridge.trained_by = f"TRL {trl.__version__} {type(trainer).__name__}"
        if config.learning_rate_schedule is not None or config.kl_coef_schedule is not None:
            trainer.add_callback(scheduled(trainer, config, steps))
        trainer.add_callback(bridge)
        for printer in (PrinterCallback, ProgressCallback):  # the study's database is the record, not stdout
            trainer.remove_callback(printer)
        started = time.perf_counter()
        trainer.train()
        bridge.seconds["train"] = time.perf_counter() - started  # TRL's loop, with the bridge's seconds inside it
    return bridge


def scheduled(trainer: Any, config: PPOConfig, steps_per_update: int) -> ScheduleCallback:
    """The callback that puts ``config``'s schedules in force in ``trainer``, whose updates are the trial's: one
    generation of ``steps_per_update`` optimizer steps each."""
    callback = ScheduleCallback(trainer, learning_rate_schedule=config.learning_rate_schedule,
                                kl_coef_schedule=config.kl_coef_schedule)
    if callback.steps_per_update != steps_per_update:  # the export's batch mapping and TRL's count disagree
        raise RuntimeError(f"TRL's trainer makes {callback.steps_per_update} optimizer steps a generation, the trial "
                           f"counts {steps_per_update} an update")
    return callback


class TrialEvaluation:
    """ppo_core's held-out evaluation and sample recordings, on the policy TRL is training."""

    def __init__(self, trainer: Any, parts: RunParts, config: PPOConfig, device: torch.device) -> None:
        self.trainer, self.parts, self.config, self.device = trainer, parts, config, device
        self.group = ProcessGroup(trainer.accelerator)
        self._reference: torch.nn.Module | None = None
        self.judging = held_out_judging(parts.judges, config, device, self.group.rank, self._setup)

    def _setup(self) -> Any:
        policy = self.trainer.accelerator.unwrap_model(self.trainer.model)
        reference = None
        if not self.config.use_peft:  # under LoRA the reference is the policy with its adapter off
            if self._reference is None:
                ref_model = getattr(self.trainer, "ref_model", None)
                if ref_model is not None:
                    self._reference = self.trainer.accelerator.unwrap_model(ref_model)
                else:
                    frozen = load_causal_lm(self.parts.policy_path, self.parts.options).requires_grad_(False)
                    self._reference = frozen.to(self.device)  # type: ignore[arg-type]
            reference = self._reference
        return self.parts.setup(RolloutModels(policy=policy, reference=reference, value_model=None,  # type: ignore[arg-type]
                                              rewards=self.parts.rewards, gold_score=self.parts.gold_score,
                                              tokenizer=self.parts.tokenizer),
                                trainer_state=self.trainer.state)  # TRL's own, which its training rewards read

    def _in_eval_mode(self, run: Callable[[Any], Any]) -> Any:
        setup = self._setup()
        was_training = setup.models.policy.training
        setup.models.policy.eval()
        try:
            return run(setup)
        finally:
            setup.models.policy.train(was_training)

    def metrics(self, update: int) -> dict[str, float]:
        # for_update=False: a held-out evaluation needs the policy's log-probabilities for its KL, which an update's
        # rollout of one epoch of one mini-batch leaves to the update's forward (and so to nothing, here).
        return self._in_eval_mode(lambda setup: evaluate(
            lambda batch: collect_rollout(setup, batch, self.config, self.device, for_update=False), setup,
            self.config, self.group, update, judging=self.judging))

    def samples(self, update: int) -> list[SampleGeneration]:
        def record(setup: Any) -> list[SampleGeneration]:
            with separate_rng(self.device, self.config.seed + SAMPLE_SEED_STRIDE * (update + 1)):
                scored = collect_samples(setup, self.parts.eval_prompts, self.config, self.device)
            prompts = self.parts.eval_prompts.texts
            gold = scored.gold_scores.tolist() if scored.gold_scores is not None else [None] * len(prompts)
            episode = update * self.config.batch_size
            return [SampleGeneration(update, episode, index, prompt, response, float(score), gold_value)
                    for index, (prompt, response, score, gold_value) in enumerate(
                        zip(prompts, scored.response_texts, scored.scores.tolist(), gold, strict=True))]
        return self._in_eval_mode(record)
