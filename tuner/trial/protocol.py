"""What a worker and a trial's own process tell each other: which trial to run, and how it ended.

The worker hands the process a :class:`TrialJob` as command-line arguments (the same ones whether the process is
forked, started with ``python -m tuner.trial.process`` or by ``accelerate launch``). Everything else the process
needs is in the shared storage: the study's stored spec names the objectives, pruner and KL guard, and the
trial's ``config`` user attribute holds the values the worker's sampler chose. The process reports its :class:`Outcome`
back on the trial, as a system attribute; its exit status only matters when it died before it could.

Example::

    job = TrialJob(storage="sqlite:///studies/quickstart.db", study_name="quickstart", trial_id=3,
                   worker_pid=os.getpid())
    subprocess.run([sys.executable, "-m", "tuner.trial.process", *job.arguments()])
    outcome = read_outcome(storage, 3)
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from optuna.storages import BaseStorage

from tuner.store.attrs import OUTCOME_SYSTEM_ATTR

State = Literal["complete", "pruned", "fail"]


@dataclass(frozen=True)
class TrialJob:
    """One trial for one process (or one group of processes under ``accelerate launch``) to run."""

    storage: str
    """The study's storage URL, as the worker opened it (a ``--storage`` flag may have overridden the file's)."""
    study_name: str
    """The study: its stored spec names the objectives, pruner and KL guard, as it did for the worker."""
    trial_id: int
    """Optuna's trial id (unique in the storage), whose ``config`` user attribute holds the values to train with."""
    worker_pid: int
    """The worker that waits for this trial: the trial's processes end themselves if it dies."""
    threads: int | None = None
    """CPU threads for each of the trial's processes; None leaves torch's default."""

    def arguments(self) -> list[str]:
        """The job as command-line arguments of ``python -m tuner.trial.process``."""
        arguments = ["--storage", self.storage, "--study-name", self.study_name, "--trial-id", str(self.trial_id),
                     "--worker-pid", str(self.worker_pid)]
        return arguments + (["--threads", str(self.threads)] if self.threads else [])

    @classmethod
    def from_arguments(cls, argv: Sequence[str] | None = None) -> TrialJob:
        parser = argparse.ArgumentParser(prog="python -m tuner.trial.process",
                                         description="Run one trial of a study; started by a tuner worker.")
        parser.add_argument("--storage", required=True)
        parser.add_argument("--study-name", required=True)
        parser.add_argument("--trial-id", type=int, required=True)
        parser.add_argument("--worker-pid", type=int, required=True)
        parser.add_argument("--threads", type=int, default=None)
        args = parser.parse_args(argv)
        return cls(args.storage, args.study_name, args.trial_id, args.worker_pid, args.threads)


@dataclass(frozen=True)
class Outcome:
    """How a trial ended: its objective values, or why it was pruned or failed."""

    state: State
    values: tuple[float, ...] = ()
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        # JSON has no NaN; a NaN value (an objective with no history) travels as None and comes back as NaN.
        values = [None if math.isnan(value) else value for value in self.values]
        return {"state": self.state, "values": values, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        values = tuple(math.nan if value is None else float(value) for value in data.get("values", []))
        return cls(data["state"], values, str(data.get("reason", "")))


def record_outcome(storage: BaseStorage, trial_id: int, outcome: Outcome) -> None:
    """Put the outcome on the trial. A failure does not replace an outcome already there: when one of several
    processes fails, the others may fail after it for that reason alone, and the first says what happened."""
    if outcome.state == "fail" and OUTCOME_SYSTEM_ATTR in storage.get_trial_system_attrs(trial_id):
        return
    storage.set_trial_system_attr(trial_id, OUTCOME_SYSTEM_ATTR, outcome.to_dict())


def read_outcome(storage: BaseStorage, trial_id: int) -> Outcome | None:
    """The outcome the trial's process recorded, or None if it recorded none."""
    data = storage.get_trial_system_attrs(trial_id).get(OUTCOME_SYSTEM_ATTR)
    return None if data is None else Outcome.from_dict(data)
