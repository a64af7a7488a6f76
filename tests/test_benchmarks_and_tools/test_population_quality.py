"""The population benchmark: its power against a slow reference, and its quick mode through every step (each arm's
study, its winner validated, the paired comparisons), with a resumed run reading what the first one finished."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch
from scipy import stats  # type: ignore[import-untyped]

from benchmarks import population_quality

pytestmark = pytest.mark.heavy  # runs studies: scheduled first


def simulated_power(pairs: int, delta: float, sigma: float, draws: int = 40_000) -> float:
    """The share of paired t-tests at level 0.05 that reject, over samples drawn under the alternative."""
    rng = np.random.default_rng(0)
    samples = rng.normal(delta, sigma, size=(draws, pairs))
    t = samples.mean(axis=1) / (samples.std(axis=1, ddof=1) / math.sqrt(pairs))
    return float((np.abs(t) > stats.t.ppf(0.975, pairs - 1)).mean())


@pytest.mark.parametrize("pairs", [5, 10, 17])
def test_the_designs_power_is_a_paired_t_tests(pairs: int) -> None:
    assert population_quality.power(pairs) == pytest.approx(simulated_power(pairs, 0.02, 0.027), abs=0.01)
    assert population_quality.power(17) > 0.8 > population_quality.power(16) - 0.02


def test_the_quick_run_compares_every_arm_and_a_resume_reads_it_back(tmp_path: Path) -> None:
    threads, verbosity = torch.get_num_threads(), optuna.logging.get_verbosity()
    work = tmp_path / "work"
    try:
        report = population_quality.main(["--quick", "--out", str(tmp_path / "pq.json"), "--work-dir", str(work)])
        with pytest.raises(SystemExit, match="--resume"):
            population_quality.main(["--quick", "--out", str(tmp_path / "again.json"), "--work-dir", str(work)])
        resumed = population_quality.main(["--quick", "--out", str(tmp_path / "again.json"), "--work-dir",
                                           str(work), "--resume"])
    finally:
        torch.set_num_threads(threads)
        optuna.logging.set_verbosity(verbosity)
    assert set(report["arms"]) == set(population_quality.ARMS)
    for arm, by_seed in report["arms"].items():
        (result,) = by_seed.values()
        assert result["updates_spent"] == 4, arm  # equal compute: 2 runs of 2 updates
        assert math.isfinite(result["validated_mean"]) and result["validation"]["runs"], arm
    assert set(report["comparisons"]) == {"population-default", "population-random", "population-select_only",
                                          "default-random", "backtrack-default", "backtrack-population"}
    assert all(c["pairs"] == 1 for c in report["comparisons"].values())
    # The resumed run trained nothing again: the same winners, validated the same.
    assert {arm: r["0"]["validated_mean"] for arm, r in resumed["arms"].items()} == \
        {arm: r["0"]["validated_mean"] for arm, r in report["arms"].items()}
