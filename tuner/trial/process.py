"""One trial in a process of its own: ``python -m tuner.trial.process --storage URL --study-name S --trial-id N ...``

A worker starts this (forked from its fork server, or under ``accelerate launch`` for several processes per
trial) after its sampler chose the trial's parameters and stored the resulting config on the trial. Here the trial
is opened again from the shared storage and trained; every update, sample, KL value and pruning decision goes
through the storage exactly as it would in the worker, and the :class:`~tuner.trial.protocol.Outcome` is recorded
on the trial before the process exits.

Under ``accelerate launch`` the trainer calls its callbacks on the main process only, and a stop reason returned
there stops every process together; so the reporter asks to stop by returning a reason, never by raising, and the
main process alone records a completed or pruned outcome. Any process may record a failure.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import optuna
import torch
import tqdm.std  # type: ignore[import-untyped]
from optuna.trial import FrozenTrial

from ppo_core.config.io import build_config
from ppo_core.config.launch_env import launched_rank
from ppo_core.config.ppo_config import PPOConfig
from ppo_core.errors import first_line
from ppo_core.models.quiet import quiet_hugging_face
from ppo_core.run.checkpoint_files import checkpoints_dir, complete_checkpoints
from ppo_core.run.trainer import PPOTrainer
from tuner.store.attrs import CONFIG_ATTR, CPU_THREADS_ATTR, RETRY_OF_ATTR, TRAINED_BY_ATTR, TRL_SECONDS_ATTR
from tuner.store.database import create_engine, open_storage
from tuner.store.records import TrialStore
from tuner.store.segments import segment_of
from tuner.study.sections import PPO_CORE
from tuner.study.spec_record import rebuilt_spec
from tuner.trial.checkpoints import first_of_chain, remove_trial_checkpoints, trial_checkpoints
from tuner.trial.factory import make_pruner
from tuner.trial.lifetime import die_with_parent, end_now
from tuner.trial.protocol import Outcome, TrialJob, record_outcome
from tuner.trial.reporter import TrialReporter
from tuner.trial.segment_run import run_segment


def _watch_worker(worker_pid: int) -> None:
    try:
        descriptor = os.pidfd_open(worker_pid)  # Linux 5.3+: readable once the worker has exited
    except ProcessLookupError:
        end_now()
    except (AttributeError, OSError):  # no pidfd here: look every second
        while _exists(worker_pid):
            time.sleep(1.0)
        end_now()
    else:
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        poller.poll()
        end_now()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_with_worker(worker_pid: int) -> None:
    """Never outlive the worker: a trial nobody waits for would hold its GPU and write to a trial that another
    worker's heartbeat check has failed and queued again.

    A forked trial's parent is the fork server, which lives on while any of its children does, so the worker itself
    is watched; the parent-death signal also covers the processes accelerate launch starts.
    """
    die_with_parent()
    threading.Thread(target=_watch_worker, args=(worker_pid,), name="watch-worker", daemon=True).start()


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error and those it was raised from or while handling (a wrapper's ``from None`` keeps the latter)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_out_of_memory(error: BaseException) -> bool:
    # torch's CPU allocator raises a plain RuntimeError; its CUDA (and newer CPU) allocators raise OutOfMemoryError.
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(error))


def failure_reason(error: BaseException) -> str:
    """One line for the trial's fail reason; an out-of-memory error anywhere in the chain says so first."""
    if any(_is_out_of_memory(cause) for cause in _chain(error)):
        return f"out of memory: {first_line(error)}"
    return f"{type(error).__name__}: {first_line(error)}"


def _thread_lock_for_progress_bars() -> None:
    """tqdm's default lock is a named semaphore, which the worker's resource tracker follows: one left by a killed
    trial has the worker warn of leaked semaphores as it exits. No other process shares this one's progress bars."""
    tqdm.std.tqdm.set_lock(threading.RLock())


