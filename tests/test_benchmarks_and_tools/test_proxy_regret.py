"""The proxy's regret against gold (benchmarks/proxy_regret.py): its quick mode end to end, and on hand-made tables
and studies, the regret it must find where the proxy and gold disagree."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks import proxy_regret
from benchmarks.proxy_regret import OUTCOMES, Scores, StudyConfig, outcomes, study_regret


def scores(proxy: list[list[float]], gold: list[list[float]], kl: list[list[float]], budget: float = 10.0) -> Scores:
    return Scores(np.array(proxy, dtype=float), np.array(gold, dtype=float), np.array(kl, dtype=float), budget)


def test_quick_mode_writes_every_figure_finite_and_the_sentence_from_its_summary(tmp_path: Path) -> None:
    out = tmp_path / "proxy_regret.json"
    proxy_regret.main(["--quick", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["quick"] and result["commit"] and result["machine"] and "--quick" in result["command"]
    assert set(result["tables"]) == set(proxy_regret.QUICK_TABLES)
    for name, table in result["tables"].items():
        for key in (*OUTCOMES, "share_of_gain_lost"):
            figure = table[key]
            assert all(math.isfinite(figure[end]) for end in ("mean", "ci_low", "ci_high")), (name, key)
            assert figure["ci_low"] <= figure["ci_high"]
    summary = result["summary"]
    for task in ("text", "graph"):
        assert summary[task]["ci_low"] <= summary[task]["ci_high"]
        # The sentence quotes the summary's figures, as code that reads the JSON would print them.
        assert f"{summary[task]['mean']:.3f} [{summary[task]['ci_low']:.3f}, {summary[task]['ci_high']:.3f}]" \
            in summary["sentence"]
    assert summary["sentence"].endswith(f"see {proxy_regret.PAGE}.")
    for name, study in result["studies"].items():
        assert set(study["arms"]) == set(proxy_regret.ARMS)
        assert name not in study["chosen_on"] and study["chosen_on"]  # each chose its thresholds on the other
        assert study["arms"]["budget"]["regret"] >= 0.0  # in sample, gold's pick is the best within the budget


def test_a_quick_run_refuses_to_write_the_committed_results() -> None:
    with pytest.raises(SystemExit, match="benchmarks/results"):
        proxy_regret.main(["--quick", "--out", str(proxy_regret.OUT)])


def test_proxy_and_gold_disagreeing_cost_the_gap_between_their_picks() -> None:
    # Config 0: the proxy's favourite within the budget, poor in gold. Config 1: gold's. Config 2: best in both,
    # but over the KL budget, so only the proxy without a budget takes it.
    table = scores(proxy=[[3, 3], [2, 2], [9, 9]], gold=[[0.2, 0.2], [0.7, 0.7], [0.9, 0.9]],
                   kl=[[1, 1], [1, 1], [20, 20]])
    found = {key: value[0] for key, value in outcomes(table, np.array([[0, 1, 2]])).items()}
    assert found["regret"] == pytest.approx(0.5)
    assert found["regret_in_sample"] == pytest.approx(0.5)
    assert found["same"] == 0.0
    assert found["regret_without_budget"] == pytest.approx(0.7 - 0.9)
    assert found["gain"] == pytest.approx(0.7 - (0.2 + 0.7) / 2)  # over the feasible configurations' mean


def test_picks_are_scored_on_the_seed_they_were_not_made_on() -> None:
    # Config 0's gold on seed 0 is luck (0.9, then 0.1); config 1 is 0.5 on both and the proxy's favourite.
    table = scores(proxy=[[1, 1], [2, 2]], gold=[[0.9, 0.1], [0.5, 0.5]], kl=[[0, 0], [0, 0]])
    found = {key: value[0] for key, value in outcomes(table, np.array([[0, 1]])).items()}
    # Held out seed 1: gold picks 0 on seed 0 and gets 0.1 where the proxy's 1 gets 0.5; held out seed 0: both pick 1.
    assert found["regret"] == pytest.approx((-0.4 + 0.0) / 2)
    assert found["regret_in_sample"] == pytest.approx((0.4 + 0.0) / 2)
    assert found["same"] == pytest.approx(0.5)


def reference_outcomes(table: Scores, draw: list[int]) -> dict[str, float]:
    """The outcomes of one drawn study, computed the slow, obvious way."""
    seeds = table.gold.shape[1]
    found = dict.fromkeys(OUTCOMES, 0.0)
    for held in range(seeds):
        seen = [s for s in range(seeds) if s != held]

        def on_seen(values: np.ndarray, config: int, seen: list[int] = seen) -> float:
            return sum(float(values[config, s]) for s in seen) / len(seen)

        feasible = [c for c in draw if on_seen(table.kl, c) <= table.budget]
        by_proxy = max(feasible, key=lambda c: on_seen(table.proxy, c))
        by_gold = max(feasible, key=lambda c: on_seen(table.gold, c))
        unbudgeted = max(draw, key=lambda c: on_seen(table.proxy, c))
        fresh = table.gold[:, held]
        found["regret"] += (fresh[by_gold] - fresh[by_proxy]) / seeds
        found["same"] += (by_proxy == by_gold) / seeds
        found["regret_in_sample"] += (on_seen(table.gold, by_gold) - on_seen(table.gold, by_proxy)) / seeds
        found["regret_without_budget"] += (fresh[by_gold] - fresh[unbudgeted]) / seeds
        found["gain"] += (fresh[by_gold] - sum(fresh[c] for c in feasible) / len(feasible)) / seeds
    return found


def test_outcomes_match_a_slow_reference_on_random_tables() -> None:
    rng = np.random.default_rng(3)
    table = scores(rng.normal(size=(9, 3)).tolist(), rng.uniform(size=(9, 3)).tolist(),
                   rng.uniform(0, 8, size=(9, 3)).tolist(), budget=5.0)
    draws = proxy_regret.sample_draws(rng, 9, 5, 30)
    found = outcomes(table, draws)
    for row, draw in enumerate(draws):
        if np.isnan(found["regret"][row]):
            continue
        expected = reference_outcomes(table, draw.tolist())
        for key in OUTCOMES:
            assert found[key][row] == pytest.approx(expected[key]), (row, key)


def test_a_study_with_no_feasible_configuration_has_no_regret_rather_than_a_wrong_one() -> None:
    table = scores(proxy=[[1, 1], [2, 2]], gold=[[0.1, 0.1], [0.2, 0.2]], kl=[[30, 30], [40, 40]])
    assert all(np.isnan(value[0]) for value in outcomes(table, np.array([[0, 1]])).values())


def config(trial: int, proxy: float, gold: float, kl: float, **signals: float) -> StudyConfig:
    return StudyConfig(trial, 1, proxy, gold, kl, {"entropy_collapsed": 0.0, "distinct_2grams_kept": 1.0} | signals)


HACKED = [config(0, 2.0, 0.40, 1.0), config(1, 3.0, 0.55, 6.0), config(2, 4.0, 0.80, 20.0, distinct_2grams_kept=0.7),
          config(3, 12.0, 0.0, 50.0, entropy_collapsed=1.0, distinct_2grams_kept=0.05)]
"""A study whose proxy's favourite (3) is a hack: its entropy collapsed and its answers repeat one phrase."""


