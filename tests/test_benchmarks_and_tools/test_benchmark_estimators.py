"""benchmarks/estimators.py without training: its configs, run order and summary of a hand-made list of runs."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from benchmarks.estimators import (
    ESTIMATORS,
    base_values,
    curve_table,
    dump_json,
    markdown_table,
    run_values,
    schedule,
    summarise,
)
from ppo_core.config.io import build_config, read_mapping
from tuner.production.confidence import mean_interval


def test_every_estimator_runs_once_per_seed_in_an_order_rotated_by_seed() -> None:
    order = schedule(ESTIMATORS, [1000, 1001, 1002])
    assert len(order) == 12
    for seed in (1000, 1001, 1002):
        assert sorted(e for e, s in order if s == seed) == sorted(ESTIMATORS)
    firsts = [order[i][0] for i in (0, 4, 8)]
    assert firsts == ["gae", "grpo", "rloo"]
    assert [e for e, _ in order[4:8]] == ["grpo", "rloo", "reinforce_pp_baseline", "gae"]


def test_runs_share_train_yaml_and_change_only_the_estimator() -> None:
    from benchmarks.estimators import BASE

    yaml_values = read_mapping(BASE)
    base = base_values()
    assert "seed" not in base and base["num_sample_generations"] == 0
    assert {k: v for k, v in base.items() if k != "num_sample_generations"} == \
        {k: v for k, v in yaml_values.items() if k not in ("seed", "num_sample_generations")}
    assert base_values(64)["total_episodes"] == 64
    configs = {e: build_config(run_values(base, e, 1000)) for e in ESTIMATORS}
    for estimator, config in configs.items():
        assert config.seed == 1000 and config.advantage_estimator == estimator
        assert (config.learning_rate, config.num_ppo_epochs, config.cliprange, config.temperature,
                config.kl_target, config.total_episodes, config.batch_size) == \
            (yaml_values["learning_rate"], yaml_values["num_ppo_epochs"], yaml_values["cliprange"],
             yaml_values["temperature"], yaml_values["kl_target"], yaml_values["total_episodes"], 16)
    assert {e: c.generations_per_prompt for e, c in configs.items()} == \
        {"gae": 1, "grpo": 4, "rloo": 4, "reinforce_pp_baseline": 4}
    assert {e: c.kl_penalty_in_reward for e, c in configs.items()} == \
        {"gae": True, "grpo": False, "rloo": True, "reinforce_pp_baseline": True}


def fake_run(estimator: str, seed: int, golds: list[float], sft: float, seconds: float, peak: float) -> dict[str, Any]:
    """A worker's record: 4 updates, evaluations at 2 and 4."""
    series = {"time/rollout_s": [seconds / 4] * 4, "time/update_s": [3 * seconds / 4] * 4,
              "memory/peak_gib": [peak - 0.01 * (update % 2) for update in range(1, 5)],
              "objective/kl_coef": [0.05] * 4}
    evaluations = [{"update": 2.0 * i, "eval/gold_score": gold, "eval/kl": 1.0 * i, "time/eval_s": 0.1}
                   for i, gold in enumerate(golds, 1)]
    return {"returncode": 0, "estimator": estimator, "seed": seed, "sft_eval": {"eval/gold_score": sft, "eval/kl": 0.0},
            "series": series, "evaluations": evaluations, "train_s": 4 * seconds + 0.2, "rss_after_imports_mib": 300.0,
            "parameters": {"policy": {"trainable": 10, "total": 10}}}


