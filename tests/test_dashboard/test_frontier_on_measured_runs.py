"""The Frontier page's reading of a peak on measured SmolLM2 runs of the third text task, against the peak the
seeded over-optimisation curve of that task shows (benchmarks/results/overoptimisation_curve/v3/).

The curve's 5 seeds put gold's peak at 12.2-48.9 nats (the 95% interval of KL at the mean curve's highest
evaluation). A table of 12 random configurations of the study's space, 2 seeds each, spans past it (to 81 nats):
the reader must find the turn there, inside that interval. The study holds its trials within a 10-nat budget and
reaches 12.7 nats: the reader must say gold is still rising, and suggest no KL. On the fifth, sixth and seventh text
tasks, a study with no budget runs past its curve's peak: the reader must find it there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dashboard.frontier_reading import headline
from dashboard.study_reader import StudyRef, open_reader
from ppo_tune.cli import main
from tools.published_figures import interval
from tuner.search.peak_reading import read_metrics_peak, read_peak

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
CURVE = RESULTS / "overoptimisation_curve" / "v3" / "overoptimisation_curve_v3.json"
TABLE = RESULTS / "curve_tables" / "curve_table_smollm2_v3.jsonl"
STUDY = RESULTS / "real_model_study" / "real_model_study_v3" / "study.db"


def curve_peak_interval() -> tuple[float, float]:
    low, high = json.loads(CURVE.read_text())["kl_at_peak"][1:]
    return float(low), float(high)


def table_paths() -> pd.DataFrame:
    """Each run of the table as one trial's path: its held-out evaluations' KL and gold."""
    rows = [{"trial": number, "update": point["update"], "kl": point["eval/kl"], "gold": point["eval/gold_score"],
             "proxy": point.get("eval/score")}
            for number, line in enumerate(TABLE.read_text().splitlines())
            for point in json.loads(line)["evals"] if "eval/kl" in point and "eval/gold_score" in point]
    paths = pd.DataFrame(rows)
    paths["sqrt_kl"] = paths["kl"].clip(lower=0) ** 0.5
    return paths


def test_a_space_past_the_peak_reads_the_peak_the_seeded_curve_shows() -> None:
    low, high = curve_peak_interval()
    reading = read_peak(table_paths())
    assert reading.status == "peak", headline(reading).words
    assert low <= reading.peak.kl <= high, (reading.peak.kl, low, high)
    assert "kl_target" in headline(reading).words


def test_a_study_held_below_the_peak_reads_gold_still_rising_and_suggests_no_kl(tmp_path: Path) -> None:
    _, high = curve_peak_interval()
    database = tmp_path / "study.db"  # the reader opens it read-write; the committed file stays as measured
    shutil.copy(STUDY, database)
    metrics = open_reader(StudyRef(f"sqlite:///{database}", "smollm2_v3")).metrics()
    reading = read_metrics_peak(metrics)
    assert reading is not None and reading.status == "rising", reading and headline(reading).words
    assert reading.peak.kl <= high  # where it stopped rising lies within the curve's reach of the peak
    assert "no kl_target" in headline(reading).words


CURVE_V5 = RESULTS / "overoptimisation_curve" / "v5" / "overoptimisation_curve_v5.json"
FRONTIER_V5 = RESULTS / "real_model_study" / "real_model_study_v5_frontier" / "study.db"


@pytest.mark.parametrize("version", [5, 6, 7])
def test_each_text_tasks_frontier_study_reads_a_peak_inside_its_seeded_curves_interval(version: int,
                                                                                      tmp_path: Path) -> None:
    # Each text task's study with no budget (benchmarks/studies/smollm2_v{5,6,7}_frontier.yaml) ran past gold's peak:
    # the page and the advice must find the turn, inside the t interval of KL at its curve's 3 seeds' own peaks.
    curve = RESULTS / "overoptimisation_curve" / f"v{version}" / f"overoptimisation_curve_v{version}.json"
    seeds = json.loads(curve.read_text())["per_seed"].values()
    _, low, high = interval([float(seed["peak_kl"]) for seed in seeds])
    name = f"smollm2_v{version}_frontier"
    database = tmp_path / "study.db"
    shutil.copy(RESULTS / "real_model_study" / f"real_model_study_v{version}_frontier" / "study.db", database)
    metrics = open_reader(StudyRef(f"sqlite:///{database}", name)).metrics()
    reading = read_metrics_peak(metrics)
    assert reading is not None and reading.status == "peak", reading and headline(reading).words
    assert low <= reading.peak.kl <= high, (reading.peak.kl, low, high)
    assert "kl_target" in headline(reading).words and "no kl_target" not in headline(reading).words


STUDY_V5 = RESULTS / "real_model_study" / "real_model_study_v5" / "study.db"


def test_show_prints_the_pages_reading_after_the_trial_table(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # `ppo-tune show` on a cluster without a browser: the Frontier page's words, from every trial of the study.
    for stored, name, words in ((FRONTIER_V5, "smollm2_v5_frontier", "gold peaks at 25.6 nats of KL"),
                                (STUDY_V5, "smollm2_v5", "no clear peak")):
        database = tmp_path / f"{name}.db"
        shutil.copy(stored, database)
        assert main(["show", name, "--storage", f"sqlite:///{database}"]) == 0
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert last.startswith("frontier (") and words in last, last


def test_show_on_a_study_with_no_trials_says_so_and_reads_no_frontier(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import optuna

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    optuna.create_study(study_name="empty", storage=url)
    assert main(["show", "empty", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "has no trials yet" in out and "frontier (" not in out, out
