"""Experiment trackers (TensorBoard, Weights & Biases, trackio, MLflow, ...) through accelerate, as ``report_to``.

Per-update metrics go to every tracker; sample generations go as a table where the tracker has tables, and as
a markdown text where it has only text (TensorBoard).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelerate import Accelerator

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.run.callbacks import SampleGeneration, TrainerCallback

PROJECT_NAME = "ppo-tune"
SAMPLE_COLUMNS = ["update", "prompt", "response", "score", "gold_score"]


def tracker_dir(config: PPOConfig) -> str:
    """Where file-based trackers (TensorBoard, MLflow's local store) write: ``<output_dir>/trackers``."""
    return str(Path(config.output_dir or "runs") / "trackers")


def hyperparameters(config: PPOConfig) -> dict[str, Any]:
    """The config as trackers' hyperparameter tables take it: numbers, text and booleans only."""
    flat: dict[str, Any] = {}
    for name, value in config.to_dict().items():
        flat[name] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return flat


class TrackerCallback(TrainerCallback):
    """Logs to the trackers the Accelerator was built with (``log_with``)."""

    def __init__(self, accelerator: Accelerator) -> None:
        self.accelerator = accelerator

    def on_train_begin(self, config: Any, num_updates: int) -> None:
        self.accelerator.init_trackers(PROJECT_NAME, config=hyperparameters(config))

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        self.accelerator.log(metrics, step=update)
        return None

    def on_samples(self, update: int, samples: list[SampleGeneration]) -> None:
        rows = [[s.update, s.prompt, s.response, s.score, s.gold_score] for s in samples]
        for tracker in self.accelerator.trackers:
            if hasattr(tracker, "log_table"):
                tracker.log_table("samples", columns=SAMPLE_COLUMNS, data=rows, step=update)
            elif hasattr(tracker, "writer") and hasattr(tracker.writer, "add_text"):
                tracker.writer.add_text("samples", _markdown_table(rows), global_step=update)

    def on_train_end(self, num_updates: int, stop_reason: str | None) -> None:
        # The trackers only: accelerate's end_training would destroy the process group too, on the main rank alone,
        # and the other ranks' wait for it as the model is saved would fail. The group ends at exit
        # (ppo_core.run.distributed.ProcessGroup).
        for tracker in self.accelerator.trackers:
            tracker.finish()


def _markdown_table(rows: list[list[Any]]) -> str:
    def cell(value: Any) -> str:
        text = "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(SAMPLE_COLUMNS) + " |", "|" + "---|" * len(SAMPLE_COLUMNS)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)
