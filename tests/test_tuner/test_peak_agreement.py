"""The frontier sampler and the Frontier page read where gold peaks with one meaning of "found": on hand-made points
and on every study stored in the repository's benchmark results, the sampler aims at a *found* peak exactly where the
page names one, at the same KL.

Both read ``tuner.search.peak_reading`` (a peak the data single out: gold rises to it and falls after it by more than
the runs' noise). Where the smoothed curve's highest point lies inside the data but is not clear, the sampler still
aims there (that is what makes it clear), as a "highest" aim, never as a peak.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import optuna
import pandas as pd

from ppo_core.metric_names import EVAL_GOLD_SCORE, EVAL_KL, EVAL_SCORE
from tuner.search.frontier_aim import choose_aim
from tuner.search.frontier_points import TRIAL_COLUMN
from tuner.search.peak_reading import PeakReading, read_metrics_peak
from tuner.store.database import open_read_only_engine, open_read_only_storage
from tuner.store.records import read_metrics

REPOSITORY = Path(__file__).resolve().parents[2]
STORED = sorted(REPOSITORY.glob("benchmarks/**/*.db"))


def sampler_aim(reading: PeakReading | None) -> tuple[str, float]:
    """The kind and center of the aim the frontier sampler takes from ``reading``, as its proposals do (seed 0's first
    draw, 0.64, is not one of the tenth that explore the whole range)."""
    aim = choose_aim(reading.peak if reading else None, np.array([-3.0, 3.0]), np.random.default_rng(0),
                     found=reading.found if reading else False)
    return aim.kind, aim.center


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


def test_the_sampler_aims_only_at_a_peak_the_page_names() -> None:
    # A flat, noisy study: its curve's highest point lies inside the data, which the sampler read as a found peak.
    reading = read_metrics_peak(flat_study())
    assert reading is not None and reading.highest_inside and not reading.found
    assert sampler_aim(reading)[0] == "highest"


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


def test_the_sampler_and_the_page_agree_on_every_stored_study(tmp_path: Path) -> None:
    studies = stored_metrics(tmp_path)
    assert len(STORED) >= 10 and len(studies) >= 22  # each benchmark database with its validation study
    found = 0
    for name, metrics in studies.items():
        reading = read_metrics_peak(metrics)
        kind, center = sampler_aim(reading)
        assert (kind == "peak") == (reading is not None and reading.found), (name, kind)
        if reading is not None and reading.found:
            found += 1
            assert center == np.log(reading.peak.kl), name
    assert found >= 3  # the three frontier studies, whose peaks both read as found


def test_a_study_whose_every_kl_is_non_finite_reads_as_no_peak_not_an_error() -> None:
    # The one reading thinned an empty set of finite points and raised: the Frontier page, and now the sampler,
    # read such a study (a run that diverged at its first evaluation).
    metrics = flat_study()
    metrics[EVAL_KL] = float("inf")
    reading = read_metrics_peak(metrics)
    assert reading is not None and reading.status == "none" and not reading.found
    assert sampler_aim(reading)[0] == "spread"
