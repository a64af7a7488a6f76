"""``ppo-tune run``, ``list`` and ``show``: run a study; list the studies; a study's trials."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from tuner.cli.common import UsageError, default_workers, find_named_study, launcher, print_frame, readable_storages

if TYPE_CHECKING:  # imported where a command runs: a mistyped command line must not wait for Optuna
    import optuna
    import pandas as pd


def command_run(args: argparse.Namespace) -> int:
    from tuner.study.cross_checks import check_models
    from tuner.study.sections import PPO_CORE
    from tuner.study.study_file import load_study_spec

    spec = load_study_spec(args.study, args.storage)
    check_models(spec)  # before the study is stored
    if spec.trainer != PPO_CORE:
        from tuner.study.trainer_check import check_trainer

        check_trainer(spec)
    for flag, value in (("--n-trials", args.n_trials), ("--workers", args.workers)):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be >= 1, got {value}")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout: must be > 0 seconds, got {args.timeout:g}")
    n_trials = args.n_trials if args.n_trials is not None else spec.n_trials
    timeout = args.timeout if args.timeout is not None else spec.timeout
    if spec.population is not None and args.n_trials is not None:
        raise UsageError("--n-trials: a population study trains its members to the run's horizon; it has no count of "
                         "trials to stop at (--timeout still stops it)")
    if n_trials is None and timeout is None and spec.population is None:
        raise UsageError("n_trials: the study needs n_trials or timeout (in the file or as flags)")
    # Imported once the study and the flags are checked: the run's modules bring in SciPy and pandas (1.5-2 s of
    # CPU), which a mistyped path or flag should not wait for.
    from tuner.run.runner import run_study

    with launcher(args, spec.storage, spec.processes_per_trial) as ray:
        workers = default_workers(args, ray, spec.processes_per_trial)
        return run_study(spec, n_trials, timeout, workers, allow_changes=args.allow_changes, ray=ray)


def command_list(args: argparse.Namespace) -> int:
    import pandas as pd

    from tuner.study.reports import study_summaries

    frames = [study_summaries(opened) for _, opened in readable_storages(args.storage, args.command)]
    frame = pd.concat([f for f in frames if not f.empty], ignore_index=True) if any(not f.empty for f in frames) \
        else pd.DataFrame()
    if frame.empty:
        print("no studies found")
        return 0
    print_frame(frame, "studies")
    return 0


def command_show(args: argparse.Namespace) -> int:
    from tuner.store.database import open_read_only_engine
    from tuner.store.records import read_stored_metrics

    study, url, _ = find_named_study(args.name, args.storage, args.command)
    show_study(study, args.name, read_stored_metrics(open_read_only_engine(url), args.name))
    return 0


def show_study(study: optuna.Study, name: str, metrics: pd.DataFrame | None = None) -> None:
    """``show``'s report of a study found already: its trial table, winner, savings, aim, edge findings and, from its
    ``metrics`` frame when given (read once by the caller, who may read it for more), the searched knobs that never
    acted."""
    from tuner.run.savings import update_savings
    from tuner.search.frontier_aim import aim_words
    from tuner.search.frontier_sampler import AIM_ATTR
    from tuner.study.edge_findings import edge_findings, format_edge_findings
    from tuner.study.inert_knobs import format_inert_findings, inert_findings
    from tuner.study.reports import trials_frame
    from tuner.study.stored_spec import read_stored_spec
    from tuner.study.winner import read_winner

    frame = trials_frame(study)
    if frame.empty:
        print(f"study {name!r} has no trials yet")
        return
    savings = update_savings(frame)
    frame.columns = [c.removeprefix("param:") for c in frame.columns]
    print_frame(frame, f"study {name}")
    figure = read_winner(study).figure
    if figure is not None:  # the figure the study chose its best on, as run, best and the dashboard give it
        print(f"best trial {figure.trial}: {figure.words()}")
    if savings is not None:
        print(savings.line())
    aimed = [t for t in study.get_trials(deepcopy=False) if AIM_ATTR in t.user_attrs]
    if aimed:  # a frontier-guided study: where its latest proposal aimed, and why
        print(aim_words(aimed[-1].user_attrs[AIM_ATTR], aimed[-1].number))
    space = read_stored_spec(study.user_attrs, len(study.directions)).search_space
    findings = edge_findings(study.get_trials(deepcopy=False), space, study.directions)
    if findings:
        print(format_edge_findings(findings))
    inert = [] if metrics is None else inert_findings(metrics, space)
    if inert:
        print(format_inert_findings(inert))
