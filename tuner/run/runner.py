"""``ppo-tune run``: run K workers on this machine and follow the study with a progress bar.

K workers are K processes (``python -m tuner.run.worker``). A single worker with this process's environment runs in this
process instead, the same worker code on the same command line: a process less for the common case, and its imports
and fork server not paid twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from tuner.run.commands import worker_commands
from tuner.run.conclusion import conclude
from tuner.run.follow import recover_dead_trials, run_workers
from tuner.run.task_build import build_task_first
from tuner.run.worker import FINISHED, open_study
from tuner.search.kl_target_notice import reach_notice
from tuner.study.inert_knobs import inert_notice
from tuner.study.judge_notice import no_judge_notice
from tuner.study.spec import StudySpec

if TYPE_CHECKING:  # only --launcher ray makes one
    from tuner.trial.ray_launch import RayCluster


def run_study(spec: StudySpec, n_trials: int | None, timeout: float | None, workers: int,
              console: Console | None = None, allow_changes: bool = False, validation: bool = False,
              ray: RayCluster | None = None) -> int:
    """Create or resume the study, run ``workers`` workers, and return an exit status (130 on Ctrl-C, 143 on
    SIGTERM: either stops every worker and its trial, and queues the running trials again). With ``ray`` the
    workers run their trials as tasks on that cluster (``tuner.trial.ray_launch``). ``validation``: the study is a
    validation (``tuner.production.validation``): its workers run its queue from its stored spec (it has no file),
    and every run trains to the end, so there is no search to report on (the reach notice, pruning's savings) and a
    configuration failing on every seed is a result, not a reason to stop."""
    # soft_wrap: an event is one line however long, so that output piped to a file or a pager is not cut at 80
    # columns (rich's width when stderr is no terminal); a terminal wraps it for the eye.
    console = console or Console(stderr=True, soft_wrap=True)
    # First: too few GPUs creates no study.
    commands = worker_commands(spec, n_trials, timeout, workers, stored=validation, ray=ray)
    study, messages = open_study(spec, allow_changes=allow_changes)
    # A validation fixes each configuration: nothing is searched, so nothing is searched in vain.
    notices = [] if validation else [reach_notice(spec.search_space, spec.base),
                                     inert_notice(spec.search_space, spec.base),
                                     no_judge_notice(spec.objectives, spec.base)]
    for message in [*messages, *[notice for notice in notices if notice]]:
        console.print(message, soft_wrap=True, markup=False)
    already = len(study.get_trials(deepcopy=False, states=FINISHED))
    if already:
        console.print(f"resuming study {spec.name!r}: {already} trials already finished")
    # The study's tables are made by each worker as it opens the study (tuner.run.worker.run_worker).
    recover_dead_trials(study, spec.heartbeat_interval, console)
    if ray is None:  # a Ray cluster's nodes build on their own disks
        build_task_first(spec.base, spec.search_space, console)
    stopped, returncodes = run_workers(commands, ray, study, spec, n_trials, already, console)
    if stopped is not None:
        how = "terminated (SIGTERM)" if stopped == 143 else "interrupted"
        console.print(f"{how}: finished trials are saved; rerun the same command to resume {spec.name!r}",
                      soft_wrap=True, markup=False)
        return stopped
    return conclude(study, spec, validation, returncodes, console)
