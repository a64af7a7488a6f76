"""The fresh-draw proxy fidelity benchmark: its quick run end to end, and its figures on known scores."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from benchmarks import proxy_fidelity
from ppo_core.tasks.fortunes.pairs import ScoredResponse


def _scored(seed: int) -> list[ScoredResponse]:
    rng = random.Random(seed)
    return [ScoredResponse(f"prompt {p}", f"response {p}.{r}", rng.random()) for p in range(12) for r in range(4)]


def test_a_proxy_that_is_gold_is_perfect_and_its_reverse_differs_by_all_pairs() -> None:
    scored = _scored(0)
    gold = [s.gold for s in scored]
    out = proxy_fidelity.figures(scored, {"gold": gold, "reverse": [-g for g in gold]}, resamples=200, seed=1)
    assert out["gold"]["pair_accuracy"] == 1.0 and out["gold"]["pair_accuracy_95"] == [1.0, 1.0]
    assert out["reverse"]["pair_accuracy"] == 0.0 and out["reverse"]["spearman"] == pytest.approx(-1.0)
    difference = out["reverse"]["minus_gold"]["pair_accuracy"]
    assert difference["difference"] == -1.0 and difference["interval_95"] == [-1.0, -1.0]


def test_the_bootstrap_interval_holds_the_estimate_and_narrows_with_more_prompts() -> None:
    rng = random.Random(3)
    wide = _scored(2)
    noisy = [s.gold + rng.gauss(0, 0.3) for s in wide]
    out = proxy_fidelity.figures(wide, {"noisy": noisy}, resamples=400, seed=0)["noisy"]
    low, high = out["pair_accuracy_95"]
    assert low < out["pair_accuracy"] < high and high - low > 0.05
    many = [ScoredResponse(f"p{k}:{s.prompt}", s.response, s.gold) for k in range(8) for s in wide]
    tight = proxy_fidelity.figures(many, {"noisy": noisy * 8}, resamples=400, seed=0)["noisy"]["pair_accuracy_95"]
    assert tight[1] - tight[0] < (high - low) * 0.6


@pytest.mark.heavy
def test_the_quick_run_writes_each_figure(tmp_path: Path) -> None:
    out = tmp_path / "fresh.json"
    proxy_fidelity.main(["--quick", "--out", str(out), "--work-dir", str(tmp_path / "work")])
    result = json.loads(out.read_text())
    assert result["quick"] and result["seed"] == proxy_fidelity.SEED and "--quick" in result["command"]
    (entry,) = result["policies"].values()
    figure = entry["proxies"]["fortunes_v3_tiny"]
    assert figure["pairs"] > 0 and 0.0 <= figure["pair_accuracy"] <= 1.0 and math.isfinite(figure["spearman"])
    assert entry["responses"] == proxy_fidelity.QUICK_PROMPTS * proxy_fidelity.QUICK_SAMPLES
    assert list((tmp_path / "work").iterdir())  # the draw was kept, for a resumed run


def test_the_moved_policys_fidelity_pairs_runs_by_prompt_and_update(tmp_path: Path) -> None:
    runs = []
    for seed in range(3):
        run = tmp_path / f"seed_{seed}"
        run.mkdir()
        rows = [{"update": update, "prompt": f"p{p}", "response": f"r{seed}.{p}.{update}",
                 "gold_score": (seed + p) / 10 + update, "score": float(seed if update == 0 else -seed)}
                for update in (0, 8) for p in range(4)]
        (run / "samples.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        runs.append(run)
    out = proxy_fidelity.moved(runs, resamples=50, seed=0)
    assert list(out) == ["0", "8"]
    # Gold rises with the run's seed at every prompt: the proxy agrees at update 0 and reverses at update 8.
    assert out["0"]["pair_accuracy"] == 1.0 and out["8"]["pair_accuracy"] == 0.0
    assert out["0"]["pairs"] == 4 * 3 and out["8"]["responses"] == 12
    assert out["8"]["mean_gold"] == pytest.approx(8 + sum((s + p) / 10 for s in range(3) for p in range(4)) / 12)


@pytest.mark.parametrize(("argv", "says"), [
    (["--moved", "no_such_run"], "--moved: no_such_run has no samples.jsonl"),
    (["--tasks", "fortunes_v9"], "--tasks: no built-in task 'fortunes_v9'"),
    # One draw, scored by the first task's gold: the sixth task's proxy would be judged against the third gold.
    (["--tasks", "fortunes_v5_smollm2", "fortunes_v6_smollm2"],
     "--tasks: fortunes_v5_smollm2 and fortunes_v6_smollm2 share a policy's draw but not a gold"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        proxy_fidelity.main(["--quick", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
