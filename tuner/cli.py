"""The tuner's subcommands: ``run`` a study, ``list`` studies, ``show`` a study's trials, print its ``best`` config."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ppo_core.errors import InputError, first_line
from tuner.store.messages import one_line
from tuner.store.paths import DEFAULT_STUDIES_DIR, storage_urls

if TYPE_CHECKING:  # optuna and pandas load only for the commands that use them
    import optuna
    import pandas as pd

    from tuner.production.horizon import Carried
    from tuner.trial.ray_launch import RayCluster


class UsageError(InputError):
    """Bad input from the command line: printed as one line, exit status 2."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def add_study_commands(commands: Any) -> None:
    """Add ``run``, ``list``, ``show`` and ``best`` to an argparse subparsers object; each sets ``handler``."""
    run = commands.add_parser("run", help="Create or resume a study and run its trials.")
    run.add_argument("study", help="Study file, e.g. studies/quickstart.yaml")
    run.add_argument("--n-trials", type=int, default=None, help="Finished trials to reach (overrides the file).")
    run.add_argument("--timeout", type=float, default=None, help="Seconds after which no new trial starts.")
    run.add_argument("--storage", default=None, help="Optuna storage URL (overrides the file).")
    run.add_argument("--workers", type=int, default=None,
                     help="Worker processes on this machine (default: one per GPU, else 1).")
    run.add_argument("--allow-changes", action="store_true",
                     help="Resume the study even though the file changed its objectives, base, search space, "
                          "sampler, pruner, KL guard, constraints or warm starts (the new definition is kept).")
    _add_launcher_flags(run)
    run.set_defaults(handler=_storage_errors_as_input(command_run))

    from tuner.production.horizon import PILOT_SEEDS

    validate = commands.add_parser(
        "validate", help="Rerun a study's best configurations on seeds it never used; mean and 95%% CI of each.")
    validate.add_argument("name", help="Study name.")
    validate.add_argument("--top-k", type=int, default=3, help="Configurations to rerun, best first (default 3).")
    validate.add_argument("--seeds", type=int, default=5, help="Fresh seeds per configuration (default 5).")
    validate.add_argument("--storage", default=None,
                          help=f"Storage URL (default: every {DEFAULT_STUDIES_DIR}/*.db).")
    validate.add_argument("--workers", type=int, default=None,
                          help="Worker processes on this machine (default: one per GPU, else 1).")
    validate.add_argument("--format", choices=("table", "json"), default="table")
    _add_production_flags(validate, "Validate the configurations in a production run of N episodes",
                          f"Validate the configurations on this policy: first {PILOT_SEEDS} pilot runs each there, "
                          "whose KL rescales the learning rate (kl_pilot), then the rescaled configuration on the "
                          "fresh seeds.")
    _add_launcher_flags(validate)
    validate.set_defaults(handler=_storage_errors_as_input(command_validate))

    handlers = {"list": command_list, "show": command_show, "best": command_best}
    for name, help_text in (("list", "List studies with trial counts and best values."),
                            ("show", "Print a study's trial table."),
                            ("best", "Print the best trial's full config.")):
        sub = commands.add_parser(name, help=help_text)
        if name != "list":
            sub.add_argument("name", help="Study name.")
        sub.add_argument("--storage", default=None,
                         help=f"Storage URL (default: every {DEFAULT_STUDIES_DIR}/*.db).")
        if name == "best":
            from tuner.exports import EXPORT_FORMATS  # light: the tables and ppo_core.config (no torch)

            sub.add_argument("--format", choices=("yaml", "json", *EXPORT_FORMATS), default="yaml",
                             help="yaml or json: the config as ppo-tune reads it; the others: arguments for another "
                                  "trainer, with what it lacks as # comments (trl-args is trl-ppo's old name).")
            _add_production_flags(sub, "Print the configuration for a production run of N episodes",
                                  "Print the configuration for a production run on this policy, its learning rate "
                                  "rescaled from the pilot that ppo-tune validate --policy-model ran there.")
        sub.set_defaults(handler=_storage_errors_as_input(handlers[name]))