def test_a_study_regret_by_arm_follows_which_configurations_each_arm_allows() -> None:
    strict = {"entropy_collapsed": 0.0, "distinct_2grams_kept": 0.5}
    budgeted = study_regret(HACKED, 10.0, {}, "budget")
    assert (budgeted["proxy_pick"], budgeted["gold_pick"], budgeted["regret"]) == (1, 1, 0.0)
    unconstrained = study_regret(HACKED, 10.0, {}, "none")
    assert (unconstrained["proxy_pick"], unconstrained["regret"]) == (3, pytest.approx(0.55))
    signals = study_regret(HACKED, 10.0, strict, "signals")
    # Without a budget the signals drop the hack, and the proxy's pick beats gold's within the budget.
    assert (signals["proxy_pick"], signals["regret"]) == (2, pytest.approx(0.55 - 0.80))
    assert signals["regret_against_best_anywhere"] == pytest.approx(0.0)


def test_thresholds_are_the_least_regret_on_other_studies_and_the_loosest_among_equals() -> None:
    others = [(10.0, HACKED), (10.0, HACKED)]
    chosen = proxy_regret.choose_thresholds(others, "signals")
    assert chosen["entropy_collapsed"] == 0.0  # fixed in advance: the only candidate
    assert chosen["distinct_2grams_kept"] is None  # the entropy rule alone already drops the hack: no bound needed
    # Within the budget no signal changes a pick, so every bound is left at its loosest.
    within = proxy_regret.choose_thresholds(others, "budget_and_signals")
    assert within == {"entropy_collapsed": 0.0, "distinct_2grams_kept": None}
    assert proxy_regret.choose_thresholds(others, "budget") == {}


