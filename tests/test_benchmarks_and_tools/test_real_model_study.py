"""benchmarks.real_model_study: the study file tuned, validated and set beside its baselines, resumable step by step.

The quick run is the real pipeline (``ppo-tune run`` and ``ppo-tune validate`` as subprocesses, then the baselines in
a pool) on the text task's tiny variant with its companion policy; the real model's run is the full one.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import real_model_study

pytestmark = pytest.mark.heavy  # starts processes and studies: scheduled first

REPO = Path(__file__).resolve().parents[2]


def quick(work: Path, out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.real_model_study", "--quick", "--workers", "1", "--work-dir", str(work),
         "--out", str(out), *more],
        cwd=REPO, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}, capture_output=True, text=True, check=False)


def test_quick_run_pairs_every_arm_on_the_validation_seed_and_resumes_without_rerunning(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "rms.json"
    first = quick(work, out)
    assert first.returncode == 0, first.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    seeds = [int(s) for s in result["arms"]["tuned"]]
    assert len(seeds) == 1
    # Every arm was scored on the seed the validation drew, so the differences are paired.
    assert set(result["arms"]) == {"tuned", "TRL GRPO defaults", "untuned", "guidance middle"}
    for arm, values in result["arms"].items():
        assert [int(s) for s in values] == seeds, arm
        assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values.values()), arm
    for arm, pair in result["tuned_minus"].items():
        assert pair["seeds"] == seeds
        assert pair["differences"][0] == pytest.approx(result["arms"]["tuned"][str(seeds[0])]
                                                       - result["arms"][arm][str(seeds[0])])
    # Both intervals, in the file and in the report (the sixth look is judged on the 99%).
    assert all({"ci_low", "ci99_low"} <= set(pair) for pair in result["tuned_minus"].values())
    assert "tuned - untuned: " in first.stdout and ", 99% [" in first.stdout, first.stdout
    assert result["trl_grpo_defaults"] == {"learning_rate": 1e-6, "beta": 0.0}
    assert result["winner"]["n"] == 1 and result["winner"]["config"]["task"] == "fortunes_tiny"
    assert all(result["seconds"][step] > 0 for step in ("study", "validation", "baselines"))
    # The winner's held-out KL on the seeds it raced and on the fresh one, and each run's evaluation share.
    runs = result["runs"]
    assert set(runs["winner_kl"]["fresh"]) == {str(s) for s in seeds} and runs["winner_kl"]["raced"]
    assert all(math.isfinite(kl) for part in runs["winner_kl"].values() for kl in part.values())
    assert runs["eval_share"]["study"] and len(runs["eval_share"]["validation"]) == 1
    assert all(0 < share < 1 for part in runs["eval_share"].values() for share in part)
    # The untuned arm trains nothing: its runs report no update.
    untuned = [r for r in result["baseline_runs"] if r["arm"] == "untuned"]
    assert len(untuned) == 1 and untuned[0]["updates"] == 0
    guidance = [r for r in result["baseline_runs"] if r["arm"] == "guidance middle"]
    assert len(guidance) == 1 and guidance[0]["updates"] > 0
    # Each run names its CPU: a trained run repeats to the last digit only on the same kind.
    from benchmarks.common.machine import cpu_model

    assert {r["cpu"] for r in result["baseline_runs"]} == {cpu_model()}
    baselines = (work / "baselines.jsonl").read_text()
    steps = json.loads((work / "steps.json").read_text())

    # Again, in this process (the command line ran above; a second start costs seconds of imports). Nothing finished
    # is run again: the same baseline records, the same step seconds, the same figures.
    real_model_study.main(["--quick", "--workers", "1", "--work-dir", str(work), "--out", str(out)])
    assert (work / "baselines.jsonl").read_text() == baselines
    assert json.loads((work / "steps.json").read_text()) == steps
    assert json.loads(out.read_text())["arms"] == result["arms"]

    # The re-measure: the validated winner and both baselines again, on a fresh seed, each evaluation wider. In this
    # process (with one worker its runs train here too): the command line was run above, and each start costs seconds.
    remeasure = ["--quick", "--workers", "1", "--work-dir", str(work), "--out", str(out), "--eval-samples", "2",
                 "--eval-prompts", "3"]
    real_model_study.main(remeasure)
    again = json.loads(out.read_text())
    assert again["remeasured_evaluation"] == {"num_eval_prompts": 3, "num_eval_samples": 2}
    assert {arm: list(values) for arm, values in again["arms"].items()} == {
        "tuned": ["2000"], "TRL GRPO defaults": ["2000"], "untuned": ["2000"]}
    runs = {r["arm"]: r for r in again["baseline_runs"]}
    assert all(r["evaluated"] == [3, 2] for r in runs.values())  # what each trainer ran with
    assert runs["tuned"]["updates"] > 0 and runs["untuned"]["updates"] == 0
    assert again["tuned_minus"]["untuned"]["seeds"] == [2000]
    # The validation the re-measure reads its winner from is not run again, and neither are the earlier baselines.
    record = json.loads((work / "steps.json").read_text())
    assert record["validation"] == steps["validation"] and record["baselines"] == steps["baselines"]
    lines = (work / "remeasure_3x2.jsonl").read_text()
    real_model_study.main(remeasure)
    assert (work / "remeasure_3x2.jsonl").read_text() == lines

    # The winner taken from that result instead, in an empty directory, its runs in a file named apart: nothing is
    # tuned or validated again, and it queues the very jobs the re-measure above ran (so the same runs: the runner is
    # one). Its runs file starts as a copy of that re-measure's, so nothing runs and the figures are the same.
    earlier, elsewhere, kept = tmp_path / "earlier.json", tmp_path / "elsewhere", tmp_path / "kept" / "runs.jsonl"
    earlier.write_text(out.read_text())
    kept.parent.mkdir()
    kept.write_text(lines)
    from_file = [*remeasure[:4], str(elsewhere), "--out", str(out), *remeasure[7:], "--winner-from", str(earlier),
                 "--runs", str(kept)]
    real_model_study.main(from_file)
    assert not (elsewhere / "study.db").exists() and not (elsewhere / "remeasure_3x2.jsonl").exists()
    assert kept.read_text() == lines
    copied = json.loads(out.read_text())
    assert copied["winner"]["from"] == {"path": str(earlier), "commit": again["commit"]}
    assert copied["arms"] == again["arms"] and copied["seconds"]["study"] == 0.0
    assert copied["command"].endswith(f"--winner-from {earlier} --runs {kept}")
    definition = real_model_study.study_file(real_model_study.DEFAULT_STUDY, quick=True)
    _, validated = real_model_study.validated_runs(definition["name"], f"sqlite:///{(work / 'study.db').resolve()}")
    from_study = real_model_study.arm_jobs(real_model_study.parse_arguments(remeasure)[1], definition, work, {},
                                           validated, result["trl_grpo_defaults"], 1)
    winner = real_model_study.earlier_winner(earlier, definition)
    assert isinstance(winner, dict)
    from_result = real_model_study.arm_jobs(real_model_study.parse_arguments(from_file)[1], definition, elsewhere,
                                            {}, winner, result["trl_grpo_defaults"], 1)
    assert from_result.jobs == from_study.jobs and len(from_study.jobs) == 3 and from_result.records == kept


@pytest.mark.parametrize(("content", "says"), [
    ("not json", "is not a result of this benchmark"),
    (json.dumps({"winner": {"trial": 3}}), "holds no validated winner with its config"),
    (json.dumps({"study": {"name": "other"}, "winner": {"config": {}}}), "tuned another study than --study's"),
])
def test_a_winner_from_a_file_that_cannot_pair_is_one_line_and_exit_2(
    content: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    result = tmp_path / "earlier.json"
    result.write_text(content)
    with pytest.raises(SystemExit) as exited:
        real_model_study.main(["--work-dir", str(tmp_path / "work"), "--out", str(tmp_path / "r.json"),
                               "--eval-samples", "2", "--winner-from", str(result)])
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert says in error and "Traceback" not in error
    assert not (tmp_path / "work" / "study.db").exists() and not (tmp_path / "r.json").exists()


def test_baselines_already_recorded_are_not_run_again(tmp_path: Path) -> None:
    out = tmp_path / "baselines.jsonl"
    record = {"arm": "untuned", "seed": 7, "score": 0.5, "final_kl": 0.0, "updates": 0, "seconds": 1.0}
    out.write_text(json.dumps(record) + "\n")
    # A job whose values could not even build a config: were it run, it would raise.
    job = real_model_study.BaselineJob("untuned", 7, {"task": "no such task"}, {"metric": "eval/gold_score"}, False)
    real_model_study.run_baselines([job], out, workers=1)
    assert out.read_text() == json.dumps(record) + "\n"


def test_steps_keep_the_seconds_of_an_interrupted_step_and_run_it_again(tmp_path: Path) -> None:
    steps = real_model_study.Steps(tmp_path / "steps.json")

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        steps.run("study", interrupted)
    again = real_model_study.Steps(tmp_path / "steps.json")
    assert not again.done("study") and again.seconds("study") >= 0.0
    ran: list[str] = []
    again.run("study", lambda: ran.append("study"))
    again.run("study", lambda: ran.append("twice"))
    assert ran == ["study"] and real_model_study.Steps(tmp_path / "steps.json").done("study")


def test_a_step_done_for_fewer_seeds_runs_again_for_more(tmp_path: Path) -> None:
    # Regression: validation and baselines done for 3 seeds were skipped by a rerun with --seeds 10, which then
    # compared the arms on the first 3 seeds only.
    steps = real_model_study.Steps(tmp_path / "steps.json")
    ran: list[int] = []
    steps.run("validation", lambda: ran.append(3), seeds=3)
    steps.run("validation", lambda: ran.append(-3), seeds=3)
    again = real_model_study.Steps(tmp_path / "steps.json")
    again.run("validation", lambda: ran.append(10), seeds=10)
    again.run("validation", lambda: ran.append(-5), seeds=5)
    assert ran == [3, 10] and real_model_study.Steps(tmp_path / "steps.json").done("validation", 10)


@pytest.mark.parametrize(("arguments", "named"), [
    (["--study", "no/such/study.yaml"], "--study"),
    ([], "--work-dir"),
    (["--workers", "0"], "--workers"),
    (["--seeds", "0"], "--seeds"),
    (["--eval-samples", "0"], "--eval-samples"),
    (["--eval-prompts", "8"], "--eval-prompts"),
    (["--winner-from", "r.json"], "--winner-from"),
    (["--runs", "runs.jsonl"], "--runs"),
    (["--eval-samples", "2", "--winner-from", "no/such/result.json"], "--winner-from: no file"),
])
def test_bad_input_is_one_line_and_exit_2(arguments: list[str], named: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        real_model_study.main(["--out", str(tmp_path / "r.json"), *arguments])
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert named in error and "Traceback" not in error


def test_a_missing_trl_stops_the_run_before_the_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: a fresh install without the trl extra tuned for 40 minutes, then failed at the baselines with
    # ModuleNotFoundError. None in sys.modules is Python's own "this module cannot be imported".
    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(SystemExit) as exited:
        real_model_study.main(["--quick", "--work-dir", str(tmp_path / "work"), "--out", str(tmp_path / "r.json")])
    assert exited.value.code == 2
    assert "pip install 'ppo-tune[trl]'" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


def test_a_work_dir_of_another_study_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "study.yaml").write_text("name: another\n")
    with pytest.raises(SystemExit) as exited:
        real_model_study.main(["--quick", "--work-dir", str(tmp_path), "--out", str(tmp_path / "r.json")])
    assert exited.value.code == 2
    assert "another study" in capsys.readouterr().err


@pytest.mark.parametrize(("file", "name", "today_s"), [
    ("moonshot_companion.yaml", "smollm2_companion", False),
    ("moonshot_companion_v3.yaml", "smollm2_companion_v3", True),
])
def test_the_transfer_s_small_study_is_the_real_model_study_on_the_companion_policy(
    file: str, name: str, today_s: bool
) -> None:
    """The transfer's small studies (benchmarks/README.md, "The transfer moonshot" and "The transfer again") must stay
    what their figures say they are: benchmarks/studies/smollm2.yaml with only the policy (the task's companion), the
    name and the timeout changed; the first without what the real study gained after it was measured."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    real = yaml.safe_load((root / "benchmarks" / "studies" / "smollm2.yaml").read_text())
    small = yaml.safe_load((root / "benchmarks" / file).read_text())
    assert small["name"] == name and "timeout" not in small
    assert "sft_model_path" not in small["base"] and real["base"]["sft_model_path"] == "smollm2-135m-instruct"
    real["base"].pop("sft_model_path")
    if not today_s:  # added to the real study for its third look, after the moonshot (ddf9d98)
        real.pop("seed_policy")
        real["sampler"].pop("within_budget")
    for key in ("name", "timeout"):
        real.pop(key, None)
        small.pop(key, None)
    assert small == real


def test_paired_gives_both_intervals_as_scipy_computes_them() -> None:
    from scipy import stats  # type: ignore[import-untyped]

    tuned, other = {1: 0.56, 2: 0.51, 3: 0.55, 4: 0.60}, {1: 0.53, 2: 0.53, 3: 0.52, 4: 0.54, 9: 0.1}
    pair = real_model_study.paired(tuned, other)
    differences = [0.56 - 0.53, 0.51 - 0.53, 0.55 - 0.52, 0.60 - 0.54]
    assert pair["seeds"] == [1, 2, 3, 4] and pair["differences"] == pytest.approx(differences)
    for level, low, high in ((0.95, "ci_low", "ci_high"), (0.99, "ci99_low", "ci99_high")):
        expected = stats.t.interval(level, len(differences) - 1, loc=sum(differences) / 4,
                                    scale=stats.sem(differences))
        assert (pair[low], pair[high]) == pytest.approx(expected)
    assert pair["ci99_low"] < pair["ci_low"] and pair["ci99_high"] > pair["ci_high"]
