"""Callbacks: receive each update's metrics and the sample generations as they happen, and may stop a run."""

from __future__ import annotations

import json
import os
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
    """Appends ``metrics.jsonl`` (one object per update) and ``samples.jsonl`` (one per generation).

    A new run starts both files empty. A run resumed from the checkpoint of update ``resume_at`` keeps what its
    files hold up to that update and drops the rest (what was written after the checkpoint, up to an interruption,
    is made again), so that each update appears once, in order; it does so when training begins, once the trainer
    has accepted the checkpoint, so that a resume refused leaves the files as they were."""

    def __init__(self, output_dir: str | Path, resume_at: int | None = None) -> None:
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.output_dir / "metrics.jsonl"
        self.samples_path = self.output_dir / "samples.jsonl"
        self.resume_at = resume_at
        if resume_at is None:
            self.metrics_path.write_text("")
            self.samples_path.write_text("")
        self.updates = 0  # updates written to metrics.jsonl (by this run, or kept from the one it resumes)

    def on_train_begin(self, config: Any, num_updates: int) -> None:
        if self.resume_at is not None:
            self.updates = _kept_until(self.metrics_path, self.resume_at)
            _kept_until(self.samples_path, self.resume_at)

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        _append(self.metrics_path, [metrics])
        self.updates += 1
        return None

    def on_samples(self, update: int, samples: list[SampleGeneration]) -> None:
        _append(self.samples_path, [sample.to_dict() for sample in samples])


def _append(path: Path, records: list[dict[str, Any]]) -> None:
    """Append ``records`` to the JSON lines file ``path``, on the disk before it returns: a checkpoint written after
    them (flushed to the disk too) never outlives them, so a resume after a power cut finds every update up to it."""
    with path.open("a", encoding="utf-8") as file:
        file.write("".join(json.dumps(record) + "\n" for record in records))
        file.flush()
        os.fsync(file.fileno())


def _kept_until(path: Path, update: int) -> int:
    """Rewrite the JSON lines file ``path`` with its records of updates up to ``update`` alone (none where the
    file is missing); a line cut short by an interruption goes too. Replaced by a rename, so an interruption here
    leaves the old file or the new one. How many records it keeps."""
    lines: list[str] = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("update", update + 1) <= update:
                lines.append(line + "\n")
    staged = path.with_name(f".{path.name}.resume")
    staged.write_text("".join(lines), encoding="utf-8")
    staged.replace(path)
    return len(lines)
