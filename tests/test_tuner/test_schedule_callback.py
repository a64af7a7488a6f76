"""A ppo-tune schedule in TRL's own GRPOTrainer and RLOOTrainer (the installed release, on a tiny model): the line
``best --format trl-grpo`` / ``trl-rloo`` prints, run as printed against the trainer, puts each update's learning rate
(under the scheduler's decay) and beta in force at every optimizer step, and TRL's KL follows the beta."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset
from transformers import AutoTokenizer, TrainerCallback

from ppo_core.config.checks import ConfigError
from ppo_core.config.ppo_config import PPOConfig
from ppo_core.config.schedules import value_at
from tuner.exports import EXPORT_FORMATS
from tuner.exports.trl_grpo_rloo import CALLBACK_REMARK
from tuner.trl_trial.schedule_callback import ScheduleCallback, update_of_step

STEPS = 6  # optimizer steps: 3 updates of 2 (steps_per_generation 4 micro-steps, 2 an optimizer step)
LEARNING_RATE, BETA = 1e-3, 0.04
LR_SCHEDULE = [[2, 5e-4], [3, 2e-3]]
KL_SCHEDULE = [[2, 0.0], [3, 0.1]]


def letter_count(completions: list[str], **columns: Any) -> list[float]:
    return [float(len(completion)) for completion in completions]


def trl_trainer(name: str, lm_dir: Path, output_dir: Path, beta: float = BETA) -> Any:
    """TRL's ``name`` trainer on the tiny model, decaying its learning rate linearly over the run."""
    import trl

    config_class, trainer_class = {"trl-grpo": (trl.GRPOConfig, trl.GRPOTrainer),
                                   "trl-rloo": (trl.RLOOConfig, trl.RLOOTrainer)}[name]
    args = config_class(output_dir=str(output_dir), per_device_train_batch_size=4, num_generations=2,
                        steps_per_generation=4, gradient_accumulation_steps=2, max_completion_length=4,
                        max_steps=STEPS, learning_rate=LEARNING_RATE, lr_scheduler_type="linear", beta=beta,
                        use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1, seed=0)
    prompts = Dataset.from_dict({"prompt": ["a b", "c d e", "f", "g h"] * 8})
    return trainer_class(model=str(lm_dir), reward_funcs=[letter_count], args=args, train_dataset=prompts,
                         processing_class=AutoTokenizer.from_pretrained(lm_dir))


class InForce(TrainerCallback):
    """The learning rate and beta each optimizer step runs with, read as the optimizer steps."""

    def __init__(self, trainer: Any) -> None:
        self.trainer, self.steps = trainer, []  # type: ignore[var-annotated]

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.steps.append((kwargs["optimizer"].param_groups[0]["lr"], self.trainer.beta))


def exported_callback_line(name: str) -> str:
    config = PPOConfig(advantage_estimator="grpo" if name == "trl-grpo" else "rloo", learning_rate=LEARNING_RATE,
                       beta=BETA, kl_coef=BETA, learning_rate_schedule=LR_SCHEDULE, kl_coef_schedule=KL_SCHEDULE)
    (line,) = [line for line in EXPORT_FORMATS[name](config.to_dict()).splitlines()
               if line.startswith(f"# {CALLBACK_REMARK}")]
    return line.removeprefix(f"# {CALLBACK_REMARK}")


@pytest.mark.parametrize("name", ["trl-grpo", "trl-rloo"])
def test_the_exported_callback_line_runs_the_schedule_in_trls_trainer(
        name: str, tiny_lm_dir: Path, tmp_path: Path) -> None:
    trainer = trl_trainer(name, tiny_lm_dir, tmp_path)
    exec(exported_callback_line(name), {"trainer": trainer})  # the line as the export prints it
    in_force = InForce(trainer)
    trainer.add_callback(in_force)
    trainer.train()
    expected = []
    for step in range(STEPS):
        update = update_of_step(step, 2)
        decay = (STEPS - step) / STEPS  # transformers' linear schedule, stepped every optimizer step
        expected.append((pytest.approx(value_at(LR_SCHEDULE, LEARNING_RATE, update) * decay, rel=1e-9),
                         value_at(KL_SCHEDULE, BETA, update)))
    assert in_force.steps == expected
    assert [lr for lr, _ in in_force.steps[:4]] == [pytest.approx(x) for x in (1e-3, 1e-3 * 5 / 6, 5e-4 * 4 / 6,
                                                                               5e-4 * 3 / 6)]
    # TRL measures KL only while beta is above 0 (GRPO in its loss at each step, RLOO in its reward at each
    # generation): in updates 1 and 3, not 2.
    logged = [log for log in trainer.state.log_history if "loss" in log]
    assert [any("kl" in log for log in logged[start:start + 2]) for start in (0, 2, 4)] == [True, False, True]
    # The scheduler keeps the last peak: its next steps decay from it, as ppo_core's do.
    assert trainer.lr_scheduler.base_lrs == [2e-3] * len(trainer.lr_scheduler.base_lrs)


def test_a_kl_schedule_from_beta_zero_is_refused_without_a_reference_model(tiny_lm_dir: Path, tmp_path: Path) -> None:
    trainer = trl_trainer("trl-grpo", tiny_lm_dir, tmp_path, beta=0.0)
    assert trainer.ref_model is None  # TRL loads none at beta 0
    with pytest.raises(ConfigError, match=r"^kl_coef_schedule: TRL's trainer starts at beta 0 and so loads no "
                                          r"reference model") as refused:
        ScheduleCallback(trainer, kl_coef_schedule=[[3, 0.1]])
    assert "\n" not in str(refused.value)
    ScheduleCallback(trainer, kl_coef_schedule=[[3, 0.0]], learning_rate_schedule=[[2, 1e-4]])  # nothing to refuse


@pytest.mark.parametrize(("step", "update"), [(0, 1), (1, 1), (2, 2), (5, 3)])
def test_an_update_is_a_generation_of_optimizer_steps(step: int, update: int) -> None:
    assert update_of_step(step, 2) == update
