"""Callbacks: receive each update's metrics and the sample generations as they happen, and may stop a run."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class SampleGeneration:
    """One evaluation prompt's response at a point in training."""

    update: int  # PPO updates completed when it was generated (0: the SFT policy)
    episode: int
    prompt_index: int
    prompt: str
    response: str
    score: float
    gold_score: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class TrainerCallback:
    """Override what you need. ``on_update`` may return a reason (a non-empty string) to stop the run.

    Exceptions raised by a callback propagate out of ``PPOTrainer.train`` unchanged, so a tuner can
    raise its own pruning signal from here.
    """

    def on_train_begin(self, config: Any, num_updates: int) -> None:
        """Called once, after the models are loaded and before the first rollout."""

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        """Called after every PPO update with its metrics."""
        return None

    def on_samples(self, update: int, samples: list[SampleGeneration]) -> None:
        """Called whenever sample generations for the evaluation prompts are made."""

    def on_train_end(self, num_updates: int, stop_reason: str | None) -> None:
        """Called once when the run ends normally or by a stop request."""


class JsonlWriter(TrainerCallback):
    """Appends ``metrics.jsonl`` (one object per update) and ``samples.jsonl`` (one per generation)."""

    def __init__(self, output_dir: str | Path) -> None:
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.output_dir / "metrics.jsonl"
        self.samples_path = self.output_dir / "samples.jsonl"
        self.metrics_path.write_text("")
        self.samples_path.write_text("")
        self.updates = 0  # updates written to metrics.jsonl

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        with self.metrics_path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(metrics) + "\n")
        self.updates += 1
        return None

    def on_samples(self, update: int, samples: list[SampleGeneration]) -> None:
        with self.samples_path.open("a", encoding="utf-8") as file:
            for sample in samples:
                file.write(json.dumps(sample.to_dict()) + "\n")
