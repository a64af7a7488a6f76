"""benchmarks.replay: the quick replay end to end on a real (tiny) curve table, and its pure parts against slow,
obvious references on hand-made table rows (inputs, not results)."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml
from scipy import stats  # type: ignore[import-untyped]

from benchmarks.curve_table import QUICKSTART, TABLE_SPACE
from benchmarks.curve_table import main as curve_table_main
from benchmarks.replay.__main__ import main as replay_main
from benchmarks.replay.mapping import STEP_MASS, TableIndex, point_distance, step_mass
from benchmarks.replay.measures import final_regret, judge, updates_to_target
from benchmarks.replay.metric import fit_weights, held_out_rank_correlation, nearest_rank_correlation, pair_costs
from benchmarks.replay.repeats import only_rows
from benchmarks.replay.strategies import (
    DEFAULT_STRATEGY,
    JOINT_TPE_STRATEGY,
    QUICKSTART_STRATEGY,
    STRATEGIES,
    Fidelity,
    Strategy,
    make_pruner,
    make_sampler,
)
from benchmarks.replay.study import Context, run_repeat
from benchmarks.replay.table import Config, Run, Table, estimate, run_value
from benchmarks.replay.trial import guard_stop, replay_run
from ppo_core.tasks.ranks import rank_correlation
from tuner.search.frontier_sampler import FrontierSampler
from tuner.search.space import ParamSpec, config_values, suggest_params
from tuner.store.attrs import SPEC_ATTR
from tuner.study.seed_policy import SeedPolicy
from tuner.study.shrinkage import shrunk_means
from tuner.study.study_file import KLGuard, StudySpec, load_study_spec
from tuner.study.winner import read_winner
from tuner.trial.kl_guard import least_squares_slope

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spec() -> StudySpec:
    return load_study_spec(QUICKSTART)


# ---------------------------------------------------------------------------------------- the quick replay, end to end


@pytest.fixture(scope="module")
def curve_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("curves") / "curves.jsonl"
    built = subprocess.run([sys.executable, "-m", "benchmarks.curve_table", "--quick", "--out", str(out)], cwd=REPO,
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-5000:]
    return out


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_curve_table_quick_keeps_every_evaluation_and_resumes(curve_table: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # curve_table's own quick mode: the table the replay below reads.
    rows = [json.loads(line) for line in curve_table.read_text().splitlines()]
    assert sorted(row["config_id"] for row in rows) == [0, 1]
    for row in rows:
        context = f"config {row['config_id']}"
        assert row["failure"] is None and row["updates"] == row["planned_updates"] >= 1, context
        assert row["params"] and {"learning_rate", "rollout_batch_size"} <= set(row["params"]), context
        assert all(len(values) == row["updates"] and all(finite(v) for v in values)
                   for values in row["train"].values()), context
        assert row["evals"] and row["evals"][-1]["update"] == row["updates"], context  # the last update evaluates
        for point in row["evals"]:
            assert all(finite(point[key]) for key in ("eval/gold_score", "eval/kl", "eval/score")), context
    # A second run finds every run in the table and trains nothing: an interrupted build resumes, not restarts. (In
    # this process: the command line ran above, and a second start would spend seconds importing.)
    capsys.readouterr()
    curve_table_main(["--quick", "--out", str(curve_table)])
    again = capsys.readouterr().err
    assert "0 runs to go" in again, again[-3000:]
    assert curve_table.read_text().splitlines() == [json.dumps(row) for row in rows]


def test_quick_replay_reports_every_figure_finite(curve_table: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.replay", "--quick", "--table", str(curve_table),
                           "--out", str(out), "--format", "json"], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads(out.read_text())
    assert json.loads(done.stdout) == result  # --format json prints what --out holds
    assert finite(result["target"]) and finite(result["best_true"]) and result["budget_updates"] > 0
    assert result["default"] == DEFAULT_STRATEGY and result["default"] in result["strategies"]
    assert "random" in result["strategies"] and len(result["strategies"]) >= 5
    for name, figures in result["strategies"].items():
        assert all(finite(figures[key]) for key in ("median_updates_to_target", "final_regret_median", "reached",
                                                    "mean_updates_to_target", "winner_infeasible")), name
        assert len(figures["iqr"]) == 2 and all(finite(v) for v in figures["iqr"]), name
        assert figures["iqr"][0] <= figures["median_updates_to_target"] <= figures["iqr"][1], name
        assert 0 <= figures["reached"] <= 1 and len(figures["repeats"]) == 2, name
        assert all(repeat["spent"] <= result["budget_updates"] for repeat in figures["repeats"]), name
        if name != "random":
            assert all(finite(v) for v in figures["vs_random"].values()), name
        # Every other strategy is also set against the default, on the same repeats.
        assert ("vs_default" in figures) == (name not in ("random", DEFAULT_STRATEGY)), name
        if "vs_default" in figures:
            assert set(figures["vs_default"]) == set(figures["vs_random"]), name
            assert all(finite(v) for v in figures["vs_default"].values()), name
            ours, theirs = (statistics.median(r["updates_to_target"] for r in result["strategies"][n]["repeats"])
                            for n in (name, DEFAULT_STRATEGY))
            assert figures["vs_default"]["median_ratio"] == pytest.approx(ours / theirs), name
    assert all(finite(result["mapping"][key]) for key in ("median_distance", "table_spacing_median",
                                                          "nearest_second_rank_correlation")), result["mapping"]
    assert result["mapping"]["mapping"] == "fitted" and STEP_MASS in result["mapping"]["weights"]
    assert result["mapping"]["proposals"] > 0


# ------------------------------------------------------------------------------------------------- nearest-row mapping

SPACE = {
    "learning_rate": ParamSpec("learning_rate", "float", 1e-6, 1e-4, log=True),
    "num_ppo_epochs": ParamSpec("num_ppo_epochs", "int", 2, 10),
    "kl_control": ParamSpec("kl_control", "categorical", choices=("fixed", "adaptive")),
    "kl_coef": ParamSpec("kl_coef", "float", 0.01, 0.2, log=True),
    "kl_target": ParamSpec("kl_target", "float", 3.0, 12.0),
}


def random_point(rng: random.Random) -> dict[str, Any]:
    mode = rng.choice(["fixed", "adaptive"])
    point = {"learning_rate": 10 ** rng.uniform(-6, -4), "num_ppo_epochs": rng.randint(2, 10), "kl_control": mode}
    if mode == "fixed":
        point["kl_coef"] = 10 ** rng.uniform(-2, math.log10(0.2))
    else:
        point["kl_target"] = rng.uniform(3, 12)
    return point


def test_distance_normalises_each_parameter_and_counts_mismatches() -> None:
    low = {"learning_rate": 1e-6, "num_ppo_epochs": 2, "kl_control": "fixed", "kl_coef": 0.05}
    # The log scale's middle is the geometric mean: half a unit from either end.
    assert point_distance(SPACE, low, {**low, "learning_rate": 1e-5}) == pytest.approx(0.5)
    assert point_distance(SPACE, low, {**low, "num_ppo_epochs": 6}) == pytest.approx(0.5)
    # fixed vs adaptive: the mode differs (1), kl_coef is in force at one only (1), kl_target likewise (1).
    adaptive = {"learning_rate": 1e-6, "num_ppo_epochs": 2, "kl_control": "adaptive", "kl_target": 5.0}
    assert point_distance(SPACE, low, adaptive) == pytest.approx(math.sqrt(3))


def test_table_index_finds_the_nearest_row_as_a_loop_does() -> None:
    rng = random.Random(7)
    rows = [random_point(rng) for _ in range(40)]
    index = TableIndex(SPACE, rows)
    for _ in range(200):
        proposal = random_point(rng)
        slow = [point_distance(SPACE, proposal, row) for row in rows]
        assert np.allclose(index.distances(proposal), slow)
        order, distances = index.nearest(proposal, 2)
        reference = sorted(range(len(rows)), key=lambda row: (slow[row], row))[:2]
        assert order == reference and distances == pytest.approx([slow[row] for row in reference])


def test_rank_correlation_is_spearmans() -> None:
    rng = random.Random(3)
    for _ in range(20):
        xs = [rng.choice([0.1, 0.2, 0.3, 0.4, rng.random()]) for _ in range(15)]  # ties included
        ys = [x + rng.gauss(0, 0.2) for x in xs]
        assert rank_correlation(xs, ys) == pytest.approx(stats.spearmanr(xs, ys).statistic)
    assert math.isnan(rank_correlation([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))  # a constant side has no order


# ---------------------------------------------------------------------------------------------- hand-made table rows


def make_run(golds: list[float], eval_kl: list[float], kl: list[float], seed: int = 0,
             failed: bool = False) -> Run:
    """A run of len(kl) updates evaluated at evenly spaced updates, the last at its end."""
    updates = len(kl)
    at = [updates * (i + 1) // len(golds) for i in range(len(golds))]
    evals = tuple({"update": u, "eval/gold_score": g, "eval/kl": k} for u, g, k in zip(at, golds, eval_kl,
                                                                                      strict=True))
    return Run((0, seed), updates, updates, failed, {"objective/kl": kl, "objective/scores": [0.0] * updates}, evals)


class Recorder:
    """A pruner's view of a trial: every report, and a stop at the step given."""

    def __init__(self, prune_at: int | None = None) -> None:
        self.reports: list[tuple[float, int]] = []
        self.prune_at = prune_at

    def report(self, value: float, step: int) -> None:
        self.reports.append((value, step))

    def should_prune(self) -> bool:
        return self.reports[-1][1] == self.prune_at


