"""A sampler's proposal mapped onto the curve table: the nearest configuration in a normalised space.

Each searched parameter becomes one coordinate in [0, 1]: (v - low) / (high - low) for a range, on log v for a log
range; a categorical's coordinate is its choice, and two choices differ by 1 or 0. Between two points the distance is

    d(p, q) = sqrt( sum over parameters of c_i^2 ),
    c_i = |x_i(p) - x_i(q)| (both in force, a range), [p_i != q_i] (both in force, a categorical),
          1 (in force at one point only), 0 (at neither)

so a point under ``kl_control: fixed`` (with ``kl_coef``) lies at least sqrt(3) from one under ``adaptive`` (with
``kl_target``): the mode, the coefficient and the target each cost 1.

Example::

    index = TableIndex(space, [config.params for config in configs])
    order, distances = index.nearest(trial.params, 2)   # rows of the nearest two, and how far each lies
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tuner.search_space import ParamSpec


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


class TableIndex:
    """The table's points as a matrix of coordinates (NaN where a parameter is not in force), for the distances from
    one proposal to every row at once."""

    def __init__(self, space: Mapping[str, ParamSpec], points: Sequence[Mapping[str, Any]]) -> None:
        self.space = dict(space)
        self.categorical = np.array([spec.type == "categorical" for spec in self.space.values()])
        self.matrix = np.stack([self.vector(point) for point in points]) if points else np.zeros((0, len(space)))

    def vector(self, point: Mapping[str, Any]) -> np.ndarray:
        return np.array([coordinate(spec, point[name]) if name in point else math.nan
                         for name, spec in self.space.items()])

    def distances(self, point: Mapping[str, Any]) -> np.ndarray:
        """d(point, row) for every row (see :func:`point_distance`)."""
        p = self.vector(point)
        here, there = ~np.isnan(p), ~np.isnan(self.matrix)
        both = here & there
        with np.errstate(invalid="ignore"):  # NaN coordinates of parameters not in force; masked out below
            gap = np.where(self.categorical, (self.matrix != p).astype(float), (self.matrix - p) ** 2)
        cost = np.where(both, gap, (here != there).astype(float))
        return np.asarray(np.sqrt(cost.sum(axis=1)))

    def nearest(self, point: Mapping[str, Any], count: int = 1) -> tuple[list[int], list[float]]:
        """The rows of the ``count`` nearest points, nearest first (the earlier row on a tie), and their distances."""
        distance = self.distances(point)
        order = np.argsort(distance, kind="stable")[:count]
        return [int(row) for row in order], [float(distance[row]) for row in order]


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, tied values sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def rank_correlation(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rho: Pearson's correlation of the average ranks; NaN with fewer than 2 pairs or a constant side
    (no order to agree with)."""
    if len(xs) < 2:
        return math.nan
    rx, ry = average_ranks(xs), average_ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan
