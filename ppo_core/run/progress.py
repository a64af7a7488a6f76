"""A rich progress bar over PPO updates that shows reward, KL and gold score as they come."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ppo_core.metric_names import GOLD_SCORE
from ppo_core.run.callbacks import TrainerCallback


class ProgressCallback(TrainerCallback):
    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("[bold]PPO"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),  # stdout carries the run's JSON summary alone
        )
        self.task_id: Any = None

    def on_train_begin(self, config: Any, num_updates: int) -> None:
        self.progress.start()
        self.task_id = self.progress.add_task("train", total=num_updates, status="")

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        if "objective/scores" not in metrics:  # the evaluation before training (eval_on_start): no rollout yet
            return None
        status = f"score {metrics['objective/scores']:+.3f}  kl {metrics['objective/kl']:.2f}"
        if GOLD_SCORE in metrics:
            status += f"  gold {metrics[GOLD_SCORE]:.3f}"
        self.progress.update(self.task_id, completed=update, status=status)
        return None

    def on_train_end(self, num_updates: int, stop_reason: str | None) -> None:
        self.progress.stop()
