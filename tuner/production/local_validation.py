"""A validation run in the calling process: what ``ppo-tune validate NAME --top-k K --seeds S`` does with one local
worker, for a caller that already runs studies itself (a benchmark, the dashboard's real studies) and so already
holds the trial imports and a fork server, where the command would start two more processes and import them again."""

from __future__ import annotations

import optuna

from tuner.production.validation import (
    ValidatedConfig,
    load_validation,
    queue_runs,
    validation_results,
    validation_spec,
)
from tuner.run.worker import open_study, run_worker
from tuner.store.database import open_storage
from tuner.study.spec_record import rebuilt_spec


def validate_here(name: str, storage: str, top_k: int, seeds: int, threads: int | None,
                  eval_samples: int | None = None) -> list[ValidatedConfig]:
    """Queue the validation runs of study ``name``'s ``top_k`` best trials on ``seeds`` fresh seeds each (what an
    earlier call queued or ran is kept; new runs draw ``eval_samples`` responses per held-out prompt, as ``validate
    --eval-samples``), run what is queued one at a time, and return the validated configurations, best first; none when
    the study has no completed trial."""
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    spec = validation_spec(rebuilt_spec(study, storage))
    validation, _ = open_study(spec, heartbeat=False, allow_changes=True)  # derived from the study: follows it
    queue_runs(study, validation, top_k, seeds, eval_samples=eval_samples)
    run_worker(rebuilt_spec(validation, storage), n_trials=None, timeout=None, threads=threads)
    return validation_results(study, load_validation(name, storage))
