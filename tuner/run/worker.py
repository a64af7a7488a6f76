"""A worker: joins (or creates) the study in the shared storage and runs trials until the target. It is a process of
its own (``python -m tuner.run.worker``), or, when it is ``ppo-tune run``'s only local worker, runs in that process.

Several workers, on one machine or many, coordinate only through Optuna's RDB storage. A worker chooses each
trial's parameters and waits for it; the trial itself runs in a process of its own (``tuner.trial.launch``), so
nothing a trial does can take the worker down, and the worker does not import the trainer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.errors import InputError, Terminated, sigterm_as_interrupt
from ppo_core.models.quiet import quiet_hugging_face
from tuner.population.controller import PopulationController, population_over, queue_first_generation
from tuner.run.failure_streak import failure_streak
from tuner.search.warm_start import enqueue_warm_starts
from tuner.store.attrs import VALIDATION_OF_ATTR
from tuner.store.database import create_engine, open_storage
from tuner.store.records import create_tables
from tuner.study.constraints import upper_limit
from tuner.study.seed_policy import Racing, TrialBudget
from tuner.study.spec import StudySpec
from tuner.study.spec_record import check_existing_is_ours, check_ours, rebuilt_spec, record_spec
from tuner.study.study_file import load_study_spec
from tuner.trial.factory import make_sampler, make_search
from tuner.trial.launch import start_fork_server
from tuner.trial.trial_function import Launch, make_trial_function, run_trials

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def open_study(spec: StudySpec, heartbeat: bool = True, worker_index: int = 0,
               allow_changes: bool = False) -> tuple[optuna.Study, list[str]]:
    """Create the study, or load it when it exists (the resume path), with the lines to tell the user: what changed
    in its study spec since (a resume with ``allow_changes``), and the warm starts queued (a new study).

    A resume whose study file changed what the trials run or how they are judged raises
    ``tuner.study.spec_record.StudyChangedError`` unless ``allow_changes``; a study of the same name that ppo-tune did
    not create raises ``NotOurStudyError`` and is left untouched. A resumed study's sampler is seeded anew
    (``tuner.trial.factory.worker_seed``).
    """
    pruner, sampler = make_search(spec, worker_index)  # first: a bad option creates nothing
    check_existing_is_ours(spec)
    storage = open_storage(spec.storage, heartbeat_interval=spec.heartbeat_interval if heartbeat else None)
    try:
        study = optuna.create_study(study_name=spec.name, storage=storage, directions=spec.directions,
                                    sampler=sampler, pruner=pruner)
    except optuna.exceptions.DuplicatedStudyError:  # a resume, a second worker, or a study of someone else's
        study = optuna.load_study(study_name=spec.name, storage=storage, sampler=sampler, pruner=pruner)
        check_ours(study, spec)
        # A new draw for a resumed study, or its sampler would propose again the points it proposed before. Queued
        # trials (warm starts, retries) were proposed by no sampler, so a new study's first worker keeps the seed.
        proposed = [t for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING]
        study.sampler = make_sampler(spec, worker_index, trials_before=len(proposed))
    changes = record_spec(study, spec, allow_changes)
    if changes or not study.metric_names:
        # Optuna's own views label the objectives with these; the rest is read from the stored spec alone
        # (tuner.study.stored_spec), which is stored once.
        study.set_metric_names([objective.metric for objective in spec.objectives])
    messages = [f"study spec changed (--allow-changes): {change}" for change in changes]
    messages += enqueue_warm_starts(study, spec.enqueue)
    if spec.population is not None:
        messages += queue_first_generation(study, spec.population)
    return study, messages


class StopWhenTargetReached:
    """Stops this worker once finished + running trials reach the target, or too many trials failed, or the last
    few failed with one error (``tuner.run.failure_streak``).

    Counting running trials keeps parallel workers from overshooting the target; the failure cap and the streak
    keep a broken setup from failing trials forever.
    """

    def __init__(self, n_trials: int | None, max_failures: int, queue_only: bool = False) -> None:
        self.n_trials = n_trials
        self.max_failures = max_failures
        self.queue_only = queue_only

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        trials = study.get_trials(deepcopy=False)
        if self.queue_only:  # a validation study: its queue is the whole job, and one failing config is a result
            if not any(t.state == TrialState.WAITING for t in trials):
                study.stop()
            return
        finished_or_running = sum(t.state in FINISHED or t.state == TrialState.RUNNING for t in trials)
        failed = sum(t.state == TrialState.FAIL for t in trials)
        if (self.n_trials is not None and finished_or_running >= self.n_trials) or failed >= self.max_failures \
                or failure_streak(trials) is not None:
            study.stop()


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def run_worker(
    spec: StudySpec, n_trials: int | None, timeout: float | None, threads: int | None, worker_index: int = 0,
    allow_changes: bool = False, ray_address: str | None = None,
) -> None:
    """Run trials of ``spec`` until ``n_trials`` are finished study-wide or ``timeout``, each in its own process(es)
    with ``threads`` CPU threads between them (several workers share the cores; oversubscribed BLAS threads slow
    tiny models down tenfold). With ``ray_address`` each trial's process runs as a task on that Ray cluster
    (``tuner.trial.ray_launch``) instead of on this machine."""
    study, _ = open_study(spec, worker_index=worker_index, allow_changes=allow_changes)
    create_tables(create_engine(spec.storage))
    queue_only = VALIDATION_OF_ATTR in study.user_attrs
    if queue_only and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return
    if n_trials is not None and finished_count(study) >= n_trials:
        return
    launch: Launch | None = None
    if ray_address is not None:
        from tuner.trial.ray_launch import connect, ray_launcher  # Ray is an extra: imported only when asked for

        launch = ray_launcher(with_gpus=connect(ray_address).gpus > 0)
    elif spec.processes_per_trial == 1:
        start_fork_server()  # now, so that its imports overlap with the first trial's sampling
    stopper = StopWhenTargetReached(n_trials, max_failures=max(5, n_trials or 0), queue_only=queue_only)
    # Racing (or the population) queues before the stopper counts, so the next run is waiting when the next trial
    # is asked for.
    queuer: Callable[[optuna.Study, FrozenTrial], None] | None = None
    if spec.population is not None and not queue_only:
        if population_over(study):
            return
        queuer = PopulationController(spec.population, spec.search_space, spec.directions[0] == "maximize",
                                      spec.storage, upper_limit(spec.constraints), ranking=spec.objectives[0])
    elif not queue_only:
        queuer = Racing(spec.seed_policy, int(spec.base.get("seed", PPOConfig.seed)), TrialBudget(n_trials, timeout))
    run_trials(study, make_trial_function(spec, threads, queue_only, launch), timeout=timeout,
               callbacks=[*([queuer] if queuer else []), stopper])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuner.run.worker")
    parser.add_argument("study", help="A study file, or with --stored the name of a study in --storage.")
    parser.add_argument("--stored", action="store_true",
                        help="Run the study as its stored spec says (a validation study has no file).")
    parser.add_argument("--storage", default=None)
    parser.add_argument("--n-trials", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--worker-index", type=int, default=0, help="Offsets the sampler seed per worker.")
    parser.add_argument("--allow-changes", action="store_true",
                        help="Resume even if the study file changed what the study runs or how it judges trials.")
    parser.add_argument("--ray-address", default=None,
                        help="Run each trial as a task on the Ray cluster at this address (run --launcher ray).")
    args = parser.parse_args(argv)
    quiet_hugging_face()
    sigterm_as_interrupt()  # a scheduler that signals every process of the job: end the trial as Ctrl-C does
    try:
        if args.stored:
            spec = rebuilt_spec(optuna.load_study(study_name=args.study, storage=open_storage(args.storage)),
                                args.storage)
        else:
            spec = load_study_spec(args.study, args.storage)
        if args.allow_changes:
            open_study(spec, heartbeat=False, allow_changes=True)
        run_worker(spec, args.n_trials if args.n_trials is not None else spec.n_trials,
                   args.timeout if args.timeout is not None else spec.timeout, args.threads, args.worker_index,
                   ray_address=args.ray_address)
    except InputError as error:  # a study file that is wrong, or no longer the study's own
        print(f"python -m tuner.run.worker: error: {error}", file=sys.stderr)
        return 2
    except Terminated:
        return 143
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    sys.exit(run_as_process(main))
