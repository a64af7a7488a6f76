"""Every benchmark's ``--quick`` mode runs end to end and reports every figure its full run reports, each finite.

Some quick runs are a fresh process, ``python -m benchmarks.X --quick --out FILE``, as a user starts it; the figures
are read back from its JSON. The others, benchmarks that run their work in their own process, call ``main`` in the
test's process instead (``run_quick_here``, which puts back what such a run changes): a new process would spend most
of such a quick run importing torch and transformers again, and starting a fork server for its trials. Nothing here
is about speed (a quick run's numbers mean nothing): these tests keep the benchmarks from rotting while ppo_core, the
tuner and the dashboard move under them. benchmarks.trl_comparison needs TRL 1.12, the ``trl`` extra, which CI installs.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scipy import stats  # type: ignore[import-untyped]

from benchmarks.trl_comparison.aggregate import TIME_KEYS
from benchmarks.trl_comparison.peer_trl import TRL_PPO_VERSION, install_command, peer_directory
from tools.quick_mode import RESULTS, results_path

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

REPO = Path(__file__).resolve().parents[2]


def run_quick(module: str, out: Path, *arguments: str) -> tuple[Any, str]:
    """``python -m benchmarks.<module> --quick --out <out> ...``: the JSON it wrote and what it printed."""
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}
    completed = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", "--quick", "--out", str(out), *arguments],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 0, \
        f"{module} --quick failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-5000:]}"
    return json.loads(out.read_text()), completed.stdout


def run_quick_here(module: str, out: Path, *arguments: str) -> tuple[Any, str]:
    """``benchmarks.<module>.main(["--quick", "--out", out, ...])`` in this process: the JSON it wrote and what it
    printed. What such a run changes of its process is put back after it: torch's thread count, Optuna's log level
    and the level below which ``logging`` is switched off. Its trials use this process's fork server (started by the
    first test here to run a study in process). A run here saves the imports a new process would pay again (torch
    and transformers: about 6 s of CPU)."""
    import importlib
    import logging

    import optuna
    import torch

    threads, verbosity, disabled = torch.get_num_threads(), optuna.logging.get_verbosity(), logging.root.manager.disable
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            importlib.import_module(f"benchmarks.{module}").main(["--quick", "--out", str(out), *arguments])
    finally:
        torch.set_num_threads(threads)
        optuna.logging.set_verbosity(verbosity)
        logging.disable(disabled)
    return json.loads(out.read_text()), printed.getvalue()


def refusal(main: Callable[[list[str]], object], argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a benchmark's ``main(argv)`` refuses bad input with: it must exit 2 (argparse's status for bad
    arguments) and print no traceback. Run here, not in a new process: a refusal comes before any work starts."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    stderr = capsys.readouterr().err
    assert exited.value.code == 2, stderr
    assert "Traceback" not in stderr
    return stderr.splitlines()[-1]


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def assert_finite(where: dict[str, Any], keys: tuple[str, ...] | list[str], context: str) -> None:
    missing = [key for key in keys if key not in where]
    assert not missing, f"{context}: no {missing}"
    bad = {key: where[key] for key in keys if not is_finite(where[key])}
    assert not bad, f"{context}: not finite: {bad}"


# ---------------------------------------------------------------------------------------------- trl_comparison


@pytest.fixture(scope="module")
def trl_comparison(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    # Not a skip: CI installs the peer TRL, and a missing one is a broken setup to be told about.
    assert (peer_directory() / "trl" / "__init__.py").is_file(), \
        f"benchmarks.trl_comparison needs TRL {TRL_PPO_VERSION} beside the environment: {install_command()}"
    return run_quick("trl_comparison", tmp_path_factory.mktemp("trl_comparison") / "cpu.json")


SUMMARY_FIGURES = (*TIME_KEYS, "wall_s_min", "wall_s_max", "episodes_per_s", "generated_tokens_per_s",
                   "trained_tokens_per_s", "update_flops_per_s", "rollout_flops_per_s", "update_share_of_matmul_peak",
                   "peak_rss_delta_mib", "peak_rss_mib", "setup_s")
CPU_RATIOS = ("rollout_s", "update_s", "wall_s", "wall_excl_gc_s", "episodes_per_s", "update_flops_per_s",
              "peak_rss_delta_mib")


def test_trl_comparison_quick_measures_the_matmul_peak_and_every_side_figure(
        trl_comparison: tuple[dict[str, Any], str]) -> None:
    result, markdown = trl_comparison
    assert result["settings"]["quick"] and result["settings"]["repeats"] == 1
    peak = result["machine"]["matmul_peak"]
    assert peak["threads"] == result["settings"]["threads"]  # measured with the workers' thread count
    assert_finite(peak["peak_flops"], ["fp32"], "matmul peak")
    assert_finite(peak["gflops"]["fp32"], [str(n) for n in peak["sizes"]], "matmul GFLOP/s by size")
    assert list(result["sizes"]) == ["0.1M"]
    size = result["sizes"]["0.1M"]
    assert_finite(size["work"], ["generated_tokens", "trained_tokens", "rollout_flops", "update_flops"], "work")
    assert size["equal_work"]["all_equal"], [row for row in size["equal_work"]["rows"] if not row["equal"]]
    for side in ("ppo_core", "trl"):
        summary = size["summary"][side]
        assert_finite(summary, SUMMARY_FIGURES, side)
        assert summary["update_share_of_matmul_peak"] == pytest.approx(
            summary["update_flops_per_s"] / peak["peak_flops"]["fp32"])
        assert summary["update_mfu"] is None  # a datasheet peak exists for GPUs only
    assert_finite(size["summary"]["ratio"], CPU_RATIOS, "ppo_core / TRL")
    # The generated table carries the new column, with a percentage in each side's row.
    header = next(line for line in markdown.splitlines() if line.startswith("| size | side |"))
    column = header.split(" | ").index("update % of matmul peak")
    rows = [line.split(" | ") for line in markdown.splitlines() if line.startswith("| 0.1M | ppo_core |")
            or line.startswith("| 0.1M | TRL |")]
    assert len(rows) == 2 and all(row[column].endswith("%") for row in rows), rows


def test_trl_comparison_quick_profiles_every_wrapped_function(trl_comparison: tuple[dict[str, Any], str]) -> None:
    from benchmarks.trl_comparison.profile_core import CLASS_METHODS, MODULE_FUNCTIONS, TRAINER_LABELS

    profile = trl_comparison[0]["sizes"]["0.1M"]["profile"]
    rows = {row["label"]: row for row in profile["breakdown"]}
    # profile_core stops on a wrapped name that is missing or never called, so each label has a row with calls.
    expected = {label for _, _, label in MODULE_FUNCTIONS + CLASS_METHODS} | set(TRAINER_LABELS)
    assert set(rows) == expected
    for label, row in rows.items():
        assert_finite(row, ["ms_per_update", "share_of_update_wall", "calls_per_update"], label)
        assert row["calls_per_update"] > 0
    assert_finite(profile, ["mean_update_wall_s"], "profile")
    assert profile["operators"] and all(is_finite(row["self_cpu_ms_per_update"]) for row in profile["operators"])


def test_a_quick_run_never_writes_the_committed_results(tmp_path: Path) -> None:
    default = RESULTS / "trl_comparison" / "cpu.json"
    assert results_path(None, default, quick=False) == default
    elsewhere = results_path(None, default, quick=True)  # a new temporary directory, empty until the run writes
    elsewhere.parent.rmdir()
    assert elsewhere.name == "cpu.json" and not elsewhere.resolve().is_relative_to(RESULTS.resolve())
    assert results_path(tmp_path / "x.json", default, quick=True) == tmp_path / "x.json"
    with pytest.raises(SystemExit, match="benchmarks/results"):
        results_path(default, default, quick=True)


def test_child_process_quick_runs_one_side_on_its_own_fixture(tmp_path: Path) -> None:
    result, _ = run_quick_here("trl_comparison.child_process", tmp_path / "run.json", "--side", "ppo_core", "--mode",
                              "time")
    assert len(result["updates"]) == 2  # the comparison's quick workload: 1 warmup + 1 measured update
    for update in result["updates"]:
        assert_finite(update, ["rollout_s", "update_s", "wall_s"], "update")
    assert_finite(result["memory"], ["baseline_rss_mib", "peak_rss_mib", "peak_rss_delta_mib"], "memory")
    assert_finite(result, ["setup_s"], "worker")


# --------------------------------------------------------------------------------------------------- the others


def test_estimators_quick_reports_every_column(tmp_path: Path) -> None:
    from benchmarks.estimators import MACHINE_KEYS, RATIO_KEYS

    result, _ = run_quick_here("estimators", tmp_path / "estimators.json")  # each run is a worker process of its own
    assert result["settings"]["quick"] and result["settings"]["estimators"] == ["gae", "grpo"]
    rows = result["summary"]["estimators"]
    for estimator, row in rows.items():
        assert (row["runs"], row["failed"]) == (1, 0), row
        for interval in ("gold", "gain_over_sft", "kl"):
            # One seed: a mean, and an interval that is undefined (None in the JSON, '-' in the table).
            assert is_finite(row[interval]["mean"]) and row[interval]["n"] == 1, (estimator, interval)
            assert {"ci_low", "ci_high"} <= set(row[interval])
        assert_finite(row, [*MACHINE_KEYS, "final_kl_coefficient"], estimator)
        assert_finite(row["vs_gae"], RATIO_KEYS, f"{estimator} vs GAE")
        assert row["gold_curve_mean"] and all(is_finite(v) for v in row["gold_curve_mean"])
    assert is_finite(rows["grpo"]["gold_minus_gae"]["mean"])
    assert is_finite(result["summary"]["sft"]["gold"]["mean"])
    assert result["summary"]["sft"]["sft_identical_across_estimators"]
    assert "| GRPO |" in result["table"] and result["curve_table"]


def test_kl_control_quick_reports_every_figure_of_the_table(tmp_path: Path) -> None:
    from benchmarks.kl_control import KL_BANDS, QUICK_CONFIGS

    result, printed = run_quick_here("kl_control", tmp_path / "kl_control.json")
    (table,) = result["tables"]
    assert table["configs"] == QUICK_CONFIGS and 0 < table["top_fixed"] <= table["top"] <= table["configs"]
    assert_finite(table, ["best", "spearman_final_kl_with_kl_target", "adaptive_reach", "fixed_share"], "kl_control")
    assert -1 <= table["spearman_final_kl_with_kl_target"] <= 1 and table["adaptive_reach"] > 1
    assert [(band["kl_low"], band["kl_high"]) for band in table["bands"]] == [
        (low, None if high == math.inf else high) for low, high in KL_BANDS]  # JSON has no infinity
    assert sum(band[control]["n"] for band in table["bands"] for control in ("fixed", "adaptive")) == QUICK_CONFIGS
    assert "| curve_table.jsonl | 24 |" in printed


def test_memory_modes_quick_reports_each_mode(tmp_path: Path) -> None:
    # Two of the modes, which between them switch on every option (no value network; LoRA, bf16 frozen weights,
    # gradient checkpointing); the others combine the same options. Each mode is a process of its own, started from
    # here.
    modes = ["full fp32, GRPO (no value network)", "LoRA, bf16 frozen, checkpointing"]
    result, _ = run_quick_here("memory_modes", tmp_path / "memory.json", "--modes", *modes)
    assert result["quick"] and [row["mode"] for row in result["rows"]] == modes
    assert result["command"].startswith("python -m benchmarks.memory_modes --quick") and result["machine"]["code"]
    assert_finite(result, ["baseline_rss_gib"], "memory_modes")
    for row in result["rows"]:
        assert_finite(row, ["trainable_parameters", "peak_gib", "estimated_peak_gib", "seconds_per_update",
                            "peak_vs_first_mode"], row["mode"])
    full, lora = result["rows"][0], result["rows"][1]
    assert lora["trainable_parameters"] < full["trainable_parameters"]


def test_dashboard_read_quick_times_every_step_and_page(tmp_path: Path) -> None:
    from dashboard.app import PAGES

    result, _ = run_quick_here("dashboard_read", tmp_path / "dashboard_read.json")
    assert result["settings"]["quick"]
    steps = {row["step"]: row["seconds"] for row in result["rows"]}
    assert all(is_finite(seconds) for seconds in steps.values()), steps
    for slug, _, _ in PAGES:
        assert f"page {slug}: open, empty caches" in steps and f"page {slug}: rerun" in steps, slug
    assert len(steps) == 10 + 2 * len(PAGES)  # the read path's ten steps, then each page opened and rerun


@pytest.fixture(scope="module")
def pruning_saving(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    """The quick run's rows, and the directory that keeps its two studies (tuned_vs_defaults retrains from one)."""
    directory = tmp_path_factory.mktemp("pruning_saving")
    result, _ = run_quick_here("pruning_saving", directory / "pruning_saving.json", "--keep", str(directory))
    # A figure names its command and the commit its code was at.
    assert result["command"].startswith("python -m benchmarks.pruning_saving --quick")
    assert result["machine"]["code"] and result["quick"]
    return result["rows"], directory