def _add_production_flags(parser: argparse.ArgumentParser, what: str, policy: str) -> None:
    from tuner.production.horizon import PRODUCTION_RULE, RULES

    default = (f"{PRODUCTION_RULE}, measured to keep a winner where it was tuned" if PRODUCTION_RULE
               else "as_tuned, since no rule is measured to transfer")
    parser.add_argument("--total-episodes", default=None, metavar="N",
                        help=f"{what}: at least the trial's own total_episodes, carried there by --rule.")
    parser.add_argument("--rule", choices=tuple(RULES), default=None,
                        help="How to carry the configuration to N episodes: as_tuned (only the length changes), "
                             "step_mass (lr scaled to keep lr x updates), power_law (lr x updates^0.72 kept), kl_held "
                             "(the adaptive KL controller holds the KL the trial ended at). Default: "
                             f"{default}.")
    parser.add_argument("--policy-model", default=None, metavar="PATH",
                        help=f"{policy} A local directory or a hub name, as sft_model_path takes.")


def _add_launcher_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--launcher", choices=("local", "ray"), default="local",
                        help="local: trials run on this machine (default). ray: each trial runs as a Ray task asking "
                             "for processes_per_trial GPUs, packed and queued over the cluster (pip install -e "
                             "'.[ray]'); --workers defaults to the cluster's GPUs / processes_per_trial, or its CPUs.")
    parser.add_argument("--ray-address", default=None,
                        help="With --launcher ray: the cluster's address (default: the cluster running on this "
                             "machine, else a new local one).")


@contextlib.contextmanager
def _launcher(args: argparse.Namespace, storage: str, processes_per_trial: int) -> Iterator[RayCluster | None]:
    """The Ray cluster the study's trials run on under ``--launcher ray``, connected and checked for the study, or
    None for the local launcher."""
    if args.launcher != "ray":
        if args.ray_address is not None:
            raise UsageError("--ray-address: only with --launcher ray")
        yield None
        return
    from tuner.trial.ray_launch import ray_cluster

    with ray_cluster(args.ray_address, storage, processes_per_trial) as cluster:
        yield cluster


