"""benchmarks.trl_trials' quick mode: ppo_core's GRPO and TRL's GRPOTrainer on one configuration, seeds paired, every
figure of the full run, and a rerun that resumes from the finished runs instead of training again."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import trl_trials
from benchmarks.trl_trials import TASKS, TRAINERS, check_same_computation, summarise

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.heavy  # trains in processes of its own: scheduled first


def run_quick(out: Path, work: Path) -> tuple[dict[str, Any], str]:
    """``python -m benchmarks.trl_trials --quick --workers 1``: the JSON it wrote and what it printed. One worker runs
    both trainers in the command's own process, one after the other (a pool would start two more interpreters)."""
    completed = subprocess.run([sys.executable, "-m", "benchmarks.trl_trials", "--quick", "--workers", "1", "--out",
                                str(out), "--work-dir", str(work)], cwd=REPO, capture_output=True, text=True,
                               check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(out.read_text()), completed.stdout


def test_trl_trials_quick_runs_both_trainers_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "work"
    result, printed = run_quick(tmp_path / "trl_trials.json", work)
    part = result["tasks"]["graph"]
    assert part["seeds"] == [1000] and set(part["curves"]) == set(TRAINERS)
    # 2 updates of 16 episodes, an evaluation at each: the same evaluation updates on both sides.
    assert [[point["update"] for point in part["curves"][trainer]] for trainer in TRAINERS] == [[1, 2], [1, 2]]
    for key in ("gold", "kl"):
        difference = part["trl_minus_ppo_core"][key]
        finals = [part["final"][trainer][key][0] for trainer in ("trl-grpo", "ppo_core")]
        assert difference["mean"] == pytest.approx(finals[0] - finals[1])
    assert printed.count("seed 1000:") == 2
    # Again, in this process (the command line ran above; a second start would spend seconds importing).
    capsys.readouterr()
    trl_trials.main(["--quick", "--out", str(tmp_path / "again.json"), "--work-dir", str(work)])
    again, printed = json.loads((tmp_path / "again.json").read_text()), capsys.readouterr().out
    assert "seed 1000:" not in printed and "wrote " in printed  # nothing trained again
    assert again["tasks"] == result["tasks"] and len((work / "runs.jsonl").read_text().splitlines()) == 2


def test_the_shipped_configurations_compute_what_grpotrainer_computes() -> None:
    for values in TASKS.values():
        check_same_computation(values)  # SystemExit otherwise
    with pytest.raises(SystemExit, match="not what GRPOTrainer computes"):
        check_same_computation({**TASKS["graph"], "kl_target": 3.0})  # TRL has no adaptive controller


def test_the_summary_pairs_seeds_and_skips_a_seed_one_trainer_lacks() -> None:
    def run(trainer: str, seed: int, gold: float, kl: float) -> dict[str, object]:
        return {"task": "graph", "trainer": trainer, "seed": seed, "seconds": 1.0,
                "evaluations": [{"update": 4, "gold": gold / 2, "kl": kl / 2}, {"update": 8, "gold": gold, "kl": kl}]}

    runs = [run("ppo_core", 1, 0.5, 2.0), run("trl-grpo", 1, 0.6, 3.0), run("ppo_core", 2, 0.4, 1.0),
            run("trl-grpo", 2, 0.6, 1.0), run("ppo_core", 3, 0.9, 9.0)]
    part = summarise(runs, ["graph"])["graph"]
    assert part["seeds"] == [1, 2]
    assert part["trl_minus_ppo_core"]["gold"]["differences"] == pytest.approx([0.1, 0.2])
    assert part["trl_minus_ppo_core"]["kl"]["mean"] == pytest.approx(0.5)
    assert part["curves"]["ppo_core"] == [{"update": 4, "gold": pytest.approx(0.225), "kl": pytest.approx(0.75)},
                                          {"update": 8, "gold": pytest.approx(0.45), "kl": pytest.approx(1.5)}]
    assert not math.isnan(part["trl_minus_ppo_core"]["gold"]["ci_low"])
    json.dumps(part)  # what the benchmark writes