def test_a_finished_run_is_worth_its_last_two_golds_and_feasible_by_its_last_eval_kl(spec: StudySpec) -> None:
    run = make_run([0.5, 0.6, 0.7, 0.8], [1.0, 2.0, 9.0, 4.0], [0.1] * 16)
    assert run_value(run, spec.objectives[0]) == pytest.approx(0.75)
    assert estimate([run], spec.objectives[0], spec.constraints) == (pytest.approx(0.75), True)
    over = make_run([0.5, 0.9], [1.0, 5.5], [0.1] * 8)
    assert estimate([over], spec.objectives[0], spec.constraints)[1] is False


def test_the_kl_guard_cuts_a_curve_at_the_first_update_its_level_passes_the_threshold(spec: StudySpec) -> None:
    kl = [0.0, 0.5, 1.0, 1.0, 2.0, 6.5, 9.0, 9.0]
    run = make_run([0.5, 0.6, 0.7, 0.8], [1.0] * 4, kl)
    no_trend = KLGuard(threshold=6.0, predict=False, window=2)
    stop = guard_stop(kl, 8, no_trend)
    # Update 6's 6.5 alone is one batch's estimate; the mean of updates 6 and 7 (7.75) is a level.
    reason = "7.75 (mean of the last 2 updates) passed the threshold 6 at update 7"
    assert stop is not None and stop[0] == 7 and reason \
        in stop[1]
    recorder = Recorder()
    outcome = replay_run(run, spec.objectives[0], spec.constraints, no_trend, recorder, limit=100)
    assert (outcome.state, outcome.cost) == ("guarded", 7)
    # Reported at the evaluations before the stop (updates 2, 4 and 6), each the mean of the last two golds so far.
    assert recorder.reports == [(pytest.approx(0.5), 2), (pytest.approx(0.55), 4), (pytest.approx(0.65), 6)]
    complete = replay_run(run, spec.objectives[0], spec.constraints, None, Recorder(), limit=100)
    assert (complete.state, complete.cost) == ("complete", 8)


