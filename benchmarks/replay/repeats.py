"""One replay repeat, as a worker process runs it: the table and its index loaded once per process, then one
strategy's in-memory study over it (``benchmarks.replay.study.run_repeat``).

This lives outside the package's ``__main__``: a process that ``--workers`` spawns imports the function it is sent by
its module's name, and a spawned process cannot import ``benchmarks.replay.__main__`` (it would be its own
``__main__``), so a pool function defined there fails in every worker with "Can't get attribute".
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path

import numpy as np

from benchmarks.replay.mapping import TableIndex
from benchmarks.replay.metric import fit_weights, pair_costs
from benchmarks.replay.strategies import STRATEGIES, Fidelity
from benchmarks.replay.study import Context, RepeatLog, run_repeat
from benchmarks.replay.table import Table, load_table


def fidelity(table: Table) -> Fidelity:
    """The rungs' scale: the longest runs' length, and their first evaluation's update."""
    runs = [run for config in table.configs.values() for run in config.runs.values()]
    longest = max(run.planned_updates for run in runs)
    first = min(run.eval_updates[0] for run in runs if run.planned_updates == longest and run.evals)
    return Fidelity(min_resource=first, max_resource=longest)


MAPPINGS = ("fitted", "uniform")
"""``fitted``: the step mass as a coordinate and weights fitted to the table (``benchmarks.replay.metric``);
``uniform``: the searched parameters alone, each weighing 1."""


def finite_rows(table: Table, ids: tuple[int, ...]) -> list[int]:
    """The index rows whose configuration has a TRUE value (none diverged before evaluating)."""
    return [row for row, config_id in enumerate(ids) if not math.isnan(table.configs[config_id].true_value)]


def only_rows(table: Table, only: tuple[tuple[str, str], ...]) -> Table:
    """The table with only the configurations whose every named parameter has the given value (compared as text,
    as the command line gives it): a sub-table a narrower space's proposals are judged on."""
    if not only:
        return table
    kept = {config_id: config for config_id, config in table.configs.items()
            if all(str(config.params.get(name)) == value for name, value in only)}
    return dataclasses.replace(table, configs=kept)


@functools.lru_cache(maxsize=2)
def loaded(table_path: Path, rows: int | None, mapping: str, space_path: Path,
           only: tuple[tuple[str, str], ...] = ()) -> Context:
    """The study file, the table and its index, with no budget yet: built once per process."""
    from tuner.study.study_file import load_study_spec

    spec = load_study_spec(space_path)
    table = only_rows(load_table(table_path, spec.objectives[0], spec.constraints, rows, spec.base), only)
    if not table.configs:
        raise SystemExit(f"{table_path}: no configuration with a run on every table seed")
    ids = tuple(table.configs)
    points = [table.configs[config_id].params for config_id in ids]
    if mapping == "uniform":
        return Context(spec, table, TableIndex(spec.search_space, points), ids, 0, fidelity(table))
    unit = TableIndex(spec.search_space, points, spec.base)
    finite = finite_rows(table, ids)
    values = np.array([table.configs[ids[row]].true_value for row in finite])
    weights = fit_weights(pair_costs(unit)[np.ix_(finite, finite)], values)
    return Context(spec, table, TableIndex(spec.search_space, points, spec.base, weights), ids, 0, fidelity(table))


Only = tuple[tuple[str, str], ...]


def context(table_path: Path, rows: int | None, budget: int, mapping: str, space_path: Path,
            only: Only = ()) -> Context:
    return dataclasses.replace(loaded(table_path, rows, mapping, space_path, only), budget=budget)


def one_repeat(job: tuple[Path, int | None, int, str, Path, Only, str, int, int]) -> tuple[str, int, RepeatLog, float]:
    table_path, rows, budget, mapping, space_path, only, name, sampler_seed, repeat = job
    started = time.perf_counter()
    log = run_repeat(STRATEGIES[name], context(table_path, rows, budget, mapping, space_path, only), sampler_seed,
                     repeat)
    return name, repeat, log, time.perf_counter() - started