def test_pruning_saving_quick_reports_both_studies(pruning_saving: tuple[list[dict[str, Any]], Path]) -> None:
    rows, _ = pruning_saving
    assert [row["variant"] for row in rows] == ["with KL guard", "without KL guard"]
    for row in rows:
        assert_finite(row, ["trials finished", "pruned for KL", "pruned by median", "updates run", "wall s",
                            "best gold"], row["variant"])
        assert row["trials finished"] == 1 and row["updates run"] > 0


def test_tuned_vs_defaults_quick_retrains_both_configs(pruning_saving: tuple[list[dict[str, Any]], Path],
                                                        tmp_path: Path) -> None:
    directory = pruning_saving[1]
    result, _ = run_quick_here("tuned_vs_defaults", tmp_path / "tuned.json", "--study", "quickstart-guard",
                               "--storage", f"sqlite:///{directory / 'quickstart-guard.db'}")
    assert result["quick"] and len(result["configs"]) == 2 and "TRL defaults" in result["configs"]
    assert result["command"].startswith("python -m benchmarks.tuned_vs_defaults --quick") and result["machine"]["code"]
    for label, config in result["configs"].items():
        assert_finite(config, ["mean_gold"], label)
        assert_finite(config["gold_per_seed"], ["1"], label)


def test_tuning_quality_quick_reports_every_method(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Task seed 0 is the default task, which the suite builds anyway (another seed is another task, 25 s to build);
    # the quickstart's base names no task seed, so a 0 in every study's base is the flag's.
    result, _ = run_quick_here("tuning_quality", tmp_path / "tuning_quality.json", "--work-dir",
                               str(tmp_path / "work"), "--task-seed", "0", "--frontier", "--eval-samples", "3")
    assert result["settings"]["quick"] and result["sampler_seeds"] == [0] and result["task_seed"] == 0
    assert all(study["definition"]["base"]["task_seed"] == 0 for study in result["studies"])
    assert_finite(result["reference"], ["best_tuning_value", "threshold"], "reference")
    assert result["settings"]["workers"] == 1 and result["settings"]["validation_seeds"] == 1
    for method, row in result["methods"].items():
        # One validation seed per chosen config: a mean, and no interval from a single value.
        assert row["n"] == 1, method
        assert_finite(row, ["validated_mean"], method)
        assert row["ci_low"] is None and row["ci_high"] is None, method
        for figure in ("validated", "tuning_values", "updates_spent", "tuning_run_s", "validation_run_s"):
            assert row[figure] and all(is_finite(v) for v in row[figure]), (method, figure)
        if method in ("default", "random", "frontier"):
            # "Not reached" (None) is a finding, not a missing figure.
            for unit in ("updates", "episodes", "seconds"):
                reached = row[f"{unit}_to_target"]
                assert len(reached) == 1 and (reached[0] is None or is_finite(reached[0])), (method, unit)
            # Reached after the same trials whatever the unit: none or all three.
            assert len({row[f"{unit}_to_target"][0] is None for unit in ("updates", "episodes", "seconds")}) == 1
    assert set(result["methods"]) == {"default", "random", "frontier", "trl_defaults", "guidance"}
    for pairs, ours in ((result["paired"], "default"), (result["paired_frontier"], "frontier")):
        difference = result["methods"][ours]["validated"][0] - result["methods"]["random"]["validated"][0]
        assert pairs["sampler_seeds"] == [0] and pairs["validated_difference"] == pytest.approx([difference]), ours
    # The frontier-guided study aimed its trials (its aim is stored on each) at half the others' budget.
    frontier = next(study for study in result["studies"] if study["method"] == "frontier")
    assert frontier["definition"]["sampler"] == {"name": "frontier", "seed": 0} and result["frontier_share"] == 0.5
    assert result["table"] and result["studies_table"]
    # Each validation run evaluated as ppo-tune validate --eval-samples 3 has it; the studies' trials as their file.
    import optuna

    from tuner.production.validation import validation_study_name
    from tuner.store.attrs import CONFIG_ATTR

    storage = f"sqlite:///{tmp_path / 'work' / 'tq-default-s0.db'}"
    validation = optuna.load_study(study_name=validation_study_name("tq-default-s0"), storage=storage)
    assert result["settings"]["eval_samples"] == 3 and validation.trials
    assert all(run.user_attrs[CONFIG_ATTR]["num_eval_samples"] == 3 for run in validation.trials)
    tuned = optuna.load_study(study_name="tq-default-s0", storage=storage)
    assert {trial.user_attrs[CONFIG_ATTR]["num_eval_samples"] for trial in tuned.trials
            if CONFIG_ATTR in trial.user_attrs} == {2}

    # An interrupted run goes on with --resume: here the random search's study is lost, the rest finished.
    from benchmarks import tuning_quality

    work = tmp_path / "work"
    command = ["--quick", "--work-dir", str(work)]
    assert "--resume" in refusal(tuning_quality.main, [*command, "--task-seed", "0"], capsys)
    assert "tq-default-s0.yaml" in refusal(tuning_quality.main, [*command, "--task-seed", "1", "--resume"], capsys)
    (work / "tq-random-s0.db").unlink()
    resumed, _ = run_quick_here("tuning_quality", tmp_path / "resumed.json", "--work-dir", str(work), "--task-seed",
                                "0", "--resume")
    assert resumed["settings"]["resume"]
    before = {study["name"]: study for study in result["studies"]}
    for study in resumed["studies"]:
        kept = before[study["name"]]
        if study["method"] == "random":  # run again from nothing
            assert study["resumed_trials"] == 0 and study["trials"] and study["validation"]["runs"]
            continue
        # Read, not rerun: the same trials and validation runs, and the same compute counted.
        assert study["resumed_trials"] == len(kept["trials"]) and study["trials"] == kept["trials"], study["name"]
        assert study["validation"]["runs"] == kept["validation"]["runs"], study["name"]
        assert study["run_s"] == kept["run_s"], study["name"]


def test_tuning_quality_runs_only_the_methods_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from benchmarks import tuning_quality

    quickstart = yaml.safe_load(tuning_quality.QUICKSTART.read_text())
    named = tuning_quality.study_definitions(quickstart, tmp_path, 2, frontier=True, methods={"random", "frontier"})
    assert [d["name"] for d in named] == ["tq-random-s0", "tq-frontier-s0", "tq-random-s1", "tq-frontier-s1"]
    every = [d["name"] for d in tuning_quality.study_definitions(quickstart, tmp_path, 1)]
    assert every == ["tq-default-s0", "tq-random-s0", "tq-trl_defaults", "tq-guidance"]
    line = refusal(tuning_quality.main, ["--quick", "--methods", "random", "grid"], capsys)
    assert "--methods" in line and "'grid'" in line
    assert not list(tmp_path.iterdir())  # nothing written for a refused run


def test_tuning_quality_compares_the_searches_of_another_study_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from benchmarks import tuning_quality

    # The real-model study's own budget: 12 trials of 128 episodes in rollouts of 8.
    smollm2 = yaml.safe_load((tuning_quality.ROOT / "benchmarks" / "studies" / "smollm2.yaml").read_text())
    assert tuning_quality.study_budget(smollm2) == 12 * 16
    # Another study runs only the searches: the fixed configurations are the quickstart's.
    other = tmp_path / "mine.yaml"
    other.write_text(tuning_quality.QUICKSTART.read_text().replace("name: quickstart", "name: mine"))
    line = refusal(tuning_quality.main, ["--quick", "--study", str(other), "--methods", "random", "guidance"], capsys)
    assert "error: --methods guidance: the fixed configurations are the quickstart's" in line
    assert "--study: no file" in refusal(tuning_quality.main, ["--quick", "--study", str(tmp_path / "no.yaml")],
                                         capsys)
    # By default: the shipped default search at half the budget against random search at all of it, on its base.
    result, _ = run_quick_here("tuning_quality", tmp_path / "other.json", "--work-dir", str(tmp_path / "work"),
                               "--study", str(other))
    assert set(result["methods"]) == {"random", "frontier"} and result["paired_frontier"]["sampler_seeds"] == [0]
    assert [study["name"] for study in result["studies"]] == ["tq-random-s0", "tq-frontier-s0"]


def test_tuning_quality_counts_the_target_in_updates_episodes_and_seconds() -> None:
    from benchmarks.tuning_quality import progress

    trials = [{"number": 1, "updates": 96, "episodes": 1536, "duration_s": 21.0, "feasible": True, "value": 0.8},
              {"number": 0, "updates": 48, "episodes": 1536, "duration_s": 20.0, "feasible": True, "value": 0.5},
              {"number": 2, "updates": 48, "episodes": 1536, "duration_s": 19.0, "feasible": False, "value": 0.9}]
    # Trials in their numbers' order: the target is reached at the end of trial 1, after both.
    assert progress(trials, 0.7) == 144 and progress(trials, 0.7, "episodes") == 3072
    assert progress(trials, 0.7, "duration_s") == pytest.approx(41.0)
    assert progress(trials, 0.85) is None  # the only trial above it is outside the KL budget


def test_tuning_quality_runs_its_jobs_here_with_one_worker_and_in_a_pool_with_more() -> None:
    from benchmarks.tuning_quality import run_jobs

    jobs = [(), (), ()]
    assert run_jobs(os.getpid, jobs, workers=1) == [os.getpid()] * 3
    in_pool = run_jobs(os.getpid, jobs, workers=2)
    assert os.getpid() not in in_pool and 1 <= len(set(in_pool)) <= 2
    assert run_jobs(pow, [(2, 3), (3, 2), (5, 0)], workers=2) == [8, 9, 1]  # each job's result, in the jobs' order


def test_tuning_quality_resumes_only_unfinished_studies() -> None:
    import optuna
    from optuna.trial import TrialState

    from benchmarks.tuning_quality import BudgetStop, finished
    from tuner.store.attrs import KL_HISTORY_ATTR

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    stop = BudgetStop(4)
    assert not finished(study.get_trials(), stop, 4) and not finished(study.get_trials(), stop, None)
    study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={KL_HISTORY_ATTR: [0.1] * 3}))
    assert not finished(study.get_trials(), stop, 4)  # 3 of 4 updates
    assert finished(study.get_trials(), stop, None)  # a one-trial study: its trial ran
    study.enqueue_trial({})
    study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={KL_HISTORY_ATTR: [0.1]}))
    # A failed trial's updates count, as during the run; a racing re-run the budget's stop left queued stays so.
    assert finished(study.get_trials(), stop, 4)
    running = study.ask()  # left RUNNING by the interruption: not finished, whatever was spent
    assert running.number == 1 and not finished(study.get_trials(), stop, 4)