def trend_stop(kl: list[float], planned: int, guard: KLGuard) -> int | None:
    """The guard's rule walked by hand, with numpy's least squares and scipy's t: the first update where the mean of
    the last ``window`` values is over the threshold, or where (from max(window, min_updates) on, once that mean
    reached the fraction) the line through them, ``window`` updates ahead (no further than the run's end), is over it
    at its forecast's lower confidence bound, at ``confirmations`` updates running."""
    def forecast_crosses(update: int) -> bool:
        recent = np.array(kl[max(0, update - guard.window):update])
        ahead = min(planned - update, guard.window)
        if update < max(guard.min_updates, guard.window) or ahead <= 0 \
                or recent.mean() < guard.predict_min_fraction * guard.threshold:
            return False
        x = np.arange(guard.window)
        slope, intercept = np.polyfit(x, recent, 1)
        noise = np.sum((recent - (intercept + slope * x)) ** 2) / (guard.window - 2)
        x0 = guard.window - 1 + ahead
        error = np.sqrt(noise * (1 / guard.window + (x0 - x.mean()) ** 2 / np.sum((x - x.mean()) ** 2)))
        return bool(intercept + slope * x0 - stats.t.ppf(guard.confidence, guard.window - 2) * error > guard.threshold)

    for update in range(1, len(kl) + 1):
        if np.mean(kl[max(0, update - guard.window):update]) > guard.threshold:
            return update
        if all(forecast_crosses(update - back) for back in range(guard.confirmations)):
            return update
    return None


