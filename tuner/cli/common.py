"""What the tuner's commands share: the usage error, the flags of several commands, the launcher, and reading
studies from their storages, read-only."""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ppo_core.errors import InputError, first_line
from tuner.store.default_storage import DEFAULT_STUDIES_DIR, storage_urls
from tuner.store.messages import one_line

if TYPE_CHECKING:  # optuna and pandas load only for the commands that use them
    import optuna
    import pandas as pd

    from tuner.trial.ray_launch import RayCluster


class UsageError(InputError):
    """Bad input from the command line: printed as one line, exit status 2."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def add_production_flags(parser: argparse.ArgumentParser, what: str, policy: str) -> None:
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


def add_launcher_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--launcher", choices=("local", "ray"), default="local",
                        help="local: trials run on this machine (default). ray: each trial runs as a Ray task asking "
                             "for processes_per_trial GPUs, packed and queued over the cluster (pip install -e "
                             "'.[ray]'); --workers defaults to the cluster's GPUs / processes_per_trial, or its CPUs.")
    parser.add_argument("--ray-address", default=None,
                        help="With --launcher ray: the cluster's address (default: the cluster running on this "
                             "machine, else a new local one).")


@contextlib.contextmanager
def launcher(args: argparse.Namespace, storage: str, processes_per_trial: int) -> Iterator[RayCluster | None]:
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


def default_workers(args: argparse.Namespace, ray: RayCluster | None, processes_per_trial: int) -> int:
    """``--workers``, else one per GPU, or per group of processes_per_trial GPUs (on this machine, or on the Ray
    cluster, where a CPU-only cluster counts its CPUs)."""
    from tuner.run.commands import visible_gpus

    if args.workers:
        return int(args.workers)
    if ray is not None:
        return ray.default_workers(processes_per_trial)
    return max(1, len(visible_gpus()) // processes_per_trial)


def storage_errors_as_input(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
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


def warn(command: str, text: str) -> None:
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
            warn(command, f"{first_line(error)}; skipped")
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


def print_frame(frame: pd.DataFrame, title: str) -> None:
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