def test_tuning_quality_pairs_the_searches_by_sampler_seed() -> None:
    from benchmarks.tuning_quality import paired

    rng = random.Random(4)
    studies: list[dict[str, Any]] = []
    for method in ("random", "default"):
        for seed in (2, 0, 1):  # out of order: pairing goes by seed, not by position
            values = [rng.uniform(0.5, 0.8) for _ in range(3)]
            studies.append({"method": method, "sampler_seed": seed, "validated_values": values,
                            "updates_to_target": rng.choice([None, 96, 240])})
    pairs = paired(studies)
    assert pairs["sampler_seeds"] == [0, 1, 2]
    by = {(s["method"], s["sampler_seed"]): s for s in studies}
    expected = [statistics.fmean(by["default", seed]["validated_values"])
                - statistics.fmean(by["random", seed]["validated_values"]) for seed in (0, 1, 2)]
    assert pairs["validated_difference"] == pytest.approx(expected)
    test = stats.ttest_1samp(expected, 0.0)  # scipy's own t interval of the mean difference
    low, high = test.confidence_interval(0.95)
    assert (pairs["mean"], pairs["ci_low"], pairs["ci_high"]) == pytest.approx((statistics.fmean(expected), low, high))
    assert pairs["updates_to_target"]["default"] == [by["default", seed]["updates_to_target"] for seed in (0, 1, 2)]