def _default_workers(args: argparse.Namespace, ray: RayCluster | None, processes_per_trial: int) -> int:
    """``--workers``, else one per GPU, or per group of processes_per_trial GPUs (on this machine, or on the Ray
    cluster, where a CPU-only cluster counts its CPUs)."""
    from tuner.run.runner import visible_gpus

    if args.workers:
        return int(args.workers)
    if ray is not None:
        return ray.default_workers(processes_per_trial)
    return max(1, len(visible_gpus()) // processes_per_trial)


def _storage_errors_as_input(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A storage error the opening checks (``tuner.store.database``) did not foresee is still one line: bad input when
    the URL cannot be parsed (exit 2), a failure at run time when the database fails later, e.g. locked past every retry
    (exit 1)."""

    @functools.wraps(handler)
    def wrapped(args: argparse.Namespace) -> int:
        from sqlalchemy.exc import ArgumentError, DatabaseError

        from ppo_core.errors import RunFailure

        try:
            return handler(args)
        except ArgumentError as error:
            raise UsageError(f"storage: {first_line(error)}") from None
        except DatabaseError as error:
            raise RunFailure(f"storage: {first_line(error)}") from None

    return wrapped


def _warn(command: str, text: str) -> None:
    print(f"ppo-tune {command}: warning: {text}", file=sys.stderr)


def readable_storages(storage: str | None, command: str) -> list[tuple[str, optuna.storages.BaseStorage]]:
    """The storages a reading command reads, each opened read-only (no file created or changed).

    A storage given with ``--storage`` that cannot be read is an error. Of the databases found under ``studies/``,
    each one that cannot be read (corrupt, not Optuna's) is named in one line on stderr, and the others are read.
    """
    from tuner.store.database import StorageError, open_read_only_storage

    opened: list[tuple[str, optuna.storages.BaseStorage]] = []
    for url in storage_urls(storage):
        try:
            opened.append((url, open_read_only_storage(url)))
        except StorageError as error:
            if storage:
                raise
            _warn(command, f"{first_line(error)}; skipped")
    return opened


def find_named_study(name: str, storage: str | None, command: str,
                     ) -> tuple[optuna.Study, str, optuna.storages.BaseStorage]:
    """The study called ``name``, read-only, with the URL and the storage it was found in."""
    import optuna

    for url, opened in readable_storages(storage, command):
        try:
            return optuna.load_study(study_name=name, storage=opened), url, opened
        except KeyError:
            continue
    where = storage or f"{DEFAULT_STUDIES_DIR}/*.db"
    raise UsageError(f"study {name!r} not found in {where}")


def _print_frame(frame: pd.DataFrame, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in frame.columns:
        table.add_column(str(column))
    for row in frame.itertuples(index=False):
        table.add_row(*[_cell(value) for value in row])
    Console(width=max(120, 24 * len(frame.columns))).print(table)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if value != value else f"{value:.4g}"
    return "" if value is None else str(value)


def command_run(args: argparse.Namespace) -> int:
    from tuner.run.runner import run_study
    from tuner.study.checks import check_models
    from tuner.study.config import load_study_spec
    from tuner.study.sections import PPO_CORE

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
    if n_trials is None and timeout is None:
        raise UsageError("n_trials: the study needs n_trials or timeout (in the file or as flags)")
    with _launcher(args, spec.storage, spec.processes_per_trial) as ray:
        workers = _default_workers(args, ray, spec.processes_per_trial)
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
    _print_frame(frame, "studies")
    return 0


def command_show(args: argparse.Namespace) -> int:
    from tuner.run.savings import update_savings
    from tuner.search.frontier_aim import aim_words
    from tuner.search.frontier_sampler import AIM_ATTR
    from tuner.study.edge_findings import edge_findings, format_edge_findings, stored_search_space
    from tuner.study.reports import best_figure, trials_frame

    study, _, _ = find_named_study(args.name, args.storage, args.command)
    frame = trials_frame(study)
    if frame.empty:
        print(f"study {args.name!r} has no trials yet")
        return 0
    savings = update_savings(frame)
    frame.columns = [c.removeprefix("param:") for c in frame.columns]
    _print_frame(frame, f"study {args.name}")
    figure = best_figure(study)
    if figure is not None:  # the figure the study chose its best on, as run, best and the dashboard give it
        print(f"best trial {figure.trial}: {figure.words()}")
    if savings is not None:
        print(savings.line())
    aimed = [t for t in study.get_trials(deepcopy=False) if AIM_ATTR in t.user_attrs]
    if aimed:  # a frontier-guided study: where its latest proposal aimed, and why
        print(aim_words(aimed[-1].user_attrs[AIM_ATTR], aimed[-1].number))
    findings = edge_findings(study.get_trials(deepcopy=False), stored_search_space(study.user_attrs), study.directions)
    if findings:
        print(format_edge_findings(findings))
    return 0


def command_validate(args: argparse.Namespace) -> int:
    import optuna
    from optuna.trial import TrialState

    from tuner.production.horizon import PILOT_SEEDS
    from tuner.production.pilot import piloted
    from tuner.production.validation import load_validation, queue_runs, top_trials, validation_results, validation_spec
    from tuner.run.runner import run_study
    from tuner.run.worker import open_study
    from tuner.store.database import open_storage
    from tuner.study.definition import stored_spec

    for flag, value in (("--top-k", args.top_k), ("--seeds", args.seeds), ("--workers", args.workers)):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be >= 1, got {value}")
    found, url, _ = find_named_study(args.name, args.storage, args.command)
    carried = _carried(args, top_trials(found, args.top_k), url)  # checked before anything is written
    study = optuna.load_study(study_name=args.name, storage=open_storage(url))  # found read-only, written here
    spec = validation_spec(stored_spec(study, url))
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raise UsageError(f"study {args.name!r} has no completed trial to validate")
    unpiloted: dict[int, str] = {}
    with _launcher(args, url, spec.processes_per_trial) as ray:  # first: a launcher that cannot run queues nothing
        validation, _ = open_study(spec, heartbeat=False, allow_changes=True)  # derived from the study: follows it
        workers = _default_workers(args, ray, spec.processes_per_trial)
        status = 0
        if args.policy_model is not None and carried is not None:
            # On another policy the learning rate comes from a pilot there: the pilots run first, then what they
            # rescale (tuner.production.pilot).
            pilots = carried
            _say_queued(queue_runs(study, validation, args.top_k, PILOT_SEEDS, lambda trial: pilots[trial.number],
                                   pilot=True), "pilot")
            status = run_study(spec, None, None, workers, validation=True, ray=ray)
            if status not in (130, 143):  # interrupted: the rest is queued for the rerun
                rescaled = piloted(study, validation, url, pilots)
                carried, unpiloted = rescaled.carried, rescaled.missing
        if status not in (130, 143):
            runs = carried
            _say_queued(queue_runs(study, validation, args.top_k, args.seeds,
                                   None if runs is None else lambda trial: runs.get(trial.number)), "validation")
            validated = run_study(spec, None, None, workers, validation=True, ray=ray)
            status = validated if validated in (130, 143) or status == 0 else status
    episodes = None if args.total_episodes is None else int(args.total_episodes)
    results = validation_results(study, load_validation(args.name, url), episodes, args.policy_model)
    for trial, why in sorted(unpiloted.items()):
        print(f"ppo-tune validate: trial {trial} is not validated on {args.policy_model}: {why}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps([result.to_dict() for result in results], indent=2))
    else:
        at = "" if episodes is None else f" at {episodes} episodes"
        on = "" if args.policy_model is None else f" on {args.policy_model}"
        rules = sorted({result.rule for result in results if result.rule})
        _print_validation(results, study.metric_names[0] if study.metric_names else "value",
                          args.name + at + on + (f" (rule {', '.join(rules)})" if rules else ""))
    if status in (130, 143):  # interrupted or terminated: what finished is printed above, the rest is queued
        return status
    incomplete = [r for r in results if r.pending or r.n == 0]
    return 1 if status != 0 or incomplete or unpiloted else 0


def _say_queued(queued: list[tuple[int, int]], what: str) -> None:
    if queued:
        print(f"queued {len(queued)} {what} runs of trial(s) "
              f"{', '.join(sorted({str(number) for number, _ in queued}, key=int))}", file=sys.stderr)


def _print_validation(results: list[Any], metric: str, name: str) -> None:
    import pandas as pd

    rows = []
    for result in results:
        mean, low, high = result.interval
        rows.append({"trial": result.trial, f"tuning {metric}": result.tuning_value, "n": result.n,
                     "mean": mean, "95% CI low": low, "95% CI high": high, "failed": result.failed,
                     "pending": result.pending})
    _print_frame(pd.DataFrame(rows), f"{name}: validated on fresh seeds, best validated mean first")


def command_best(args: argparse.Namespace) -> int:
    import yaml

    from tuner.exports import TARGETS, exported
    from tuner.production.carry import change_comments, held_at_lengths, notice, pilot_notice, uncarried
    from tuner.production.pilot import piloted
    from tuner.production.validation import load_validation, validation_results
    from tuner.store.attrs import stored_definition
    from tuner.study.reports import best_figure, best_trials, trial_config

    study, url, opened = find_named_study(args.name, args.storage, args.command)
    best = best_trials(study)
    if not best:
        raise UsageError(f"study {args.name!r} has no completed (feasible) trial yet")
    validations = load_validation(args.name, opened)
    validated = [r for r in validation_results(study, validations) if r.n > 0]
    chosen, validation = best[0], None
    figure = best_figure(study, best)
    header = f"best trial {chosen.number}: " + (figure.words() if figure is not None else
                                               f"values {', '.join(f'{v:.4f}' for v in chosen.values)}")
    if validated:
        validation = validated[0]
        chosen = study.get_trials(deepcopy=False)[validation.trial]
        mean, low, high = validation.interval
        header = (f"best trial {chosen.number} by validated mean (ppo-tune validate): {mean:.4f}, 95% CI "
                  f"{low:.4f} to {high:.4f} over {validation.n} fresh seeds; tuning value {chosen.values[0]:.4f}")
    elif len(best) > 1:
        header += f" (first of {len(best)} Pareto-optimal trials, by the first objective)"
    config = trial_config(chosen)
    carried = (_carried(args, [chosen], url) or {}).get(chosen.number)
    said = None if carried is None or args.total_episodes is None else \
        notice(carried, args.name, int(carried.config["total_episodes"]))
    unpiloted = None
    if carried is not None and args.policy_model is not None:  # its learning rate from a pilot there, if one ran
        rescaled = piloted(study, validations, url, {chosen.number: carried})
        carried = rescaled.carried.get(chosen.number, carried)
        if chosen.number in rescaled.missing:
            unpiloted = pilot_notice(chosen.number, args.policy_model, args.name,
                                     None if args.total_episodes is None else int(args.total_episodes),
                                     rescaled.missing[chosen.number])
    held = held_at_lengths(study, validations, chosen)
    comments = [f"# {line}" for line in held] + ([] if carried is None else change_comments(carried)) + \
        ([] if unpiloted is None else [f"# {unpiloted}"])
    if carried is not None:
        config = carried.config
    if args.format == "json":
        print(json.dumps({"trial": chosen.number, "values": chosen.values, "config": config,
                          "validation": validation.to_dict() if validation else None, "held": held,
                          "notices": [line for line in (said, unpiloted) if line],
                          "carried": None if carried is None else {
                              "rule": carried.rule, "changes": [vars(c) for c in carried.changes]}}, indent=2))
    elif args.format == "yaml":
        print(f"# {header}")
        print("".join(f"{line}\n" for line in comments), end="")
        print(yaml.safe_dump(config, sort_keys=False), end="")
    else:
        export = exported(args.format, config)
        lost = [] if carried is None else uncarried(export.settings, export.comments, carried)
        if carried is not None and lost:
            why = "; ".join(line.split(": ", 1)[-1] for name, line in export.comments if name in lost)
            raise UsageError(f"--format {args.format}: cannot carry {', '.join(lost)}, which the rule {carried.rule} "
                             f"sets ({why or 'the target has no such setting'}); choose another --rule or --format")
        print(f"# {header}")
        print("".join(f"{line}\n" for line in comments), end="")
        print(export.render(TARGETS[args.format].layout), end="")
        # Where the target computes something else than the trial, say so where it is seen, not only in the file.
        target = (stored_definition(study.user_attrs) or {}).get("target")
        if export.differences and target is not None and target != args.format:
            print(f"ppo-tune best: study {args.name!r} tuned for {target}; {args.format} computes differently:",
                  file=sys.stderr)
        for line in export.differences:
            print(f"ppo-tune best: {args.format} is not exact: {line}", file=sys.stderr)
    for told in (said, unpiloted):
        if told:
            print(f"ppo-tune best: {told}", file=sys.stderr)
    return 0


def _carried(args: argparse.Namespace, trials: list[optuna.trial.FrozenTrial], url: str) -> dict[int, Carried] | None:
    """Each trial's config carried to ``--total-episodes`` by ``--rule`` and onto ``--policy-model`` (its learning
    rate not yet rescaled for that policy: that takes a pilot, ``tuner.production.pilot``), by trial number; None
    without either flag; every check made before anything is written."""
    from tuner.production.carry import carry, chosen_rule, final_kl, production_episodes, production_policy
    from tuner.production.horizon import on_model
    from tuner.study.reports import trial_config

    if args.total_episodes is None and args.rule is not None:
        raise UsageError("--rule: only with --total-episodes N")
    if args.total_episodes is None and args.policy_model is None:
        return None
    policy = None if args.policy_model is None else production_policy(args.policy_model)
    rule = chosen_rule(args.rule) if args.total_episodes is not None else "as_tuned"
    metrics = None
    if rule == "kl_held":
        from tuner.store.database import open_read_only_engine
        from tuner.store.records import read_stored_metrics

        metrics = read_stored_metrics(open_read_only_engine(url), args.name, [t.number for t in trials])
    carried = {}
    for trial in trials:
        config = trial_config(trial)
        if config.get("total_episodes") is None:
            flag = "--total-episodes" if args.total_episodes is not None else "--policy-model"
            raise UsageError(f"{flag}: trial {trial.number}'s length is set by num_train_epochs, not "
                             "total_episodes; tune with total_episodes to carry it")
        own = int(config["total_episodes"])
        episodes = own if args.total_episodes is None else production_episodes(args.total_episodes, own)
        kl = final_kl(metrics[metrics["trial_number"] == trial.number]) if metrics is not None else float("nan")
        to = carry(config, episodes, rule, kl)
        carried[trial.number] = to if policy is None else on_model(to, policy)
    return carried
