"""Where a study's objective peaks in KL, read from the study's own evaluations, and how sure that reading is.

Under RLHF a gold score rises with the policy's KL from its start, peaks, and falls as the policy overoptimises its
reward model (Gao, Schulman & Hilton, 2023). Every evaluation of every trial is a point (KL, objective) on that
curve, and each trial's path sweeps through KL as it trains: a few trials already span the range. So the peak is
read from the points themselves, with nothing known of the task beforehand:

- the curve is a local-linear kernel smoother in ln KL (:func:`local_linear`), whose width is chosen by
  leave-one-trial-out cross-validation (:func:`choose_bandwidth`); a local fit counts the few points at high KL as
  much as they deserve where they are, where a global least-squares form is pulled by the many at low KL;
- the peak is the smoothed curve's highest point where enough points support it (:func:`curve_peak`);
- its uncertainty comes from refitting on trials drawn with replacement (points of one trial move together, so they
  are resampled together): the spread of the refitted peaks, and the share of them inside the measured range.

:func:`frontier_peak` does all of that and says in its ``status`` where the smoothed curve's highest point lies:
inside the measured range ("peak"), at the highest KL measured with the objective still rising there ("rising": the
peak lies beyond), at the lowest, falling from it ("falling"), or that no curve can be read yet ("none", with the
reason). It never raises on a study's data. Whether the data single that point out as a peak, against the runs'
noise, is ``tuner.search.peak_reading``'s to say: the one meaning of "found".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

KL_FLOOR = 0.01
"""Nats. KL below this is read as this: a k1 estimate of KL near the start is noise around zero, even negative,
and its logarithm would spread that noise over decades."""
BANDWIDTHS = (0.2, 0.3, 0.45, 0.7, 1.0)
"""Candidate smoother widths, in ln KL (0.7 is a factor of two in KL); each study picks its own by cross-validation."""
NEIGHBOURS = 4
"""Where the evaluations are sparse (often past the peak, where few trials went), the smoother's window widens to
hold this many: on synthetic studies with a known peak, 4 kept every estimate within 0.8-1.04x of it, 6 and 8
overshot up to 2x by smoothing over the turn, and without widening the sparse side was drawn from a point or two."""
GRID_POINTS = 81
MIN_SUPPORT = 3.0
"""A grid point is read only where the kernel weights of the points around it sum to this: about three evaluations
within one width. At the edges of the data one stray point would otherwise draw the curve."""
MIN_TRIALS, MIN_POINTS = 2, 8
PER_TRIAL = 12
"""At most this many points a trial: a longer path (training metrics, one per update) is averaged in runs of
neighbouring KL, so that a study of hundreds of trials of hundreds of updates reads in about a second."""
CV_TRIALS = 40
"""Trials held out one at a time to choose the width: a seeded draw of this many where the study has more."""
RESAMPLES = 200
RESAMPLED_POINTS = 80_000
"""Fewer resamples for a large study: at most this many points refitted in all (200 resamples up to 400 points,
50 at 1,600 or more), which keeps a study of hundreds of trials to about a second."""
MIN_RESAMPLES = 50
INTERVAL = 0.8
"""The peak's interval: the central 80% of the resampled peaks."""


@dataclass(frozen=True)
class FrontierPeak:
    """Where the objective peaks in KL (nats), from ``points`` evaluations of ``trials`` trials.

    ``kl`` is the smoothed curve's best point and ``value`` the curve there; ``kl_low``/``kl_high`` the central
    :data:`INTERVAL` of the peaks refitted on resampled trials, ``inside`` the share of those peaks strictly inside
    the measured KL range. ``kl_min``/``kl_max`` are the lowest and highest KL measured. With ``status`` "none" the
    numbers are nan and ``reason`` says why.
    """

    status: str
    kl: float
    value: float
    kl_low: float
    kl_high: float
    inside: float
    kl_min: float
    kl_max: float
    trials: int
    points: int
    bandwidth: float
    reason: str = ""
    curve_kl: tuple[float, ...] = ()
    """The smoothed curve, to draw: KL (nats) at the grid points where it could be read, and its value there."""
    curve_value: tuple[float, ...] = ()


def kl_range(low: float, high: float) -> str:
    """A range of KL in words, the unit left to the caller: ``f"{low:.3g} to {high:.3g}"``.

    Every KL range the study's readings print (the Frontier page, ``ppo-tune show``, Health's advice, the frontier
    sampler's aim, the edge findings) is written by this one function. "to", not a hyphen: a held-out KL
    estimate can be slightly negative (an unbiased estimator's noise, see :data:`KL_FLOOR`), and
    "-0.0552-49.9" reads as a subtraction where ``kl_range(-0.0552, 49.9)`` reads "-0.0552 to 49.9".
    """
    return f"{low:.3g} to {high:.3g}"