# --------------------------------------------------------------------------------------------------- ray_overhead


def test_horizon_transfer_quick_carries_the_winner_by_every_rule(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import horizon_transfer

    work = tmp_path / "work"
    result, printed = run_quick_here("horizon_transfer", tmp_path / "horizon.json", "--work-dir", str(work))
    assert_finite(result["reference"], ["mean"], "reference")
    assert result["reference"]["study"] == "source-2x" and result["reference"]["n"] == 1
    (winner,) = result["winners"]
    assert_finite(winner, ["value", "final_kl"], "winner")
    entries = {(e["rule"], e["horizon"]): e for e in result["entries"]}
    assert set(entries) == {(rule, h) for rule in ("as_tuned", "step_mass", "power_law", "kl_held") for h in (1, 2)}
    for key, entry in entries.items():
        assert entry["n"] == 1 and is_finite(entry["values"][0]) and is_finite(entry["final_kl"]), key
        assert entry["gap"] == pytest.approx((entry["mean"] - result["reference"]["mean"])
                                             / abs(result["reference"]["mean"])), key
    # At the tuned length the mass rules change nothing: they share as_tuned's run, and differ from it by 0.
    for rule in ("step_mass", "power_law"):
        assert entries[(rule, 1)]["values"] == entries[("as_tuned", 1)]["values"]
        assert entries[(rule, 1)]["vs_as_tuned"]["mean"] == 0.0
    rows = [json.loads(line) for line in (work / "runs.jsonl").read_text().splitlines()]
    assert len(rows) == 6  # 1x: as_tuned (shared by both mass rules) and kl_held; 2x: all four
    carried = {(r["params"]["rule"], r["params"]["horizon"]): r for r in rows}
    assert carried[("as_tuned", 1)]["params"]["same_as"] == ["step_mass", "power_law"]
    tuned_lr = carried[("kl_held", 1)]["params"]["changes"].get("learning_rate")
    assert tuned_lr is None and set(carried[("kl_held", 2)]["params"]["changes"]) == {
        "total_episodes", "kl_target", "kl_horizon"}
    assert carried[("kl_held", 2)]["params"]["changes"]["kl_target"] == pytest.approx(winner["final_kl"])
    assert carried[("step_mass", 2)]["updates"] == 2 * carried[("as_tuned", 1)]["updates"]
    assert "| source #" in printed and "kl_held" in printed
    # Given the same work directory and the studies by name, nothing runs again and the figures are the same.
    source = f"source=sqlite:///{work / 'source'}.db"
    reference = f"source-2x=sqlite:///{work / 'source-2x'}.db"
    again, _ = run_quick_here("horizon_transfer", tmp_path / "again.json", "--work-dir", str(work),
                              "--source", source, "--reference", reference)
    assert again["entries"] == result["entries"]
    assert len((work / "runs.jsonl").read_text().splitlines()) == 6
    # Without a reference (a real model's long search costs too much), the same runs and no gap.
    alone, printed = run_quick_here("horizon_transfer", tmp_path / "alone.json", "--work-dir", str(work),
                                    "--source", source, "--no-reference")
    assert alone["reference"] is None and printed.startswith("Reference: none")
    assert [e["gap"] for e in alone["entries"]] == [None] * len(entries)
    assert [e["values"] for e in alone["entries"]] == [e["values"] for e in result["entries"]]
    assert len((work / "runs.jsonl").read_text().splitlines()) == 6
    line = refusal(horizon_transfer.main, ["--source", source, "--no-reference", "--reference", reference], capsys)
    assert "one of them" in line
    line = refusal(horizon_transfer.main, ["--quick", "--horizons", "1", "0"], capsys)
    assert "--horizons" in line
    line = refusal(horizon_transfer.main, ["--source", "no-storage"], capsys)
    assert "--source" in line and "NAME=STORAGE" in line


def test_ray_overhead_quick_reports_every_figure(tmp_path: Path) -> None:
    # A real local Ray cluster started by the benchmark itself (the ray extra is part of the test install); each
    # trial is a process of its own (a Ray task's, or the local launcher's).
    result, _ = run_quick_here("ray_overhead", tmp_path / "ray.json")
    assert set(result["launchers"]) == {"local", "ray"}
    common = ["trials", "workers", "wall_s", "trials_per_min", "overhead_s_mean", "overhead_s_median",
              "trained_s_mean"]
    assert_finite(result["launchers"]["local"], common, "local launcher")
    assert_finite(result["launchers"]["ray"], [*common, "connect_s", "dispatch_s_mean", "dispatch_s_median"],
                  "ray launcher")
    assert_finite(result, ["ray_minus_local_overhead_s", "ray_over_local_throughput"], "ray_overhead")


def test_real_model_phases_quick_times_every_phase_in_both_precisions(tmp_path: Path) -> None:
    # A tiny Llama through ppo_core's own loading path; the full run's SmolLM2 stays out of the suite.
    result, printed = run_quick("real_model_phases", tmp_path / "real.json")
    assert set(result["precisions"]) == {"fp32", "bf16"}
    for precision, figures in result["precisions"].items():
        assert figures["matmul_weights"]["body"] > 0 and figures["matmul_weights"]["head"] > 0, precision
        assert figures["peak_gflops"] > 0, precision
        for name in ("generate", "forward", "forward_backward_full", "forward_backward_lora"):
            assert_finite(figures[name], ["seconds", "gflops", "share_of_peak"], f"{precision} {name}")
        assert_finite(figures["generate"], ["seconds_per_new_token", "new_token_vs_forward"], precision)
        for sample in ("sample", "sample_packed", "sample_fused"):
            assert_finite(figures[sample], ["seconds", "step_seconds", "step_bytes", "read_bytes_per_s",
                                            "step_bound_seconds", "step_over_bound"], f"{precision} {sample}")
            assert figures[sample]["step_bytes"] == figures["sample"]["step_bytes"]
        assert f"| {precision} | sample (the copy's fused decoder) |" in printed
        fused = figures["sample_fused"]
        assert fused["products_seconds"] > 0 and "products_seconds" not in figures["sample_packed"]
        for sample in ("sample_packed", "sample_fused"):  # float32 compute on the same weights is the reference
            kl = figures[sample]["token_kl_mean"]
            assert (kl < 1e-6) if precision == "fp32" else (0 < kl < 0.1), (precision, sample, kl)
        assert f"| {precision} | forward_backward_lora |" in printed
    assert result["code"] and result["machine"]


def test_trial_speed_quick_times_both_trees_and_reads_each_ratio_within_its_round(tmp_path: Path) -> None:
    # Each trial is a process of its own, A's importing ppo_core from the base commit's tree.
    result, printed = run_quick_here("trial_speed", tmp_path / "speed.json", "--variant", "B_fp32",
                                     "sampling_dtype=float32")
    assert set(result["summary"]) == {"A", "B", "B_fp32"} and len(result["rounds"]) == 1
    for name, row in result["summary"].items():
        assert_finite(row["episodes_per_s"], ["median", "min", "max"], name)
        assert_finite(row["seconds"], ["train_s", "rollout_s", "update_s", "eval_s", "other_s"], name)
        assert 0 < row["eval_share"]["median"] < 1, name  # the quick run evaluates twice
        assert f"| {name} |" in printed
    assert result["summary"]["A"]["over_a"]["median"] == 1.0
    assert result["summary"]["B_fp32"]["sampling_bf16"] == 0.0
    assert result["summary"]["B"]["sampling_fused"] in (0.0, 1.0)  # recorded from the trial's own metric
    assert result["paired"]["reference"] == "B" and set(result["paired"]) == {"reference", "A", "B_fp32"}
    assert result["paired"]["A"]["eval_gold"] is None  # the letter reward has no gold
    assert len(result["paired"]["A"]["eval_kl"]) == 3  # mean difference and its interval (nan for one round)
    assert result["code"] and result["machine"]


def test_sampling_peer_quick_times_every_side_against_ppo_cores_auto_choice(tmp_path: Path) -> None:
    from benchmarks.sampling_peer import TOLERANCE

    result, printed = run_quick("sampling_peer", tmp_path / "peer.json")
    (batch,) = result["batches"].values()
    sides = batch["sides"]
    assert set(sides) == {"trl_generate", "trl_generate_bf16", "trl_continuous_batching",
                          "trl_continuous_batching_bf16", "ppo_core_float32", "ppo_core_bfloat16"}
    for name, side in sides.items():
        assert "error" not in side, (name, side)  # continuous batching runs on a CPU with this transformers
        assert_finite(side, ["seconds", "seconds_per_new_token", "ratio_to_auto"], name)
        assert side["seconds"] > 0 and side["ratio_to_auto"] > 0, name
        assert 1 <= side["new_tokens"] <= 4, name  # at most the quick run's 4 tokens; fewer if every row stopped
        assert f"| 2 | {name} |" in printed
    assert sides[result["auto"]["side"]]["ratio_to_auto"] == 1.0
    # The float32 copy samples the PEFT policy's own distribution: the loop's log-probabilities are its forward's.
    assert batch["numerics"]["ppo_core_float32"]["max_abs_logprob_difference"] <= TOLERANCE
    assert batch["numerics"]["float32_within_tolerance"]
    assert set(result["trl"]["observed"]["trl_generate_bf16"]) >= {"cpu_autocast", "logits", "weights"}
    assert result["code"] and result["machine"]["cpu"] and result["command"].endswith("--quick --out " +
                                                                                      str(tmp_path / "peer.json"))


def test_trial_speed_continues_the_rounds_of_the_same_plan_only(tmp_path: Path) -> None:
    from benchmarks.trial_speed import earlier_rounds

    plan = {"base": "abc", "config": {"seed": 0}, "variants": {"A": {}, "B": {}}, "threads": 1, "quick": False}
    out = tmp_path / "speed.json"
    assert earlier_rounds(out, plan) == []  # nothing written yet
    out.write_text(json.dumps({**plan, "rounds": [{"A": {"train_s": 1.0}}]}))
    assert earlier_rounds(out, plan) == [{"A": {"train_s": 1.0}}]
    assert earlier_rounds(out, {**plan, "base": "def"}) == []  # another base commit starts over


def test_gpu_phases_quick_times_every_phase_of_both_variants(tmp_path: Path) -> None:
    result, printed = run_quick_here("gpu_phases", tmp_path / "phases.json")
    assert result["copy_bandwidth_bytes_per_s"] > 0 and result["peak_flops"]["measured"] > 0
    assert set(result["shapes"]) == {"neox-tiny", "qwen2-tiny"}  # a GPT-NeoX and a Qwen2 shape, as the full run
    for name, shape in result["shapes"].items():
        assert set(shape["variants"]) == {"eager", "fast"}
        for variant in shape["variants"].values():
            # Every phase ran and was timed: a wrapper that stopped being called would leave a zero.
            assert all(variant["seconds"][phase] > 0 for phase in ("decode", "scoring", "update", "wall")), name
            for key in ("episodes_per_s", "decode_tokens_per_s", "decode_fraction_of_bound", "peak_gib"):
                assert math.isfinite(variant[key]) and variant[key] > 0, (name, key)
            assert variant["mfu_update"]["measured"] > 0 and variant["mfu_update"]["datasheet"] is None  # a CPU
        assert shape["variants"]["fast"]["switches"]["update_forward_batch_size"] == 8
        assert {(row["batch"], row["path"]) for row in shape["decode_sweep"]} == \
            {(batch, path) for batch in (2, 4) for path in ("generate", "static")}
        for key in ("mfu_update", "decode_fraction_of_bound", "episodes_per_s", "peak_gib"):
            assert shape[key] > 0, (name, key)
        assert shape["trl_episodes_per_s"] is None
        assert f"{name}: episodes/s" in printed


@pytest.mark.parametrize("flag", ["--workers", "--validation-seeds", "--sampler-seeds", "--budget-updates"])
def test_tuning_quality_refuses_a_count_below_one_in_one_line(flag: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import tuning_quality

    work = tmp_path / "work"
    line = refusal(tuning_quality.main, ["--quick", "--work-dir", str(work), flag, "0"], capsys)
    assert f"{flag}: must be at least 1, got 0" in line
    assert not work.exists()  # refused before anything was made


def test_size_transfer_quick_ranks_the_configurations_at_both_sizes_and_carries_the_winner(tmp_path: Path) -> None:
    from benchmarks.size_transfer import QUICK

    work = tmp_path / "work"
    result, printed = run_quick_here("size_transfer", tmp_path / "size.json", "--work-dir", str(work))
    configs = result["configs"]
    assert len(configs) == QUICK["configs"] == result["configs_ranked"]
    assert [c["rank"] for c in configs] == list(range(QUICK["configs"]))
    assert all(c["tuning_value"] >= d["tuning_value"] for c, d in itertools.pairwise(configs))  # best first
    for c in configs:
        for size in ("small", "large"):
            assert c[size]["n"] == 1 and is_finite(c[size]["mean"]) and is_finite(c[size]["final_kl"]), (c, size)
    assert -1 <= result["rank_correlation"] <= 1
    assert result["best_large"] == max(c["large"]["mean"] for c in configs)
    carried = result["winner_carried"]
    assert carried["as_tuned"]["mean"] == configs[0]["large"]["mean"]  # the winner's own large runs
    for rule, entry in carried.items():
        assert entry["gap"] == pytest.approx((entry["mean"] - result["best_large"]) / abs(result["best_large"])), rule
    assert set(result["peaks"]) == {"small", "large"} and "Rank correlation" in printed
    rows = [json.loads(line) for line in (work / "runs.jsonl").read_text().splitlines()]
    assert {r["params"]["size"] for r in rows} == {"small", "large"}
    assert {r["params"]["rule"] for r in rows if r["params"]["rank"] > 0} == {"as_tuned"}  # rules: the winner only
    # kl_pilot runs after the rest: the winner's as_tuned runs on the large model are its pilot.
    (piloted,) = [r for r in rows if r["params"]["rule"] == "kl_pilot"]
    assert set(carried) == {"as_tuned", "kl_held", "kl_pilot"}
    assert piloted["params"]["pilot_kl"] == pytest.approx(configs[0]["large"]["final_kl"])
    (top,) = result["piloted"]  # --pilot-top 1 in quick mode: the winner, as in winner_carried
    assert top["rank"] == 0 and top["kl_pilot"] == carried["kl_pilot"] and top["as_tuned"] == carried["as_tuned"]


@pytest.mark.parametrize("module", ["size_transfer", "horizon_transfer"])
def test_a_transfer_benchmark_refuses_a_source_it_cannot_read_in_one_line(module: str, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # A missing database, then a study the database does not hold: exit 2 naming --source, no work directory made
    # (both ended in a traceback and exit 1, the work directory already made).
    import importlib

    from tuner.store.database import create_engine
    from tuner.store.records import create_tables

    benchmark = importlib.import_module(f"benchmarks.{module}")
    held = tmp_path / "held.db"
    create_tables(create_engine(f"sqlite:///{held}"))
    for source in (f"nope=sqlite:///{tmp_path / 'none.db'}", f"nope=sqlite:///{held}"):
        work = tmp_path / "work"
        extra = ["--reference-trials", "1"] if module == "horizon_transfer" else []
        line = refusal(benchmark.main, ["--source", source, "--work-dir", str(work), *extra], capsys)
        assert line.startswith(f"python -m benchmarks.{module}: error: --source nope:"), line
        assert not work.exists() and not (tmp_path / "none.db").exists()


def test_spread_takes_evenly_spaced_ranks_with_both_ends() -> None:
    from benchmarks.size_transfer import spread

    assert spread(list(range(10)), 4) == [0, 3, 6, 9]
    assert spread(list(range(3)), 5) == [0, 1, 2] and spread(list(range(7)), 1) == [0]
    for n, k in ((30, 12), (24, 12), (13, 12)):
        picked = spread(list(range(n)), k)
        assert len(picked) == k == len(set(picked)) and picked[0] == 0 and picked[-1] == n - 1, (n, k)


@pytest.mark.parametrize(("arguments", "named"), [
    (["--configs", "1"], "--configs: a ranking needs at least 2, got 1"),
    (["--seeds", "0"], "--seeds: must be at least 1, got 0"),
    (["--pilot-top", "0"], "--pilot-top: must be at least 1, got 0"),
    (["--large-task", "no_such_task"], "--large-task: 'no_such_task' is not a built-in task"),
])
def test_size_transfer_refuses_bad_input_in_one_line(arguments: list[str], named: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import size_transfer

    work = tmp_path / "work"
    line = refusal(size_transfer.main, ["--quick", "--work-dir", str(work), *arguments], capsys)
    assert named in line
    assert not work.exists()  # refused before anything was made


@pytest.mark.parametrize("flag", ["--workers", "--trials"])
def test_ray_overhead_refuses_a_count_below_one_in_one_line(flag: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # --workers 0 ran the quick study with one worker and said nothing of it.
    from benchmarks import ray_overhead

    out = tmp_path / "ray.json"
    line = refusal(ray_overhead.main, ["--quick", "--out", str(out), flag, "0"], capsys)
    assert f"{flag}: must be at least 1, got 0" in line
    assert not out.exists()  # refused before any study ran


def test_curve_table_refuses_no_workers_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import curve_table

    out = tmp_path / "curves.jsonl"
    line = refusal(curve_table.main, ["--quick", "--out", str(out), "--workers", "0"], capsys)
    assert "--workers: must be at least 1, got 0" in line
    assert not out.exists()


@pytest.mark.parametrize(("arguments", "named"), [
    (["--study", "{missing}"], "no such file"),
    (["--study", "{not_a_study}"], "objectives"),
    (["--workers", "0"], "--workers: must be at least 1, got 0"),
], ids=["study file missing", "not a study", "no workers"])
def test_pruning_saving_refuses_bad_input_in_one_line(arguments: list[str], named: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # A study file that was not there ended in a 20-line traceback and exit status 1.
    from benchmarks import pruning_saving

    not_a_study = tmp_path / "not_a_study.yaml"
    not_a_study.write_text("name: x\nbase: {total_episodes: 32}\n")
    paths = {"missing": str(tmp_path / "nowhere.yaml"), "not_a_study": str(not_a_study)}
    keep = tmp_path / "keep"
    line = refusal(pruning_saving.main, ["--quick", "--keep", str(keep), "--out", str(tmp_path / "out.json"),
                                         *(argument.format(**paths) for argument in arguments)], capsys)
    assert named in line
    if "{missing}" in arguments:
        assert "nowhere.yaml" in line
    assert not keep.exists()  # refused before any study was written


@pytest.mark.parametrize(("arguments", "named"), [
    (["--baseline", "{missing}"], "no such file"),
    (["--study", "no-such-study"], "no-such-study"),
    (["--storage", "sqlite:///{absent}"], "no database at"),
], ids=["baseline missing", "study not in storage", "database missing"])
def test_tuned_vs_defaults_refuses_bad_input_in_one_line(arguments: list[str], named: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import optuna

    from benchmarks import tuned_vs_defaults

    storage = f"sqlite:///{tmp_path / 'other.db'}"
    optuna.create_study(study_name="another-study", storage=storage)  # a database that holds some other study
    absent = tmp_path / "absent.db"
    argv = ["--quick", "--storage", storage, "--out", str(tmp_path / "out.json"),
            *(argument.format(missing=tmp_path / "nowhere.yaml", absent=absent) for argument in arguments)]
    assert named in refusal(tuned_vs_defaults.main, argv, capsys)
    assert not (tmp_path / "out.json").exists()
    assert not absent.exists()  # reading a study never creates its database