def test_the_predictive_guard_stops_where_the_trend_would_cross(spec: StudySpec) -> None:
    guard = spec.kl_guard  # the tables' space: 6 nats, a trend over 5 updates from 3 nats on
    rng = random.Random(11)
    stopped = 0
    for _ in range(100):
        planned = rng.choice([16, 48, 96])
        rate = rng.uniform(0.0, 0.2)
        kl = [max(0.0, rate * u + rng.gauss(0, 0.3)) for u in range(planned)]
        expected = trend_stop(kl, planned, guard)
        stopped += expected is not None
        found = guard_stop(kl, planned, guard)
        assert (found[0] if found else None) == expected
        run = make_run([0.5] * 8, [1.0] * 8, kl)
        outcome = replay_run(run, spec.objectives[0], spec.constraints, guard, None, limit=1000)
        assert outcome.cost == (expected or planned) and outcome.state == ("guarded" if expected else "complete")
    assert 10 < stopped < 90  # the curves span both verdicts, so the comparison above saw each
    assert least_squares_slope([1.0, 2.0, 3.0]) == pytest.approx(1.0)


def test_a_pruned_or_budget_cut_trial_costs_the_updates_it_ran(spec: StudySpec) -> None:
    run = make_run([0.5, 0.6, 0.7, 0.8], [1.0] * 4, [0.1] * 16)
    pruned = replay_run(run, spec.objectives[0], spec.constraints, spec.kl_guard, Recorder(prune_at=8), limit=100)
    assert (pruned.state, pruned.cost) == ("pruned", 8)
    assert pruned.constraints == {"eval/kl (last) <= 5": pytest.approx(-4.0)}  # set on pruned trials too
    cut = replay_run(run, spec.objectives[0], spec.constraints, spec.kl_guard, Recorder(), limit=5)
    assert (cut.state, cut.cost) == ("cut", 5)
    failed = make_run([0.5, 0.6], [1.0, 1.0], [0.1, math.nan, 0.1, 0.1])
    outcome = replay_run(failed, spec.objectives[0], spec.constraints, None, Recorder(), limit=100)
    assert (outcome.state, outcome.cost, outcome.constraints) == ("failed", 2, {})


# ---------------------------------------------------------------------------------------- updates to target, regret


def test_updates_to_target_is_the_first_time_the_winner_is_good_enough_in_truth() -> None:
    timeline = [(10, None), (20, 0.5), (30, 0.96), (40, 0.5), (50, 0.99)]
    assert updates_to_target(timeline, 0.95, 100) == (30, True)
    assert updates_to_target(timeline, 0.98, 100) == (50, True)
    assert updates_to_target(timeline, 0.98, 45) == (45, False)  # past the budget counts as never
    assert updates_to_target(timeline, 1.0, 100) == (100, False)


def test_judge_counts_an_infeasible_winner_as_not_reaching_and_at_the_worst_feasible_regret() -> None:
    truth = {1: (0.90, True), 2: (0.99, False), 3: (0.60, True), 4: (0.80, True)}
    best, target = 0.90, 0.95 * 0.90
    result = judge([(12, 4), (24, 2), (36, 1), (48, 2)], truth, target, best, 100, ["complete"] * 4, 0, 48)
    assert (result.updates_to_target, result.reached) == (36, True)
    assert result.regret == pytest.approx(0.90 - 0.60) and not result.winner_ok  # ended on config 2, infeasible
    fine = judge([(12, 4)], truth, target, best, 100, ["complete"], 0, 12)
    assert (fine.updates_to_target, fine.reached, fine.regret) == (100, False, pytest.approx(0.10))
    assert final_regret(0.9, None, 0.6) == pytest.approx(0.3)


