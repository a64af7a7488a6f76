"""``ppo-tune validate``: the best configurations rerun on fresh seeds, with means and 95% intervals."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import optuna
import pytest
from helpers.studies import TESTS_DIR, load, write_study
from optuna.trial import TrialState

from ppo_tune.cli import main
from tuner.cli.winner_commands import passed_over
from tuner.production.confidence import mean_interval
from tuner.production.validation import (
    FIRST_VALIDATION_SEED,
    ValidatedConfig,
    fresh_seeds,
    rank_validated,
    validation_study_name,
)
from tuner.run.worker import run_worker
from tuner.store.attrs import CONFIG_ATTR, SEED_ATTR, VALIDATES_ATTR
from tuner.store.database import create_engine, open_storage
from tuner.store.records import read_metrics
from tuner.study.study_file import load_study_spec

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def _t_quantile_by_integration(p: float, dof: int) -> float:
    """The slow reference: Student's t quantile by bisection on its CDF, integrated from the density (Simpson)."""
    norm = math.gamma((dof + 1) / 2) / (math.sqrt(dof * math.pi) * math.gamma(dof / 2))

    def cdf(x: float, steps: int = 4000) -> float:
        h = x / steps
        f = [norm * (1 + (i * h) ** 2 / dof) ** (-(dof + 1) / 2) for i in range(steps + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    low, high = 0.0, 50.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < p else (low, middle)
    return (low + high) / 2


@pytest.mark.parametrize("values", [[0.5, 0.7], [0.61, 0.58, 0.66, 0.7, 0.52], [1.0, 2.0, 4.0, 8.0, 16.0, 3.0, 1.5]])
def test_mean_interval_matches_a_slow_reference(values: list[float]) -> None:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = _t_quantile_by_integration(0.975, n - 1) * sd / math.sqrt(n)
    got = mean_interval(values)
    assert got == pytest.approx((mean, mean - half, mean + half), rel=1e-6)


def test_mean_interval_of_one_or_no_value() -> None:
    mean, low, high = mean_interval([0.4])
    assert mean == 0.4 and math.isnan(low) and math.isnan(high)
    assert all(math.isnan(v) for v in mean_interval([]))


def test_configurations_that_broke_the_constraints_on_most_fresh_seeds_rank_after_those_that_kept_them() -> None:
    """A KL budget kept on the tuning seeds need not hold on fresh ones: the higher mean that passed the budget on 4
    of 5 fresh seeds ranks after the lower one that kept it on all 5; without constraints every run is feasible and
    the mean alone decides."""
    broke = ValidatedConfig(trial=1, tuning_value=0.7, values=(0.70, 0.72, 0.71, 0.69, 0.73), failed=0, pending=0,
                            feasible_runs=1)
    kept = ValidatedConfig(trial=2, tuning_value=0.6, values=(0.60, 0.62, 0.61, 0.59, 0.63), failed=0, pending=0,
                           feasible_runs=5)
    assert not broke.held and kept.held
    assert [r.trial for r in rank_validated([broke, kept], maximize=True)] == [2, 1]
    unconstrained = dataclasses.replace(broke, feasible_runs=5)
    assert [r.trial for r in rank_validated([unconstrained, kept], maximize=True)] == [1, 2]
    # Half is not most: 2 of 4 fresh runs within the constraints is not held.
    assert not dataclasses.replace(kept, values=kept.values[:4], feasible_runs=2).held
    # best's header names the better mean it passed over, and why.
    said = passed_over(rank_validated([broke, kept], maximize=True), maximize=True)
    assert said == ("; trial 1's validated mean 0.7100 ranks after it, having kept the study's constraints on 1 of "
                    "its 5 fresh seeds")
    assert passed_over(rank_validated([unconstrained, kept], maximize=True), maximize=True) == ""


def test_fresh_seeds_skip_the_used_ones() -> None:
    assert fresh_seeds({1000, 1002}, 3) == [1001, 1003, 1004]
    assert fresh_seeds(set(), 2, first=7) == [7, 8]


def test_validate_reruns_the_top_configs_on_fresh_seeds_and_best_ranks_by_them(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=3, base={"seed": FIRST_VALIDATION_SEED})
    run_worker(load_study_spec(path), n_trials=3, timeout=None, threads=None)  # the study to validate
    capsys.readouterr()
    assert main(["validate", "tiny", "--storage", load_study_spec(path).storage, "--top-k", "2", "--seeds", "2",
                 "--format", "json"]) == 0
    results = json.loads(capsys.readouterr().out)
    study = load(path)
    ranked = sorted((t for t in study.get_trials() if t.state == TrialState.COMPLETE), key=lambda t: -t.values[0])
    assert {r["trial"] for r in results} == {t.number for t in ranked[:2]}
    assert all(r["n"] == 2 and r["ci_low"] <= r["mean"] <= r["ci_high"] for r in results)
    assert results[0]["mean"] >= results[1]["mean"]

    storage = open_storage(load_study_spec(path).storage)
    validation = optuna.load_study(study_name=validation_study_name("tiny"), storage=storage)
    runs = validation.get_trials()
    assert len(runs) == 4 and all(run.state == TrialState.COMPLETE for run in runs)
    # The study trained on seed 1000: the fresh seeds skip it.
    assert sorted({run.user_attrs[SEED_ATTR] for run in runs}) == [FIRST_VALIDATION_SEED + 1, FIRST_VALIDATION_SEED + 2]
    source = {t.number: t for t in study.get_trials()}
    for run in runs:
        tuned = source[run.user_attrs[VALIDATES_ATTR]].user_attrs[CONFIG_ATTR]
        assert run.user_attrs[CONFIG_ATTR] == {**tuned, "seed": run.user_attrs[SEED_ATTR]}
    # Each run's updates are stored like a trial's, under the validation study.
    metrics = read_metrics(create_engine(load_study_spec(path).storage), validation_study_name("tiny"))
    assert set(metrics["trial_number"]) == {run.number for run in runs}
    for result in results:  # the interval is over the runs' own values
        values = [run.values[0] for run in runs if run.user_attrs[VALIDATES_ATTR] == result["trial"]]
        assert result["mean"] == pytest.approx(sum(values) / 2)

    assert main(["best", "tiny", "--storage", load_study_spec(path).storage, "--format", "json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert best["trial"] == results[0]["trial"] and best["validation"]["n"] == 2
    assert main(["best", "tiny", "--storage", load_study_spec(path).storage]) == 0
    assert "by validated mean" in capsys.readouterr().out

    # A second validate finds everything done: nothing queued, nothing rerun.
    assert main(["validate", "tiny", "--storage", load_study_spec(path).storage, "--top-k", "2", "--seeds", "2"]) == 0
    assert len(validation.get_trials()) == 4

    # A third seed with a wider evaluation: only the new run draws more responses per held-out prompt, and it counts
    # beside the two done (the same prompts: the same expected score).
    capsys.readouterr()
    assert main(["validate", "tiny", "--storage", load_study_spec(path).storage, "--top-k", "1", "--seeds", "3",
                 "--eval-samples", "3", "--format", "json"]) == 0
    (wider,) = [run for run in validation.get_trials() if run.number >= 4]
    top = ranked[0].number  # --top-k 1: the study's winner
    assert wider.state == TrialState.COMPLETE and wider.user_attrs[VALIDATES_ATTR] == top
    assert wider.user_attrs[CONFIG_ATTR] == {**source[top].user_attrs[CONFIG_ATTR], "num_eval_samples": 3,
                                             "seed": FIRST_VALIDATION_SEED + 3}
    assert all(run.user_attrs[CONFIG_ATTR].get("num_eval_samples") != 3 for run in runs)
    assert {r["trial"]: r["n"] for r in json.loads(capsys.readouterr().out)}[top] == 3

    # --trials validates the configurations it names, whatever their rank: what another choice would have given.
    last = ranked[-1].number
    assert main(["validate", "tiny", "--storage", load_study_spec(path).storage, "--trials", str(last), "--seeds",
                 "2", "--format", "json"]) == 0
    assert {r["trial"]: r["n"] for r in json.loads(capsys.readouterr().out)}[last] == 2
    assert main(["validate", "tiny", "--storage", load_study_spec(path).storage, "--trials", "99"]) == 2
    assert "--trials: study 'tiny' has no completed trial 99" in capsys.readouterr().err


def test_validate_at_a_production_length_keeps_those_runs_apart_and_best_says_whether_the_winner_held(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2)
    run_worker(load_study_spec(path), n_trials=2, timeout=None, threads=None)
    url = load_study_spec(path).storage
    assert main(["validate", "tiny", "--storage", url, "--top-k", "1", "--seeds", "2"]) == 0
    capsys.readouterr()
    study = load(path)
    tuned = max((t for t in study.get_trials() if t.state == TrialState.COMPLETE), key=lambda t: t.values[0])
    own = tuned.user_attrs[CONFIG_ATTR]
    longer = 2 * own["total_episodes"]
    # Bad input is refused before anything is queued: a length below the trial's, or --rule alone.
    validation = optuna.load_study(study_name=validation_study_name("tiny"), storage=open_storage(url))
    for flags, named in ((["--total-episodes", str(own["total_episodes"] - 1)], "is below the trial's own"),
                         (["--rule", "step_mass"], "--rule: only with --total-episodes N")):
        assert main(["validate", "tiny", "--storage", url, "--top-k", "1", *flags]) == 2
        assert named in capsys.readouterr().err
    assert len(validation.get_trials()) == 2

    assert main(["validate", "tiny", "--storage", url, "--top-k", "1", "--seeds", "2", "--total-episodes",
                 str(longer), "--rule", "step_mass", "--format", "json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["trial"] == tuned.number and result["n"] == 2
    assert result["total_episodes"] == longer and result["rule"] == "step_mass"
    runs = validation.get_trials()
    assert len(runs) == 4
    carried = [run for run in runs if run.user_attrs[CONFIG_ATTR]["total_episodes"] == longer]
    assert len(carried) == 2 and {run.user_attrs[SEED_ATTR] for run in carried} == {
        run.user_attrs[SEED_ATTR] for run in runs if run not in carried}  # the same fresh seeds at both lengths
    for run in carried:
        assert run.user_attrs[CONFIG_ATTR]["learning_rate"] == pytest.approx(own["learning_rate"] / 2)
    # The tuned length's validation is what it was: its two runs, not the production ones.
    assert main(["validate", "tiny", "--storage", url, "--top-k", "1", "--seeds", "2", "--format", "json"]) == 0
    (at_own,) = json.loads(capsys.readouterr().out)
    assert at_own["n"] == 2 and at_own["total_episodes"] == own["total_episodes"] and at_own["rule"] is None
    assert len(validation.get_trials()) == 4

    assert main(["best", "tiny", "--storage", url, "--format", "json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)["held"]
    change = (result["mean"] - at_own["mean"]) / abs(at_own["mean"])
    assert line.startswith(f"at {longer} episodes (rule step_mass): validated {result['mean']:.4f}")
    assert f"{change:+.1%} against its validated mean {at_own['mean']:.4f}" in line
    assert line.endswith("held (within 2%)" if change >= -0.02 else "did not hold (within 2%)")
    assert main(["best", "tiny", "--storage", url]) == 0
    assert f"# {line}" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--eval-samples", "--seeds", "--top-k"])
def test_a_count_below_one_is_one_line_exit_2_and_creates_nothing(flag: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    database = tmp_path / "none.db"
    assert main(["validate", "tiny", "--storage", f"sqlite:///{database}", flag, "0"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and f"{flag}: must be >= 1, got 0" in error
    assert not database.exists()


def test_validate_says_when_the_winner_broke_the_studys_constraints_on_fresh_seeds(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bound no run can keep: the tuned trials and their fresh-seed runs all break it.
    bound = {"metric": "objective/scores", "reduce": "last", "min": 1.0e9}
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1, constraints=[bound])
    run_worker(load_study_spec(path), n_trials=1, timeout=None, threads=None)
    capsys.readouterr()
    assert main(["validate", "tiny", "--storage", load_study_spec(path).storage, "--top-k", "1", "--seeds", "2"]) == 0
    out, err = capsys.readouterr()
    assert "within constraints" in out and "0/2" in out
    assert "ppo-tune validate: trial 0 kept the study's constraints (objective/scores (last) >= 1e+09) on 0 of its 2 " \
           "validated runs" in err


def test_best_says_when_its_validated_winner_broke_the_studys_constraints_on_fresh_seeds(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A study tuned without a bound, then given one no run can keep (--allow-changes): its winner stays the tuned
    # trial, whose fresh-seed runs all break the bound. best printed the validated mean alone, so the winner read as
    # validated when its mean was of runs the study now refuses (a population's replays passed the KL budget so).
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1)
    spec = load_study_spec(path)
    run_worker(spec, n_trials=1, timeout=None, threads=None)
    write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1,
                constraints=[{"metric": "objective/scores", "reduce": "last", "min": 1.0e9}])
    assert main(["run", str(path), "--allow-changes"]) == 0
    assert main(["validate", "tiny", "--storage", spec.storage, "--top-k", "1", "--seeds", "2"]) == 0
    capsys.readouterr()
    assert main(["best", "tiny", "--storage", spec.storage, "--format", "yaml"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("# best trial 0 by validated mean (ppo-tune validate): ")
    assert header.endswith("; kept the study's constraints (objective/scores (last) >= 1e+09) on 0 of its 2 validated "
                           "runs"), header


def test_validate_names_no_constraint_where_the_study_has_none() -> None:
    from tuner.cli.winner_commands import constraint_notices
    from tuner.production.validation import ValidatedConfig

    kept = ValidatedConfig(trial=3, tuning_value=0.5, values=(0.4, 0.6), failed=0, pending=0, feasible_runs=2)
    broke = ValidatedConfig(trial=4, tuning_value=0.5, values=(0.4, 0.6, 0.7), failed=0, pending=0, feasible_runs=1)
    assert constraint_notices([kept, broke], []) == []
    assert constraint_notices([kept, broke], ["eval/kl (last) <= 10"]) == [
        "trial 4 kept the study's constraints (eval/kl (last) <= 10) on 1 of its 3 validated runs"]