def test_a_studys_thresholds_are_chosen_on_other_task_versions_only(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Two studies of one task version and one of another: each v5 study's thresholds come from the v7 study alone,
    # so changing the other v5 study (here: making the n-gram bound pay) leaves them as they were.
    for name, source in (("a", "real_model_study_v5"), ("b", "real_model_study_v5_frontier"),
                         ("c", "real_model_study_v7")):
        (tmp_path / name).mkdir()
        shutil.copy(proxy_regret.STUDIES / source / "study.yaml", tmp_path / name / "study.yaml")
    quiet = [config(0, 2.0, 0.40, 1.0), config(1, 3.0, 0.55, 6.0)]
    repeats = [config(0, 2.0, 0.40, 1.0), config(1, 4.0, 0.10, 20.0, distinct_2grams_kept=0.3),
               config(2, 3.0, 0.60, 15.0)]
    monkeypatch.setattr(proxy_regret, "STUDIES", tmp_path)
    thresholds = []
    for b_configs in (quiet, repeats):
        configs = {"a": quiet, "b": b_configs, "c": quiet}
        monkeypatch.setattr(proxy_regret, "study_configs",
                            lambda directory, spec, budget, configs=configs: configs[directory.name])
        found = proxy_regret.measure_studies(["a", "b", "c"], (None, 10.0))  # type: ignore[arg-type]
        assert found["a"]["chosen_on"] == ["c"] and found["c"]["chosen_on"] == ["a", "b"]
        thresholds.append(found["a"]["arms"]["signals"]["thresholds"])
    assert thresholds[0] == thresholds[1]
    assert found["c"]["arms"]["signals"]["thresholds"]["distinct_2grams_kept"] is not None  # chosen where it paid


@pytest.mark.parametrize("name", ["curve_table_smollm2_v7.jsonl", "curve_table_task3.jsonl"])
def test_a_table_is_read_as_its_study_reduces_it(name: str) -> None:
    spec = proxy_regret.load_study_spec(proxy_regret.ROOT / "benchmarks" / proxy_regret.PAIRS[name])
    table = proxy_regret.table_scores(proxy_regret.TABLES / name, spec)
    rows = [json.loads(line) for line in (proxy_regret.TABLES / name).read_text().splitlines() if line.strip()]
    configs = sorted({row["config_id"] for row in rows})
    seeds = sorted({(row["task_seed"], row["seed"]) for row in rows})
    assert table.gold.shape == (len(configs), len(seeds)) and table.budget == spec.constraints[0].max
    for row in rows[:6]:
        at = configs.index(row["config_id"]), seeds.index((row["task_seed"], row["seed"]))
        last_two = row["evals"][-2:]  # the objective: the mean of the last 2 evaluations
        assert table.proxy[at] == pytest.approx(sum(e["eval/score"] for e in last_two) / 2)
        assert table.gold[at] == pytest.approx(sum(e["eval/gold_score"] for e in last_two) / 2)
        assert table.kl[at] == pytest.approx(row["evals"][-1]["eval/kl"])


def test_the_sentence_quotes_each_tasks_figure_with_its_interval() -> None:
    found = {"text": {"mean": 0.0084, "ci_low": -0.0163, "ci_high": 0.0196},
             "graph": {"mean": 0.1468, "ci_low": 0.0919, "ci_high": 0.1763}}
    assert proxy_regret.sentence(found) == (
        "Tuning the proxy within a KL budget cost 0.008 [-0.016, 0.020] gold on the text task and 0.147 "
        f"[0.092, 0.176] on the graph task, against tuning gold; see {proxy_regret.PAGE}.")


def test_every_table_belongs_to_one_task_and_has_a_space() -> None:
    names = [name for _, members in proxy_regret.TASKS.values() for name in members]
    assert len(names) == len(set(names)) and set(names) <= set(proxy_regret.PAIRS)