def test_judge_counts_episodes_and_seconds_spent_when_the_target_was_first_reached() -> None:
    truth = {1: (0.90, True), 4: (0.80, True)}
    timeline = [(12, 4), (60, 4), (72, 1), (84, 1)]
    costs = [(192, 2.0), (960, 11.0), (1152, 13.5), (1344, 16.0)]
    reached = judge(timeline, truth, 0.85, 0.90, 100, ["complete"] * 4, 0, 84, costs)
    assert (reached.updates_to_target, reached.episodes_to_target, reached.seconds_to_target) == (72, 1152, 13.5)
    # Never reached: everything it spent, as updates count the whole budget.
    missed = judge(timeline, truth, 0.95, 0.90, 100, ["complete"] * 4, 0, 84, costs)
    assert (missed.reached, missed.episodes_to_target, missed.seconds_to_target) == (False, 1344, 16.0)


def test_a_runs_cost_spreads_its_measured_time_over_its_updates() -> None:
    run = dataclasses.replace(make_run([0.5, 0.6], [0.1, 0.2], [0.1] * 48), seconds=24.0, episodes=32)
    assert run.cost(12) == (384, pytest.approx(6.0)) and run.cost(48) == (1536, pytest.approx(24.0))


# ------------------------------------------------------------------------------------------------------------- racing


def test_a_single_seed_study_is_won_by_its_best_feasible_completed_trial() -> None:
    """The replay reads its winner as the tuner does (``read_winner``), from the spec its study carries."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(SPEC_ATTR, {"seed_policy": {"name": "single"}})
    for value, over, state in [(0.6, -1.0, "complete"), (0.9, 0.5, "complete"), (0.95, -1.0, "pruned"),
                               (0.7, -0.1, "complete"), (0.7, -2.0, "complete")]:
        trial = study.ask()
        trial.set_constraint("eval/kl (last) <= 5", over)
        if state == "complete":
            study.tell(trial, value)
        else:
            trial.report(value, 1)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    best = read_winner(study).best
    assert best is not None and best.number == 3  # 0.9 is over the KL budget, 0.95 was pruned; the earlier 0.7


def hand_table(configs: int, seeds: int, updates: int, space: Path = QUICKSTART) -> Table:
    """A table of configs drawn over the quickstart's space (or ``space``'s), each config's runs of different golds
    per seed."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_study_spec(space)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    rng = random.Random(5)
    table: dict[int, Config] = {}
    for config_id in range(configs):
        trial = study.ask()
        suggest_params(trial, spec.search_space, spec.base)
        study.tell(trial, 0.0)
        runs = {(0, seed): make_run([rng.uniform(0.4, 0.8)] * 2, [1.0, 1.0], [0.1] * updates, seed)
                for seed in range(seeds)}
        value, feasible = estimate(list(runs.values()), spec.objectives[0], spec.constraints)
        table[config_id] = Config(config_id, dict(trial.params), runs, value, feasible)
    return Table(table, tuple((0, seed) for seed in range(seeds)), dropped=0, rows=configs * seeds)


def test_only_keeps_the_rows_a_narrower_space_covers_and_a_replay_of_the_shipped_space_proposes_there() -> None:
    table = hand_table(16, 1, 8, TABLE_SPACE)
    controls = {config_id: config.params["kl_control"] for config_id, config in table.configs.items()}
    assert set(controls.values()) == {"fixed", "adaptive"}
    fixed = only_rows(table, (("kl_control", "fixed"),))
    assert set(fixed.configs) == {config_id for config_id, control in controls.items() if control == "fixed"}
    assert only_rows(table, ()) is table and not only_rows(table, (("kl_control", "none"),)).configs
    # The shipped quickstart searches no kl_control: replayed over the fixed rows, its proposals never set one.
    spec = load_study_spec(QUICKSTART)
    assert "kl_control" not in spec.search_space
    log = run_repeat(STRATEGIES["random"], table_context(spec, fixed, 8 * 6, Fidelity(2, 8)), 0, 0)
    assert log.proposals and all(fixed.configs[row].params["kl_control"] == "fixed"
                                 for _, row, _ in log.proposals)