def _checkpointing(config: PPOConfig, study: optuna.Study, frozen: FrozenTrial,
                   storage_url: str) -> tuple[PPOConfig, tuple[int, Path] | None]:
    """The trial's config with its checkpoint directory (``tuner.trial.checkpoints``) as output_dir when it saves
    checkpoints (``save_steps``), and the last checkpoint (its update and path) that a retry continues from; the
    first trial of a chain starts afresh, in an emptied directory."""
    if config.save_steps is None:
        return config, None
    first = first_of_chain(study._storage, study._study_id, frozen.number, frozen.user_attrs)
    directory = trial_checkpoints(storage_url, study.study_name, first)
    if first == frozen.number and launched_rank() == 0:  # a study made again under the same name left its own
        remove_trial_checkpoints(directory)
    config = build_config({**frozen.user_attrs[CONFIG_ATTR], "output_dir": str(directory)})
    found = complete_checkpoints(checkpoints_dir(directory)) if first != frozen.number else []
    return config, found[-1] if found else None


def run_trial(job: TrialJob) -> Outcome:
    """Train the trial ``job`` names, reporting through the storage, and record how it ended."""
    storage = open_storage(job.storage)
    # The sampler already ran in the worker; a random one is the cheapest to set up and is never asked anything.
    study = optuna.load_study(study_name=job.study_name, storage=storage, sampler=optuna.samplers.RandomSampler())
    spec = rebuilt_spec(study, job.storage)
    pruner = study.pruner = make_pruner(spec)
    trial = optuna.Trial(study, job.trial_id)
    frozen = storage.get_trial(job.trial_id)
    store = TrialStore(create_engine(job.storage), spec.name, job.trial_id, frozen.number)
    reporter = TrialReporter(trial, spec, pruner, store)
    try:
        # Built again here: under accelerate launch the batch sizes derive from this launch's number of processes.
        config = build_config(frozen.user_attrs[CONFIG_ATTR])
        if launched_rank() == 0 and (config.use_cpu or not torch.cuda.is_available()):
            trial.set_user_attr(CPU_THREADS_ATTR, torch.get_num_threads())
        segment = segment_of(frozen) if spec.population is not None else None
        if segment is not None:
            run_segment(study, spec.storage, frozen, segment, reporter, store)
        elif spec.trainer == PPO_CORE:
            config, checkpoint = _checkpointing(config, study, frozen, spec.storage)
            if checkpoint is not None and launched_rank() == 0:
                retried = storage.get_trial_id_from_study_id_trial_number(study._study_id,
                                                                          frozen.user_attrs[RETRY_OF_ATTR])
                reporter.restore(store.copy_from(retried, checkpoint[0]))
            PPOTrainer(config, [reporter]).train(checkpoint[1] if checkpoint else None)
        else:
            from tuner.trl_trial.run import run_trl_trial  # imports TRL, which a ppo_core trial never needs

            bridge = run_trl_trial(spec.trainer, config, [reporter])
            if launched_rank() == 0:
                trial.set_user_attr(TRAINED_BY_ATTR, bridge.trained_by)
                trial.set_user_attr(TRL_SECONDS_ATTR, {key: round(value, 3) for key, value in bridge.seconds.items()})
        reporter.set_constraints()  # before the outcome, so that whoever reads it finds the constraints set
        outcome = Outcome("complete", tuple(reporter.objective_values()))
    except optuna.TrialPruned as pruned:
        outcome = Outcome("pruned", reason=str(pruned))
    except Exception as error:
        outcome = Outcome("fail", reason=failure_reason(error))
    if outcome.state == "fail" or launched_rank() == 0:  # rank 0 under accelerate launch, or a lone process
        record_outcome(storage, job.trial_id, outcome)
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    """Run one trial; exit status 1 when it failed, so that accelerate launch stops the trial's other processes."""
    job = TrialJob.from_arguments(argv)
    end_with_worker(job.worker_pid)
    quiet_hugging_face()
    _thread_lock_for_progress_bars()
    if job.threads:
        torch.set_num_threads(job.threads)
    return 1 if run_trial(job).state == "fail" else 0


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    sys.exit(run_as_process(main))
