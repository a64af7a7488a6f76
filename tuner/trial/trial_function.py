"""One Optuna trial = one short PPO run in a process of its own: suggest, start it, wait, record how it ended.

:func:`make_trial_function` is what the worker's ``study.optimize`` calls: the sampler chooses the parameters in the
worker, and the run itself happens in the trial's process (``tuner.trial.process``), where a
``tuner.trial.reporter.TrialReporter`` stores every update and sample and judges the run as it goes. The worker
imports none of that (nor the trainer, nor torch).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial

from ppo_core.config.io import build_config
from ppo_core.errors import first_line
from tuner.search.space import suggest_params
from tuner.store.attrs import CONFIG_ATTR, DUPLICATE_OF_ATTR, FAIL_REASON_ATTR, VALIDATES_ATTR, retry_user_attrs
from tuner.store.database import RetryStaleTrial
from tuner.store.segments import Segment, duplicate_of, segment_of
from tuner.study.seed_policy import race_seed
from tuner.study.spec import StudySpec
from tuner.study.target import target_problem
from tuner.trial.checkpoints import first_of_chain, remove_trial_checkpoints, trial_checkpoints
from tuner.trial.interrupts import interruptible, interrupts_held, raise_held
from tuner.trial.launch import run_trial_process
from tuner.trial.protocol import Outcome, TrialJob

INTERRUPTED = "interrupted (Ctrl-C); queued again for the resumed study"
NOTHING_QUEUED = "not run: the queue was empty"
ALREADY_OVER = "Cannot tell a "
"""How Optuna's tell begins its refusal of a trial that another worker has already ended."""
LOST_RETRIES = 2
"""Times a trial lost to something outside it (under ``--launcher ray``: its process killed, its node or Ray worker
gone) is queued again, in a chain of retries: a preempted node may be preempted again, a trial the kernel's OOM
killer ends every time should not run forever."""

_logger = logging.getLogger(__name__)

Launch = Callable[[TrialJob, int, float | None, BaseStorage], tuple[Outcome, bool]]
"""Runs a trial's process(es) and returns how the trial ended, and whether it was lost to something outside it (a
reason to run it again): ``tuner.trial.ray_launch.ray_launcher``'s. The default runs it on this machine."""


def _launch_locally(job: TrialJob, processes: int, timeout: float | None,
                    storage: BaseStorage) -> tuple[Outcome, bool]:
    # A killed local trial is not retried: on its own machine, what killed it (the OOM killer, a user) would again.
    return run_trial_process(job, processes, timeout, storage), False


class TrialFailed(RuntimeError):
    """The trial's process failed, crashed, was killed or ran past trial_timeout; the message says which."""


