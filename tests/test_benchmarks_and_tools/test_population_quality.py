"""The population benchmark: its power against a slow reference, and its quick mode through every step (each arm's
study, its winner validated, the paired comparisons), with a resumed run reading what the first one finished; its
moonshot (a curve table's best configuration retrained against the population's winners) on the quick run's arms."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import torch
import yaml
from helpers.population_trials import segment_trial
from optuna.trial import TrialState
from scipy import stats  # type: ignore[import-untyped]

from benchmarks import population_moonshot, population_quality
from tuner.store.attrs import KL_HISTORY_ATTR
from tuner.store.segments import Segment
from tuner.study.study_file import load_study_spec

REPO = Path(__file__).resolve().parents[2]

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


def test_a_copys_gap_is_its_donors_objective_less_its_recipients_at_the_ranking_that_made_it() -> None:
    config = {"learning_rate": 1e-4, "kl_coef": 0.05}
    trials = [segment_trial(0, Segment(0, 0, 0, 2), 0.9, config), segment_trial(1, Segment(1, 0, 0, 2), 0.5, config),
              segment_trial(2, Segment(2, 0, 0, 2), None, config, state=TrialState.PRUNED),
              segment_trial(3, Segment(0, 1, 2, 4, "exploit", 1), 0.6, config),  # copied a member behind: -0.4
              segment_trial(4, Segment(1, 1, 2, 4, "exploit", 0), 0.8, config),  # copied the leader: +0.4
              segment_trial(5, Segment(2, 1, 2, 4, "exploit", 0), 0.7, config),  # its own end unknown: no gap
              segment_trial(6, Segment(0, 2, 4, 6, "continue", 3), 0.65, config),
              segment_trial(7, Segment(1, 2, 4, 6, "exploit", 5), 0.75, config)]  # 0.7 - 0.8 at generation 1
    assert population_quality.copy_gaps(trials) == [pytest.approx(-0.4), pytest.approx(0.4), pytest.approx(-0.1)]
    summary = population_quality.copy_summary([{"copy_gaps": [-0.4, 0.4]}, {"copy_gaps": [-0.1]}, {}])
    assert summary["copies"] == 3 and summary["behind"] == 2 and summary["mean_gap"] == pytest.approx(-0.1 / 3)


def test_a_populations_updates_count_each_segment_from_its_start_and_a_segment_pruned_unrun_as_none() -> None:
    config = {"learning_rate": 1e-4, "kl_coef": 0.05}
    history = {KL_HISTORY_ATTR: [0.1] * 4}  # a copied segment's history holds its lineage's 2 updates and its own 2
    trials = [segment_trial(0, Segment(0, 0, 0, 2), 0.9, config, attrs={KL_HISTORY_ATTR: [0.1, 0.2]}),
              segment_trial(1, Segment(0, 1, 2, 4, "exploit", 0), 0.8, config, attrs=history),
              segment_trial(2, Segment(1, 1, 2, 4, "exploit", 0), None, config, state=TrialState.PRUNED)]
    # Counted from its start, the unrun duplicate was -2 and took 2 off the first two's 4: a worker queued it twice.
    assert population_quality.trained_updates(trials) == 4


def test_an_arms_feasible_share_counts_every_validation_run_and_those_within_the_constraints() -> None:
    # Replays that pass the study's KL budget count in the validated mean; the share says how many did not.
    studies: list[dict[str, Any]] = [
        {"validation": {"n": 5, "feasible_runs": 4}}, {"validation": {"n": 5, "feasible_runs": 3}},
        {"validation": {"n": 2, "feasible_runs": None}}, {}]  # no constraint recorded; a study not validated
    assert population_quality.feasible_summary(studies) == {"runs": 12, "feasible": 7, "share": 7 / 12}
    assert math.isnan(population_quality.feasible_summary([{}])["share"])
    # Read within the budget, a winner's mean leaves out its runs past it; runs stored without the flag count.
    runs = [{"state": "COMPLETE", "value": 0.8, "feasible": False},
            {"state": "COMPLETE", "value": 0.5, "feasible": True},
            {"state": "COMPLETE", "value": 0.3}, {"state": "FAIL", "value": None, "feasible": False}]
    result = {"validation": {"runs": runs}}
    assert population_quality.validated_mean(result) == pytest.approx(1.6 / 3)
    assert population_quality.validated_mean(result, within_budget=True) == pytest.approx(0.4)


def test_the_quick_run_compares_every_arm_and_a_resume_reads_it_back(tmp_path: Path) -> None:
    threads, verbosity = torch.get_num_threads(), optuna.logging.get_verbosity()
    work = tmp_path / "work"
    try:
        report = population_quality.main(["--quick", "--out", str(tmp_path / "pq.json"), "--work-dir", str(work)])
        with pytest.raises(SystemExit, match="--resume"):
            population_quality.main(["--quick", "--out", str(tmp_path / "again.json"), "--work-dir", str(work)])
        resumed = population_quality.main(["--quick", "--out", str(tmp_path / "again.json"), "--work-dir",
                                           str(work), "--resume"])
        # The moonshot reads the quick run's arms in this process, whose fork server its runs share.
        moonshot = population_moonshot.main(["--quick", "--arms-file", str(tmp_path / "pq.json"), "--arms",
                                             "population", "default", "--out",
                                             str(tmp_path / "moonshot.json"), "--work-dir", str(tmp_path / "oracle")])
    finally:
        torch.set_num_threads(threads)
        optuna.logging.set_verbosity(verbosity)
    assert set(report["arms"]) == set(population_quality.ARMS)
    for arm, by_seed in report["arms"].items():
        (result,) = by_seed.values()
        assert result["updates_spent"] == 4, arm  # equal compute: 2 runs of 2 updates
        assert math.isfinite(result["validated_mean"]) and result["validation"]["runs"], arm
    assert set(report["comparisons"]) == {"population-default", "population-random", "population-select_only",
                                          "default-random", "backtrack-default", "backtrack-population",
                                          "population-proxy"}
    assert all(c["pairs"] == 1 for c in report["comparisons"].values())
    assert set(report["comparisons_within_budget"]) == set(report["comparisons"])
    runs = [run for by_seed in report["arms"].values() for run in by_seed["0"]["validation"]["runs"]]
    # Each run's constraint values, by Optuna's convention (kept when <= 0): its held-out KL less the budget.
    assert all(run["feasible"] == all(v <= 0 for v in run["constraints"].values()) and run["constraints"]
               for run in runs)
    assert set(report["copies"]) == set(population_quality.POPULATIONS)  # each population's copies, read back
    assert {arm: summary["runs"] for arm, summary in report["feasible"].items()} == \
        {arm: by_seed["0"]["validation"]["n"] for arm, by_seed in report["arms"].items()}
    # The resumed run trained nothing again: the same winners, validated the same.
    assert {arm: r["0"]["validated_mean"] for arm, r in resumed["arms"].items()} == \
        {arm: r["0"]["validated_mean"] for arm, r in report["arms"].items()}
    # The oracle is task seed 1's table's best row, retrained on the tiny task with the table's point queued.
    oracle = moonshot["oracle"]
    assert oracle["config_id"] == 43 and oracle["task_seed"] == 1 and oracle["table_value"] == pytest.approx(0.8194,
                                                                                                            abs=1e-4)
    assert [run["seed"] for run in oracle["validation"]["runs"]] == [1000, 1001]
    # Quick, at the tiny task's own seed: a build the suite has already made, not another task seed's.
    spec = load_study_spec(tmp_path / "oracle" / "moonshot-oracle-t1.yaml")
    assert spec.base["task"] == "shortest_path_tiny" and "task_seed" not in spec.base
    trial = optuna.load_study(study_name="moonshot-oracle-t1",
                              storage=f"sqlite:///{tmp_path / 'oracle' / 'moonshot-oracle-t1.db'}").trials[0]
    assert trial.params == pytest.approx(oracle["params"]) and trial.state == TrialState.COMPLETE
    for arm in ("population", "default"):  # each arm against the same oracle runs
        compared = moonshot["comparisons"][arm]
        assert compared["arm_mean"] == pytest.approx(report["arms"][arm]["0"]["validated_mean"])
        assert compared["mean"] == pytest.approx(compared["arm_mean"] - oracle["mean"])


def slow_moonshot_interval(ours: dict[int, dict[int, float]], oracle: list[float]) -> tuple[float, float, float]:
    """The moonshot's interval written out with loops, its t quantile from scipy.stats."""
    rows = [sum(runs.values()) / len(runs) for runs in ours.values()]
    fresh = sorted({seed for runs in ours.values() for seed in runs})
    columns = []
    for seed in fresh:
        values = [runs[seed] for runs in ours.values() if seed in runs]
        columns.append(sum(values) / len(values))
    parts, freedoms = [], []
    for values in (rows, oracle, columns):
        n = len(values)
        mean = sum(values) / n
        parts.append(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
        freedoms.append(n - 1)
    variance = sum(parts)
    df = math.floor(variance ** 2 / sum(p ** 2 / f for p, f in zip(parts, freedoms, strict=True)))
    mean = sum(rows) / len(rows) - sum(oracle) / len(oracle)
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(variance)
    return mean, mean - half, mean + half


def test_the_moonshots_interval_counts_both_groups_and_the_fresh_seeds_the_winners_share() -> None:
    rng = np.random.default_rng(3)
    ours = {k: {1000 + j: float(0.75 + rng.normal(0, 0.03) + 0.01 * j) for j in range(5)} for k in range(17)}
    ours[4].pop(1003)  # a validation run that failed: its winner's mean is of the other four
    oracle = [float(v) for v in 0.78 + rng.normal(0, 0.04, size=20)]
    got = population_moonshot.moonshot_interval(ours, oracle)
    assert (got["mean"], got["ci_low"], got["ci_high"]) == pytest.approx(slow_moonshot_interval(ours, oracle))
    # The winners' shared seeds widen the interval: a seed that moves every winner moves their mean.
    without_shared = math.sqrt(got["se"] ** 2 - statistics.variance(
        [statistics.fmean(r[s] for r in ours.values() if s in r) for s in range(1000, 1005)]) / 5)
    assert got["se"] > without_shared
    one_oracle_run = population_moonshot.moonshot_interval(ours, oracle[:1])
    assert one_oracle_run["mean"] == pytest.approx(statistics.fmean(
        statistics.fmean(r.values()) for r in ours.values()) - oracle[0]) and math.isnan(one_oracle_run["ci_low"])


@pytest.mark.parametrize(("arguments", "named"), [(["--oracle-seeds", "1"], "--oracle-seeds: 1"),
                                                  (["--arms", "population", "nobody"], "--arms: "),
                                                  (["--table", "missing.jsonl"], "--table: no file")])
def test_the_moonshot_refuses_bad_input_in_one_line_before_any_file(arguments: list[str], named: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        population_moonshot.main(["--quick", "--work-dir", str(tmp_path / "work"), *arguments])
    assert exited.value.code == 2 and not (tmp_path / "work").exists()
    assert named in capsys.readouterr().err.splitlines()[-1]


def test_on_another_study_file_the_arms_keep_it_as_it_stands_and_are_ranked_at_its_evaluations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = yaml.safe_load((REPO / "studies" / "text.yaml").read_text())
    studies = population_quality.arm_studies(text, tmp_path, 3, None, quick=False, own=True)
    assert set(studies) == set(population_quality.ARMS)
    for arm, study in studies.items():
        assert study["name"] == f"pq-smollm2_text-{arm}-s3"
        assert study["base"] == text["base"] and study["search_space"] == text["search_space"], arm
        assert study["objectives"] == text["objectives"] and study["constraints"] == text["constraints"], arm
        if arm != "random":  # the study's own sampler, its settings kept (within_budget), at the pair's seed
            assert study["sampler"] == {**text["sampler"], "seed": 3}, arm
        path = tmp_path / f"{study['name']}.yaml"
        path.write_text(yaml.safe_dump(study))
        load_study_spec(path)  # each arm is a study the tuner runs
    # A population of 8 ranked at each of the study's evaluations, every 16 of its 48 updates.
    assert studies["population"]["population"] == {"size": 8, "segment": 16, "seed": 3}
    assert studies["default"]["seed_policy"] == text["seed_policy"]  # the shipped search, racing as shipped
    # The control ranks its members on the proxy; its winner, like every arm's, is chosen on the study's gold.
    assert studies["proxy"]["population"] == {"size": 8, "segment": 16, "seed": 3, "exploit_on": "eval/score"}
    quick = population_quality.arm_studies(text, tmp_path, 0, None, quick=True, own=True)["population"]
    assert quick["base"]["task"] == "fortunes_tiny" and "sft_model_path" not in quick["base"]
    # A study whose evaluations do not cut its run into whole segments is refused in one line, before any file.
    uneven = tmp_path / "uneven.yaml"
    uneven.write_text(yaml.safe_dump({**text, "base": {**text["base"], "eval_steps": 20}}))
    with pytest.raises(SystemExit) as exited:
        population_quality.main(["--study", str(uneven), "--work-dir", str(tmp_path / "work")])
    assert exited.value.code == 2 and not (tmp_path / "work").exists()
    assert "eval_steps (20) must be a whole number of updates that divides the run's 48" in \
        capsys.readouterr().err.splitlines()[-1]
