"""The replay's mapping fitted to the table: one weight per coordinate of ``benchmarks.replay.mapping.TableIndex``,
chosen so that a configuration's nearest other row predicts its TRUE value, and how well that holds on rows the fit
never saw.

With unit weights every parameter counts alike, and in the quickstart's 8-dimensional space a row's nearest other row
says nothing of its value (Spearman about 0 over the table), because most parameters matter little and what does
matter, the step mass, is a product of three of them. The weights are fitted by coordinate search over ``GRID``:
each sweep tries every grid value for each weight in turn and keeps one when it raises

    rho(w) = Spearman( v_i, v_{nn_w(i)} ),   nn_w(i) = argmin_{j != i} d_w(p_i, p_j)

over the rows i given (leave one out). Held out: fit on one half of the rows, map the other half onto it, and take
the Spearman of their values against their nearest rows' (both ways round, averaged). That is the figure the
replay's README quotes for how faithful the mapping is.

Example::

    weights = fit_weights(index, values)
    TableIndex(space, points, base, weights)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from benchmarks.replay.mapping import TableIndex
from ppo_core.tasks.ranks import rank_correlation

GRID = (0.0, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
SWEEPS = 3
FOLD_SEED = 0


def pair_costs(index: TableIndex) -> np.ndarray:
    """Every row's c_i^2 against every row (rows x rows x coordinates), unweighted; from the index's own matrix."""
    return np.stack([index.vector_costs(row) for row in index.matrix]) if len(index.matrix) \
        else np.zeros((0, 0, len(index.names)))


def nearest_rank_correlation(costs: np.ndarray, values: np.ndarray, weights: np.ndarray,
                             queries: Sequence[int], rows: Sequence[int]) -> float:
    """Spearman of each query's value against its nearest row's (d_w; a query never maps onto itself)."""
    distance = costs[np.ix_(queries, rows)] @ weights
    distance[np.asarray(queries)[:, None] == np.asarray(rows)[None, :]] = math.inf
    nearest = np.asarray(rows)[np.argmin(distance, axis=1)]
    return rank_correlation(list(values[list(queries)]), list(values[nearest]))


def fit_weights(costs: np.ndarray, values: np.ndarray, rows: Sequence[int] | None = None) -> np.ndarray:
    """Coordinate search over ``GRID`` for the weights with the best leave-one-out rho over ``rows`` (all rows by
    default), from unit weights; a weight moves only when rho rises."""
    rows = list(range(len(values))) if rows is None else list(rows)
    weights = np.ones(costs.shape[-1])
    best = nearest_rank_correlation(costs, values, weights, rows, rows)
    for _ in range(SWEEPS):
        moved = False
        for k in range(len(weights)):
            for value in GRID:
                trial = weights.copy()
                trial[k] = value
                if not trial.any():
                    continue
                rho = nearest_rank_correlation(costs, values, trial, rows, rows)
                if rho > best + 1e-12:
                    best, weights, moved = rho, trial, True
        if not moved:
            break
    return weights


def held_out_rank_correlation(costs: np.ndarray, values: np.ndarray, seed: int = FOLD_SEED) -> float:
    """Fit on a random half, map the other half onto it, and the reverse; the mean of the two rhos."""
    order = np.random.default_rng(seed).permutation(len(values))
    halves = [list(order[: len(order) // 2]), list(order[len(order) // 2:])]
    rhos = []
    for fit, held in (halves, halves[::-1]):
        weights = fit_weights(costs, values, fit)
        rhos.append(nearest_rank_correlation(costs, values, weights, held, fit))
    return float(np.mean(rhos))