def local_linear(x: np.ndarray, y: np.ndarray, grid: np.ndarray, bandwidth: float,
                 neighbours: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The local-linear smoother of (x, y) at each grid point g, and the kernel weight behind it.

    m(g) = a, where (a, b) minimise  sum_i w_i (y_i - a - b (x_i - g))^2,  w_i = exp(-((x_i - g) / h_g)^2 / 2).
    With S_k = sum_i w_i (x_i - g)^k and T_k = sum_i w_i (x_i - g)^k y_i:
    m(g) = (S_2 T_0 - S_1 T_1) / (S_0 S_2 - S_1^2).
    h_g = max(bandwidth, |x - g| of g's ``neighbours``-th nearest point): where points are sparse the window widens
    to hold that many (none asked, h_g = bandwidth). The weight returned is S_0. Where the points around g cannot
    fix a line (S_0 S_2 - S_1^2 = 0), m(g) is nan.
    """
    dx = x[None, :] - grid[:, None]
    widths = np.full(len(grid), float(bandwidth))
    if neighbours > 0 and len(x):
        kth = min(neighbours, len(x)) - 1
        nearest = np.partition(np.abs(dx), kth, axis=1)[:, kth]
        widths = np.maximum(widths, nearest)
    w = np.exp(-0.5 * (dx / widths[:, None]) ** 2)
    s0, s1, s2 = w.sum(axis=1), (w * dx).sum(axis=1), (w * dx * dx).sum(axis=1)
    t0, t1 = (w * y).sum(axis=1), (w * dx * y).sum(axis=1)
    det = s0 * s2 - s1 * s1
    # Relative to s0^2: a determinant at rounding level means all the weight sits at one x.
    solvable = det > 1e-10 * np.maximum(s0 * s0, np.finfo(float).tiny)
    with np.errstate(invalid="ignore", divide="ignore"):
        curve = np.where(solvable, (s2 * t0 - s1 * t1) / np.where(solvable, det, 1.0), np.nan)
    return curve, s0


def choose_bandwidth(groups: np.ndarray, x: np.ndarray, y: np.ndarray,
                     candidates: Sequence[float] = BANDWIDTHS) -> float:
    """The candidate width whose leave-one-trial-out predictions err least: for each h, the mean over points of
    (y_i - m_{-t(i)}(x_i))^2, m_{-t} fitted without trial t's points (windows widened to :data:`NEIGHBOURS`).
    Points a fit cannot reach are left out of every candidate's mean alike; on a tie the wider width wins (the
    smoother curve)."""
    errors = np.zeros((len(candidates), len(x)))
    for trial in np.unique(groups):
        held, kept = groups == trial, groups != trial
        for row, h in enumerate(candidates):
            predicted, _ = local_linear(x[kept], y[kept], x[held], h, NEIGHBOURS)
            errors[row, held] = (y[held] - predicted) ** 2
    reachable = np.isfinite(errors).all(axis=0)
    if not reachable.any():
        return float(max(candidates))
    means = errors[:, reachable].mean(axis=1)
    best = float(means.min())
    return float(max(h for h, m in zip(candidates, means, strict=True) if m <= best * (1 + 1e-9)))


def readable_curve(x: np.ndarray, y: np.ndarray, bandwidth: float, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The smoothed curve (windows widened to :data:`NEIGHBOURS`) at the grid points where it can be read: inside
    the points' own range, with kernel weight >= :data:`MIN_SUPPORT`. Past the range a local line only extrapolates
    its last slope."""
    curve, support = local_linear(x, y, grid, bandwidth, NEIGHBOURS)
    readable = (support >= MIN_SUPPORT) & np.isfinite(curve) & (grid >= x.min()) & (grid <= x.max())
    return grid[readable], curve[readable]


def curve_peak(x: np.ndarray, y: np.ndarray, bandwidth: float, grid: np.ndarray) -> tuple[float, float, int, int]:
    """(x at the peak, curve there, its position among the readable grid points, their number): the highest point
    of :func:`readable_curve`. (nan, nan, -1, 0) when no grid point is readable."""
    xs, values = readable_curve(x, y, bandwidth, grid)
    if not len(xs):
        return math.nan, math.nan, -1, 0
    at = int(np.argmax(values))
    return float(xs[at]), float(values[at]), at, len(xs)


def thin_paths(t: np.ndarray, k: np.ndarray, v: np.ndarray, per_trial: int = PER_TRIAL,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points (trial ``t``, coordinate ``k``, value ``v``) sorted by trial then ``k``, with each trial of more than
    ``per_trial`` points replaced by the means (of ``k`` and of ``v``) of ``per_trial`` runs of its consecutive
    points, as equal in size as they can be."""
    out_t, out_k, out_v = [], [], []
    for trial in np.unique(t):
        rows = np.flatnonzero(t == trial)
        if len(rows) <= per_trial:
            out_t.append(t[rows])
            out_k.append(k[rows])
            out_v.append(v[rows])
            continue
        runs = np.array_split(rows, per_trial)
        out_t.append(np.full(per_trial, trial))
        out_k.append(np.array([k[run].mean() for run in runs]))
        out_v.append(np.array([v[run].mean() for run in runs]))
    if not out_t:  # no point at all: nothing to thin (np.concatenate refuses an empty list)
        return t[:0], k[:0], v[:0]
    return np.concatenate(out_t), np.concatenate(out_k), np.concatenate(out_v)


def _none(reason: str, trials: int, points: int, kl: np.ndarray) -> FrontierPeak:
    low = float(kl.min()) if len(kl) else math.nan
    high = float(kl.max()) if len(kl) else math.nan
    return FrontierPeak("none", math.nan, math.nan, math.nan, math.nan, math.nan, low, high, trials, points,
                        math.nan, reason)


def frontier_peak(trials: Sequence[int], kl: Sequence[float], values: Sequence[float], maximize: bool = True,
                  resamples: int = RESAMPLES, seed: int = 0) -> FrontierPeak:
    """Where ``values`` (the objective at each evaluation; lower is better unless ``maximize``) peaks in ``kl``,
    the evaluations grouped by ``trials``. The same points in any order give the same answer: they are sorted first,
    and the resampling draws from ``seed``."""
    t, k, v = np.asarray(trials, dtype=np.int64), np.asarray(kl, dtype=float), np.asarray(values, dtype=float)
    keep = np.isfinite(k) & np.isfinite(v)
    t, k, v = t[keep], k[keep], v[keep]
    order = np.lexsort((v, k, t))
    t, k, v = t[order], k[order], v[order]
    ids = np.unique(t)
    if len(ids) < MIN_TRIALS or len(k) < MIN_POINTS:
        return _none(f"{len(k)} evaluations of {len(ids)} trials with a finite KL and objective: the peak needs at "
                     f"least {MIN_POINTS} of {MIN_TRIALS}", len(ids), len(k), k)
    x = np.log(np.maximum(k, KL_FLOOR))
    if float(x.max() - x.min()) < min(BANDWIDTHS):
        return _none(f"every evaluation is at about the same KL ({kl_range(math.exp(x.min()), math.exp(x.max()))} "
                     "nats): no curve to read yet", len(ids), len(k), k)
    y = v if maximize else -v
    t, x, y = thin_paths(t, x, y)  # in ln KL: a run of points is averaged where the smoother reads it
    held = ids if len(ids) <= CV_TRIALS else np.sort(np.random.default_rng(seed).choice(ids, CV_TRIALS, False))
    chosen = np.isin(t, held)
    bandwidth = choose_bandwidth(t[chosen], x[chosen], y[chosen])
    grid = np.linspace(x.min(), x.max(), GRID_POINTS)
    at_x, at_value, position, supported = curve_peak(x, y, bandwidth, grid)
    if supported < 3:
        return _none("too few evaluations around any one KL to draw the curve", len(ids), len(k), k)
    rng = np.random.default_rng(seed)
    members = [np.flatnonzero(t == trial) for trial in ids]
    resamples = max(min(resamples, MIN_RESAMPLES), min(resamples, RESAMPLED_POINTS // len(x)))
    peaks, inside = [], 0
    for _ in range(resamples):
        rows = np.concatenate([members[i] for i in rng.integers(0, len(ids), len(ids))])
        px, _, pos, n = curve_peak(x[rows], y[rows], bandwidth, grid)
        if n:
            peaks.append(px)
            inside += 0 < pos < n - 1
    tail = (1 - INTERVAL) / 2
    low, high = (np.exp(np.quantile(peaks, [tail, 1 - tail])) if peaks else (math.nan, math.nan))
    status = "rising" if position == supported - 1 else "falling" if position == 0 else "peak"
    sign = 1.0 if maximize else -1.0
    xs, curve = readable_curve(x, y, bandwidth, grid)
    return FrontierPeak(status, math.exp(at_x), sign * at_value, float(low), float(high), inside / resamples,
                        float(k.min()), float(k.max()), len(ids), len(k), bandwidth,
                        curve_kl=tuple(float(v) for v in np.exp(xs)), curve_value=tuple(float(v) for v in sign * curve))
