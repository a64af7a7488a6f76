"""The frontier sampler and the Frontier page read where gold peaks alike: on hand-made points and on every study
stored in the repository's benchmark results.

The sampler aims at the smoothed curve's highest point wherever it lies inside the data
(``tuner.search.frontier_points.metrics_peak``, status "peak"); the page names a peak only where gold rises to it and
falls after it by more than the runs' noise (``tuner.search.peak_reading.PeakReading.found``). Until both read one
"found", these tests are expected to fail: they say where the two disagree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from ppo_core.metric_names import EVAL_GOLD_SCORE, EVAL_KL, EVAL_SCORE
from tuner.search.frontier_points import TRIAL_COLUMN, metrics_peak
from tuner.search.peak_reading import read_metrics_peak
from tuner.store.database import open_read_only_engine, open_read_only_storage
from tuner.store.records import read_metrics

REPOSITORY = Path(__file__).resolve().parents[2]
STORED = sorted(REPOSITORY.glob("benchmarks/**/*.db"))
DISAGREE = pytest.mark.xfail(strict=True, reason="the sampler aims at a curve's highest point the page calls unclear")


def flat_study(trials: int = 8, seed: int = 2) -> pd.DataFrame:
    """Gold flat at 0.5 with run-to-run noise of SD 0.05 over 0.5-20 nats: a curve with a highest point, no peak (on
    seed 2 the highest point lies inside the data, as on 3 of the first 8 seeds)."""
    rng = np.random.default_rng(seed)
    rows = []
    for trial in range(trials):
        for update, kl in enumerate(np.geomspace(0.5, 20.0, 6) * np.exp(rng.normal(0, 0.2)), start=1):
            rows.append({TRIAL_COLUMN: trial, "update": update, EVAL_KL: float(kl), EVAL_SCORE: float(np.log(kl)),
                         EVAL_GOLD_SCORE: 0.5 + float(rng.normal(0, 0.05))})
    return pd.DataFrame(rows)


@DISAGREE
def test_the_sampler_aims_only_at_a_peak_the_page_names() -> None:
    metrics = flat_study()
    page = read_metrics_peak(metrics)
    sampler = metrics_peak(metrics)
    assert page is not None and sampler is not None and not page.found and sampler.status == "peak"
    assert sampler.found == page.found, (sampler.status, page.status, page.clearance.numbers())


def stored_metrics(tmp_path: Path) -> dict[str, pd.DataFrame]:
    """Every study in every stored database, by "<folder>/<study>", read from a copy (with its -wal and -shm files):
    the stored files are never opened."""
    studies = {}
    for index, db in enumerate(STORED):
        copy = tmp_path / str(index)
        copy.mkdir()
        for part in db.parent.glob(db.name + "*"):
            shutil.copy(part, copy / part.name)
        url = f"sqlite:///{copy / db.name}"
        engine = open_read_only_engine(url)
        for summary in optuna.get_all_study_summaries(open_read_only_storage(url)):
            studies[f"{db.parent.name}/{summary.study_name}"] = read_metrics(engine, summary.study_name)
        engine.dispose()
    return studies


@DISAGREE
def test_the_sampler_and_the_page_agree_on_every_stored_study(tmp_path: Path) -> None:
    studies = stored_metrics(tmp_path)
    assert len(STORED) >= 10 and len(studies) >= 22  # each benchmark database with its validation study
    disagree = {}
    for name, metrics in studies.items():
        page, sampler = read_metrics_peak(metrics), metrics_peak(metrics)
        if page is None or sampler is None:
            assert page is None and sampler is None, name
            continue
        if sampler.found != page.found or (page.found and sampler.kl != page.peak.kl):
            disagree[name] = (sampler.status, page.status)
    assert not disagree, disagree