def test_summary_pairs_gains_by_seed_and_divides_by_gae() -> None:
    sft = {1000: 0.40, 1001: 0.50, 1002: 0.45}
    runs = []
    for i, seed in enumerate(sft):
        runs.append(fake_run("gae", seed, [0.5, 0.70 + 0.01 * i], sft[seed], seconds=0.2, peak=0.5))
        runs.append(fake_run("grpo", seed, [0.5, 0.60 + 0.03 * i], sft[seed], seconds=0.1, peak=0.4))
    runs.append({"returncode": 1, "estimator": "grpo", "seed": 1003, "error": "boom"})
    summary = summarise(runs, ("gae", "grpo"))

    gae, grpo = summary["estimators"]["gae"], summary["estimators"]["grpo"]
    assert (gae["runs"], gae["failed"], grpo["runs"], grpo["failed"]) == (3, 0, 3, 1)
    mean, low, high = mean_interval([0.60, 0.63, 0.66])
    assert (grpo["gold"]["mean"], grpo["gold"]["ci_low"], grpo["gold"]["ci_high"]) == \
        pytest.approx((mean, low, high))
    gains = [0.60 - 0.40, 0.63 - 0.50, 0.66 - 0.45]
    assert grpo["gain_over_sft"]["mean"] == pytest.approx(mean_interval(gains)[0])
    assert grpo["gain_over_sft"]["ci_high"] == pytest.approx(mean_interval(gains)[2])
    assert grpo["kl"]["mean"] == pytest.approx(2.0) and grpo["gold_curve_mean"] == pytest.approx([0.5, 0.63])
    assert grpo["eval_updates"] == [2, 4]
    assert grpo["per_update_s"] == pytest.approx(0.1) and grpo["peak_gib"] == pytest.approx(0.4)
    assert grpo["vs_gae"]["per_update_s"] == pytest.approx(0.5)
    assert grpo["vs_gae"]["peak_gib"] == pytest.approx(0.8)
    assert gae["vs_gae"]["per_update_s"] == pytest.approx(1.0)
    differences = [0.60 - 0.70, 0.63 - 0.71, 0.66 - 0.72]  # paired by seed
    assert (grpo["gold_minus_gae"]["mean"], grpo["gold_minus_gae"]["ci_high"]) == \
        pytest.approx(mean_interval(differences)[::2])
    assert summary["sft"]["per_seed"] == {str(s): v for s, v in sft.items()}
    assert summary["sft"]["gold"]["mean"] == pytest.approx(0.45)
    assert summary["sft"]["sft_identical_across_estimators"]

    runs[1]["sft_eval"] = {"eval/gold_score": 0.41}  # grpo's start on seed 1000 differs from gae's
    assert not summarise(runs, ("gae", "grpo"))["sft"]["sft_identical_across_estimators"]


def test_tables_show_sft_every_estimator_and_the_ratios() -> None:
    runs = [fake_run(e, seed, [0.5, 0.7], 0.4, seconds=s, peak=0.5)
            for seed in (1000, 1001) for e, s in (("gae", 0.2), ("rloo", 0.1))]
    summary = summarise(runs, ("gae", "rloo", "grpo"))
    table = markdown_table(summary)
    lines = table.splitlines()
    assert lines[2].startswith("| SFT policy (start) | 0.400 [")
    assert lines[3].startswith("| GAE (PPO, value network) | 0.700 [0.700, 0.700] | 0.300 [0.300, 0.300] | - |")
    assert lines[4].startswith("| RLOO | 0.700 [0.700, 0.700] | 0.300 [0.300, 0.300] | 0.000 [0.000, 0.000] |")
    assert "| 0.50 |" in lines[4]  # rloo's time per update over gae's
    assert "failed (0 runs)" in lines[5]  # grpo: none ran
    assert curve_table(summary).splitlines()[0] == "| estimator | update 2 | update 4 |"


def test_one_seed_gives_an_unknown_interval_not_an_error() -> None:
    summary = summarise([fake_run("gae", 1000, [0.5, 0.7], 0.4, 0.2, 0.5)], ("gae",))
    assert math.isnan(summary["estimators"]["gae"]["gold"]["ci_low"])
    assert "0.700 [-, -]" in markdown_table(summary)


def test_times_are_medians_and_ratios_are_per_seed_medians() -> None:
    gae = {1000: 0.2, 1001: 0.3, 1002: 0.4}
    grpo = {1000: 0.15, 1001: 0.1, 1002: 0.3}  # per-seed ratios 0.75, 1/3, 0.75
    runs = [fake_run("gae", seed, [0.5, 0.7], 0.4, seconds, 0.5) for seed, seconds in gae.items()]
    runs += [fake_run("grpo", seed, [0.5, 0.7], 0.4, seconds, 0.5) for seed, seconds in grpo.items()]
    runs[0]["series"]["time/update_s"][1] += 10.0  # one update slowed by another job: the run's median ignores it
    row = summarise(runs, ("gae", "grpo"))["estimators"]
    assert row["gae"]["per_seed"]["1000"]["per_update_s"] == pytest.approx(0.2)
    assert row["gae"]["per_update_s"] == pytest.approx(0.3)
    assert row["gae"]["ranges"]["per_update_s"] == pytest.approx([0.2, 0.4])
    assert row["grpo"]["per_update_s"] == pytest.approx(0.15)
    assert row["grpo"]["vs_gae"]["per_update_s"] == pytest.approx(0.75)


def test_lists_of_numbers_take_one_line_and_the_json_reads_back() -> None:
    value = {"series": {"a": [0.1, -2e-05, 3, None]}, "names": ["x", "y"], "empty": [], "nested": [[1, 2], [3]]}
    text = dump_json(value)
    assert '"a": [0.1, -2e-05, 3, null]' in text
    assert json.loads(text) == value