def make_trial_function(spec: StudySpec, threads: int | None = None, queue_only: bool = False,
                        launch: Launch | None = None) -> Callable[[optuna.Trial], float | list[float]]:
    """The function ``study.optimize`` calls: it chooses the trial's config, runs the trial in its own process(es)
    with ``threads`` CPU threads between them, and returns the objective value(s), raises ``optuna.TrialPruned``,
    or raises :class:`TrialFailed` with the reason also recorded on the trial. ``launch`` runs the trial's process(es):
    on this machine by default, as Ray tasks under ``--launcher ray``.

    With ``queue_only`` (a validation study) only queued runs are run: a trial Optuna created because another
    worker took the last queued one stops the study and is pruned, untrained."""
    launch = launch or _launch_locally
    processes = spec.processes_per_trial
    threads_per_process = max(1, threads // processes) if threads else None

    def trial_function(trial: optuna.Trial) -> float | list[float]:
        if queue_only and VALIDATES_ATTR not in trial.user_attrs:
            trial.study.stop()
            raise optuna.TrialPruned(NOTHING_QUEUED)
        segment = _check_segment(trial) if spec.population is not None else None
        try:
            with interruptible():  # Ctrl-C stops the trial here; elsewhere it waits (tuner.trial.interrupts)
                if segment is not None and segment.generation > 0:  # its config (its schedule) was fixed when queued
                    suggest_params(trial, spec.search_space, spec.base)  # the knobs in force, recorded as queued
                elif VALIDATES_ATTR not in trial.user_attrs:  # a validation run's config was fixed when it was queued
                    try:
                        # A racing re-run trains its configuration on the seed it was queued with.
                        values = race_seed(trial.user_attrs,
                                           {**spec.base, **suggest_params(trial, spec.search_space, spec.base)})
                        config = build_config(values).to_dict()
                        trial.set_user_attr(CONFIG_ATTR, config)
                    except Exception as error:
                        raise _failed(trial, f"{type(error).__name__}: {first_line(error)}") from error
                    # The study file's check reads the corners of the space; a point between them is checked here.
                    problem = target_problem(spec.target, config) if spec.target else None
                    if problem is not None:
                        raise _failed(trial, f"target {spec.target}: {problem}")
                job = TrialJob(spec.storage, spec.name, trial._trial_id, os.getpid(), threads_per_process)
                outcome, lost = launch(job, processes, spec.trial_timeout, trial.storage)
        except KeyboardInterrupt:
            trial.set_user_attr(FAIL_REASON_ATTR, INTERRUPTED)
            trial.study.enqueue_trial(trial.params, user_attrs=retry_user_attrs(trial.user_attrs, trial.number),
                                      skip_if_exists=False)
            raise
        # Over for good, nothing will continue from its checkpoints; but a population's later segments do, and the
        # population removes them once nothing can (tuner.population.checkpoints).
        if (outcome.state != "fail" or not lost) and spec.population is None:
            _remove_checkpoints(spec, trial)
        if outcome.state == "pruned":
            raise optuna.TrialPruned(outcome.reason)
        if outcome.state == "fail":
            failed = _failed(trial, outcome.reason)
            if lost:  # queued again as a heartbeat-less worker's trial is, carrying what says what to run
                RetryStaleTrial(LOST_RETRIES)(trial.study, trial.storage.get_trial(trial._trial_id))
            raise failed
        return outcome.values[0] if len(outcome.values) == 1 else list(outcome.values)

    return trial_function


def run_trials(study: optuna.Study, trial_function: Callable[[optuna.Trial], float | list[float]],
               n_trials: int | None = None, timeout: float | None = None,
               callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = ()) -> None:
    """``study.optimize`` with :func:`make_trial_function`'s function, as a worker runs it: a failing trial is
    recorded and the next one runs, and Ctrl-C or SIGTERM ends it with the trial it interrupted recorded and queued
    again."""
    deadline = None if timeout is None else time.monotonic() + timeout
    ended = [0]  # trials this worker ended, for n_trials across the restarts below

    def count(study: optuna.Study, trial: FrozenTrial) -> None:
        ended[0] += 1

    with interrupts_held():
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                study.optimize(trial_function, n_trials=None if n_trials is None else n_trials - ended[0],
                               timeout=left, catch=(Exception,), callbacks=[count, *callbacks, raise_held])
                return
            except (ValueError, AssertionError) as error:
                # Another worker failed the trial as stale while it ran here (this worker's heartbeats came late,
                # on a loaded machine) and queued its retry. The study goes on with the retry; this worker goes on
                # with the next trial, not out of the study.
                if not _over_elsewhere(error):
                    raise
                ended[0] += 1
                _logger.warning("a trial ended here after another worker had failed it as stale (its heartbeats "
                                "came late); its retry runs in its place")


def _over_elsewhere(error: BaseException) -> bool:
    """Whether ``error`` is Optuna's refusal to tell a trial that is over already, or the assertion its
    ``_run_trial`` raises over that refusal when the trial's function had returned a value."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ValueError) and str(seen).startswith(ALREADY_OVER):
            return True
        seen = seen.__context__
    return False


def _check_segment(trial: optuna.Trial) -> Segment:
    """In a population study, the segment ``trial`` trains; pruned where it is no queued segment (a worker found
    nothing queued: the population waits for a generation to end) or repeats one queued twice
    (``tuner.store.segments.duplicate_of``). The study goes on."""
    frozen = trial.storage.get_trial(trial._trial_id)
    segment = segment_of(frozen)
    if segment is None:
        raise optuna.TrialPruned(NOTHING_QUEUED)
    repeated = duplicate_of(trial.study.get_trials(deepcopy=False), frozen)
    if repeated is not None:
        trial.set_user_attr(DUPLICATE_OF_ATTR, repeated)
        raise optuna.TrialPruned(f"not run: the same segment as trial {repeated}, queued twice")
    return segment


def _remove_checkpoints(spec: StudySpec, trial: optuna.Trial) -> None:
    """Remove the checkpoints of the trial's chain of retries (``tuner.trial.checkpoints``), if it saved any."""
    user_attrs = trial.user_attrs
    config = user_attrs.get(CONFIG_ATTR)
    if isinstance(config, dict) and config.get("save_steps") is not None:
        first = first_of_chain(trial.storage, trial.study._study_id, trial.number, user_attrs)
        remove_trial_checkpoints(trial_checkpoints(spec.storage, spec.name, first))


def _failed(trial: optuna.Trial, reason: str) -> TrialFailed:
    trial.set_user_attr(FAIL_REASON_ATTR, reason[:1000])
    return TrialFailed(reason)