def test_replay_with_two_workers_runs_and_matches_one_worker(curve_table: Path, tmp_path: Path) -> None:
    # benchmarks/README.md runs the replay with --workers 2: spawned workers must be able to import the function the
    # pool sends them, and each repeat must come out as it does in one process.
    results = []
    for workers in (1, 2):
        out = tmp_path / f"replay_{workers}.json"
        done = subprocess.run([sys.executable, "-m", "benchmarks.replay", "--quick", "--table", str(curve_table),
                               "--strategies", "random", DEFAULT_STRATEGY, "--workers", str(workers),
                               "--out", str(out)], cwd=REPO, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        results.append(json.loads(out.read_text()))
    one, two = ({name: [repeat for repeat in figures["repeats"]] for name, figures in res["strategies"].items()}
                for res in results)
    assert one == two


def test_replay_refuses_a_missing_space_or_a_malformed_only_in_one_line(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # In this process: a refusal comes before any work starts.
    for arguments, named in ((["--space", str(tmp_path / "none.yaml")], "--space: no such study file"),
                             (["--only", "kl_control"], "expected NAME=VALUE")):
        with pytest.raises(SystemExit) as exited:
            replay_main(["--quick", *arguments])
        stderr = capsys.readouterr().err
        last = stderr.strip().splitlines()[-1]
        assert exited.value.code == 2 and named in last and "Traceback" not in stderr, stderr[-2000:]


def table_context(spec: StudySpec, table: Table, budget: int, fidelity: Fidelity) -> Context:
    """A replay context over every row of ``table``."""
    rows = tuple(table.configs)
    return Context(spec, table, TableIndex(spec.search_space, [table.configs[r].params for r in rows]), rows, budget,
                   fidelity)


def test_a_race_reruns_leaders_on_the_next_seeds_and_picks_the_best_mean_on_the_most_seeds(spec: StudySpec) -> None:
    updates, budget = 8, 8 * 30
    table = hand_table(12, 3, updates)
    context = table_context(spec, table, budget, Fidelity(4, updates))
    strategy = Strategy("race", "random", "none", guard=False,
                        seed_policy=SeedPolicy("racing", seeds=3, top_k=3, start=0))
    log = run_repeat(strategy, context, sampler_seed=0, repeat=1)
    assert log.table_seed == (0, 1) and log.reruns > 0
    assert log.spent == budget == updates * len(log.states)  # a rerun is a trial: it costs a whole run again
    runs: dict[int, list[tuple[int, tuple[int, int], float]]] = {}
    for root, config_id, seed, state, value in log.trials:
        assert state == "complete"
        assert value == pytest.approx(run_value(table.configs[config_id].runs[seed], spec.objectives[0]))
        runs.setdefault(root, []).append((config_id, seed, value))
    for done in runs.values():
        # Each configuration keeps its table row, and runs on the repeat's seed, then the next ones in turn.
        assert len({config_id for config_id, _, _ in done}) == 1
        assert [seed for _, seed, _ in done] == [(0, 1), (0, 2), (0, 0)][:len(done)]
    # The winner by hand: configurations on two seeds or more first, then the mean shrunk by the seed noise (every run
    # here keeps the KL budget).
    roots = list(runs)
    shrunk = dict(zip(roots, shrunk_means([[v for _, _, v in runs[root]] for root in roots]) or [], strict=True))
    best = max(roots, key=lambda root: (len(runs[root]) > 1, shrunk[root], len(runs[root]), -root))
    assert log.timeline[-1][1] == runs[best][0][0]
    assert max(len(done) for done in runs.values()) == 3


def test_a_late_race_reruns_nothing_before_its_start(spec: StudySpec) -> None:
    updates, budget = 8, 8 * 30
    table = hand_table(12, 3, updates)
    context = table_context(spec, table, budget, Fidelity(4, updates))
    late = Strategy("late", "random", "none", guard=False,
                    seed_policy=SeedPolicy("racing", seeds=2, top_k=2, start=0.8))
    log = run_repeat(late, context, sampler_seed=0, repeat=0)
    spent = 0
    first_rerun = None
    for index, (root, _, _, _, _) in enumerate(log.trials):
        if root != index and first_rerun is None:
            first_rerun = spent  # the updates spent when the first re-run began
        spent += updates
    # The race starts once 80% is spent (the trial that crossed it queues the leaders): 2 leaders, one more seed each.
    assert first_rerun == 0.8 * budget and log.reruns >= 2, (first_rerun, log.reruns)
    assert {seed for index, (root, _, seed, _, _) in enumerate(log.trials) if root != index} == {(0, 1)}


def test_single_seed_replays_every_trial_on_the_repeats_seed(spec: StudySpec) -> None:
    table = hand_table(6, 3, 8)
    context = table_context(spec, table, 8 * 10, Fidelity(4, 8))
    seeds = [run_repeat(STRATEGIES["random"], context, sampler_seed=repeat, repeat=repeat).table_seed
             for repeat in range(4)]
    assert seeds == [(0, 0), (0, 1), (0, 2), (0, 0)]


@pytest.mark.parametrize("name", ["hyperband_tpe", "gp", "racing"])
def test_a_repeat_is_reproducible(spec: StudySpec, name: str) -> None:
    # Hyperband buckets trials by a hash of the study's name: an in-memory study's random name made repeats differ.
    table = hand_table(10, 3, 8)
    rows = tuple(table.configs)
    context = Context(spec, table, TableIndex(spec.search_space, [table.configs[r].params for r in rows]), rows,
                      8 * 20, Fidelity(1, 8))  # two Hyperband brackets
    first, again = (run_repeat(STRATEGIES[name], context, sampler_seed=3, repeat=0) for _ in range(2))
    assert first == again


# ------------------------------------------------------------------------------ the fitted mapping (replay_metric)


def test_step_mass_is_the_learning_rate_summed_over_the_trainers_optimizer_steps(spec: StudySpec) -> None:
    from ppo_core.config.ppo_config import PPOConfig

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
    for total_episodes in (1536, 1000):  # 1000 leaves a part-filled last rollout, which the trainer still runs
        base = {**spec.base, "total_episodes": total_episodes}
        for _ in range(10):
            trial = study.ask()
            suggest_params(trial, spec.search_space, base)
            point = dict(trial.params)
            config = PPOConfig(**(base | config_values(point, base)))
            updates = math.ceil(total_episodes / config.batch_size)  # ppo_core.run.trainer's count of updates
            steps = updates * config.num_ppo_epochs * config.num_mini_batches
            assert step_mass(point, base) == pytest.approx(math.log10(config.learning_rate * steps))


def slow_nearest_rank_correlation(index: TableIndex, points: list[dict[str, Any]], values: list[float],
                                  queries: list[int], rows: list[int]) -> float:
    """Each query's nearest other row by index.distances, one point at a time; Spearman by scipy."""
    nearest = []
    for query in queries:
        distance = index.distances(points[query])
        nearest.append(min((row for row in rows if row != query), key=lambda row: (distance[row], row)))
    return float(stats.spearmanr([values[q] for q in queries], [values[n] for n in nearest]).statistic)


def synthetic_table(spec: StudySpec, count: int, seed: int) -> tuple[list[dict[str, Any]], list[float]]:
    """Points of the quickstart's space whose value is a bump in the step mass alone: what the real table shows."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    points = []
    for _ in range(count):
        trial = study.ask()
        suggest_params(trial, spec.search_space, spec.base)
        points.append(dict(trial.params))
    values = [-(step_mass(point, spec.base) + 3.7) ** 2 for point in points]
    return points, values


def test_pair_costs_and_the_nearest_rank_correlation_match_one_point_at_a_time(spec: StudySpec) -> None:
    points, values = synthetic_table(spec, 40, seed=4)
    weights = np.random.default_rng(1).choice([0.0, 0.3, 1.0, 10.0], size=len(spec.search_space) + 1)
    index = TableIndex(spec.search_space, points, spec.base, weights)
    costs = pair_costs(index)
    for row, point in enumerate(points):
        assert np.allclose(costs[row], index.costs(point))
    queries, rows = list(range(0, 40, 2)), list(range(40))
    fast = nearest_rank_correlation(costs, np.array(values), weights, queries, rows)
    assert fast == pytest.approx(slow_nearest_rank_correlation(index, points, values, queries, rows))


def test_fitted_weights_find_the_coordinate_that_decides_the_value(spec: StudySpec) -> None:
    points, values = synthetic_table(spec, 80, seed=6)
    index = TableIndex(spec.search_space, points, spec.base)
    costs, y = pair_costs(index), np.array(values)
    weights = fit_weights(costs, y)
    assert index.names[int(np.argmax(weights))] == STEP_MASS
    everything = list(range(len(y)))
    fitted = nearest_rank_correlation(costs, y, weights, everything, everything)
    unit = nearest_rank_correlation(costs, y, np.ones(len(weights)), everything, everything)
    assert fitted > unit and fitted > 0.8
    assert held_out_rank_correlation(costs, y) > 0.6  # fitted on one half, judged on the other


def test_weights_must_name_every_coordinate(spec: StudySpec) -> None:
    points, _ = synthetic_table(spec, 3, seed=0)
    with pytest.raises(ValueError, match="step_mass"):
        TableIndex(spec.search_space, points, spec.base, [1.0] * len(spec.search_space))


SAMPLER_SETTINGS = {
    optuna.samplers.TPESampler: ("_multivariate", "_group", "_n_startup_trials", "_constant_liar"),
    FrontierSampler: ("seed", "n_startup_trials", "candidates", "prefer_gold", "pilot", "within_budget"),
}
"""What makes two samplers of a class the same search."""


def test_the_replayed_defaults_are_what_studies_get(spec: StudySpec, tmp_path: Path) -> None:
    """The strategy the replay calls the default is what a study file naming no sampler and no pruner runs, the
    quickstart's strategy is what studies/quickstart.yaml runs, and the joint TPE strategy is what the same bare file
    runs when its objective is not held-out gold: same sampler settings, pruner and guard."""
    from tuner.study.study_file import parse_study
    from tuner.trial.factory import make_pruner as study_pruner
    from tuner.trial.factory import make_sampler as study_sampler

    bare = yaml.safe_load(QUICKSTART.read_text())
    for key in ("sampler", "pruner", "kl_guard"):
        bare.pop(key, None)
    bare_spec = parse_study({**bare, "sampler": {"seed": 0}}, tmp_path / "bare.yaml")
    proxy = {**bare, "sampler": {"seed": 0}, "objectives": [{"metric": "eval/score", "reduce": "mean_last_k", "k": 2}]}
    proxy_spec = parse_study(proxy, tmp_path / "proxy.yaml")
    fidelity = Fidelity(12, 96)
    cases = ((STRATEGIES[DEFAULT_STRATEGY], bare_spec), (STRATEGIES[QUICKSTART_STRATEGY], spec),
             (STRATEGIES[JOINT_TPE_STRATEGY], proxy_spec))
    for strategy, study in cases:
        ours, theirs = make_sampler(strategy, spec, seed=0), study_sampler(study)
        assert type(ours) is type(theirs), strategy.name
        for attribute in SAMPLER_SETTINGS[type(ours)]:
            assert getattr(ours, attribute) == getattr(theirs, attribute), (strategy.name, attribute)
        inner = study_pruner(study).inner
        replayed = make_pruner(strategy, spec, fidelity)
        if inner is None:
            assert isinstance(replayed, optuna.pruners.NopPruner), strategy.name
        else:
            assert type(replayed) is type(inner) and vars(replayed) == vars(inner), strategy.name
        assert strategy.guard and study.kl_guard.enabled and strategy.seed_policy == study.seed_policy
        assert not strategy.warm_starts and not study.enqueue
    shipped = study_sampler(bare_spec)
    assert STRATEGIES[DEFAULT_STRATEGY].sampler == "frontier" and isinstance(shipped, FrontierSampler)
    # The default is the search as pre-registered: its aims are not held within the study's KL budget (the
    # quickstart's eval/kl <= 5), which the sampler knows; the hold is the option the replay runs beside it.
    assert not shipped.within_budget and shipped._kl_budget == 5.0
    held = make_sampler(STRATEGIES["frontier_budget_race_late"], spec, seed=0)
    assert isinstance(held, FrontierSampler) and held.within_budget
