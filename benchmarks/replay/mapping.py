"""A sampler's proposal mapped onto the curve table: the nearest configuration in a normalised space.

Each searched parameter becomes one coordinate in [0, 1]: (v - low) / (high - low) for a range, on log v for a log
range; a categorical's coordinate is its choice, and two choices differ by 1 or 0. Between two points the distance is

    d(p, q) = sqrt( sum over parameters of c_i^2 ),
    c_i = |x_i(p) - x_i(q)| (both in force, a range), [p_i != q_i] (both in force, a categorical),
          1 (in force at one point only), 0 (at neither)

so a point under ``kl_control: fixed`` (with ``kl_coef``) lies at least sqrt(3) from one under ``adaptive`` (with
``kl_target``): the mode, the coefficient and the target each cost 1.

With the study's ``base``, the index adds one derived coordinate, the step mass (:func:`step_mass`: the log of the
policy's learning rate summed over the run's optimizer steps), scaled to [0, 1] over the table's rows. With
``weights`` (one per coordinate, the step mass last; ``benchmarks.replay.metric`` fits them) the distance is

    d_w(p, q) = sqrt( sum_i w_i c_i^2 )

Example::

    index = TableIndex(space, [config.params for config in configs])
    order, distances = index.nearest(trial.params, 2)   # rows of the nearest two, and how far each lies
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tuner.search.kl_model import log10_step_mass
from tuner.search.space import ParamSpec

STEP_MASS = "step_mass"
"""The derived coordinate's name, as weights and reports call it."""


def coordinate(spec: ParamSpec, value: Any) -> float:
    """One parameter's normalised coordinate: a range's position in [0, 1] (on a log scale for a log range), a
    categorical's choice index."""
    if spec.type == "categorical":
        return float(list(spec.choices).index(value))
    assert spec.low is not None and spec.high is not None  # numeric parameters have both
    if spec.log:
        return (math.log(value) - math.log(spec.low)) / (math.log(spec.high) - math.log(spec.low))
    return (float(value) - spec.low) / (spec.high - spec.low)


def point_distance(space: Mapping[str, ParamSpec], p: Mapping[str, Any], q: Mapping[str, Any]) -> float:
    """d(p, q) of the module docstring, one parameter at a time: the slow, obvious form."""
    total = 0.0
    for name, spec in space.items():
        if name in p and name in q:
            if spec.type == "categorical":
                total += float(p[name] != q[name])
            else:
                total += (coordinate(spec, p[name]) - coordinate(spec, q[name])) ** 2
        elif name in p or name in q:
            total += 1.0
    return math.sqrt(total)


def step_mass(point: Mapping[str, Any], base: Mapping[str, Any]) -> float:
    """log10 of the policy's learning rate summed over a run's optimizer steps: the tuner's own
    (``tuner.search.kl_model.log10_step_mass``), so the replay and the frontier-guided search measure one thing."""
    return log10_step_mass(point, base)


class TableIndex:
    """The table's points as a matrix of coordinates (NaN where a parameter is not in force), for the distances from
    one proposal to every row at once; with ``base``, the step mass as a last coordinate; with ``weights``, d_w."""

    def __init__(self, space: Mapping[str, ParamSpec], points: Sequence[Mapping[str, Any]],
                 base: Mapping[str, Any] | None = None, weights: Sequence[float] | np.ndarray | None = None) -> None:
        self.space = dict(space)
        self.base = None if base is None else dict(base)
        self.mass_range = (0.0, 1.0)
        if self.base is not None and points:
            masses = [step_mass(point, self.base) for point in points]
            self.mass_range = (min(masses), max(masses) - min(masses) or 1.0)
        self.names = [*self.space, *([STEP_MASS] if self.base is not None else [])]
        self.categorical = np.array([spec.type == "categorical" for spec in self.space.values()]
                                    + [False] * (self.base is not None))
        self.weights = np.ones(len(self.names)) if weights is None else np.asarray(weights, dtype=float)
        if self.weights.shape != (len(self.names),):
            raise ValueError(f"weights: expected {len(self.names)} ({', '.join(self.names)}), got {len(self.weights)}")
        self.matrix = np.stack([self.vector(point) for point in points]) if points else np.zeros((0, len(self.names)))

    def vector(self, point: Mapping[str, Any]) -> np.ndarray:
        coordinates = [coordinate(spec, point[name]) if name in point else math.nan
                       for name, spec in self.space.items()]
        if self.base is not None:
            low, span = self.mass_range
            coordinates.append((step_mass(point, self.base) - low) / span)
        return np.array(coordinates)

    def costs(self, point: Mapping[str, Any]) -> np.ndarray:
        """c_i^2 of the module docstring for every row (rows x coordinates), unweighted."""
        return self.vector_costs(self.vector(point))

    def vector_costs(self, p: np.ndarray) -> np.ndarray:
        """:meth:`costs` of a point already turned into coordinates (a row of ``matrix`` included)."""
        here, there = ~np.isnan(p), ~np.isnan(self.matrix)
        both = here & there
        with np.errstate(invalid="ignore"):  # NaN coordinates of parameters not in force; masked out below
            gap = np.where(self.categorical, (self.matrix != p).astype(float), (self.matrix - p) ** 2)
        return np.asarray(np.where(both, gap, (here != there).astype(float)))

    def distances(self, point: Mapping[str, Any]) -> np.ndarray:
        """d_w(point, row) for every row (d of :func:`point_distance` with unit weights and no base)."""
        return np.asarray(np.sqrt(self.costs(point) @ self.weights))

    def nearest(self, point: Mapping[str, Any], count: int = 1) -> tuple[list[int], list[float]]:
        """The rows of the ``count`` nearest points, nearest first (the earlier row on a tie), and their distances."""
        distance = self.distances(point)
        order = np.argsort(distance, kind="stable")[:count]
        return [int(row) for row in order], [float(distance[row]) for row in order]
