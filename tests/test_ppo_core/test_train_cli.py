"""``ppo-tune train`` end to end on the built-in task, and its bad-input handling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ppo_core.config.io import load_config
from ppo_tune.cli import main

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = ROOT / "studies" / "train.yaml"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_shipped_config_raises_gold_above_the_sft_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The whole shipped run (96 updates of 16 episodes): its slow, adaptive-KL climb needs them all.
    assert main(["train", str(SHIPPED_CONFIG), "--output", str(tmp_path), "--quiet"]) == 0
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert [m["update"] for m in metrics] == list(range(1, 97))
    sft_gold = metrics[0]["objective/gold_score"]  # update 1's rollout comes from the untouched SFT policy
    final_gold = sum(m["objective/gold_score"] for m in metrics[-4:]) / 4
    assert final_gold > sft_gold + 0.1, (sft_gold, final_gold)
    # Held-out gold at every quarter of the run: the last evaluation keeps the gain of the first.
    held_out = {m["update"]: m["eval/gold_score"] for m in metrics if "eval/gold_score" in m}
    assert list(held_out) == [24, 48, 72, 96]
    assert held_out[96] > held_out[24], held_out
    samples = read_jsonl(tmp_path / "samples.jsonl")
    assert {s["update"] for s in samples} >= {0, 96}
    assert all(s["prompt"].startswith("from ") and s["gold_score"] is not None for s in samples)
    resolved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert resolved["total_episodes"] == 1536 and load_config(tmp_path / "config.yaml").kl_target == 5.73
    summary = json.loads(capsys.readouterr().out)
    assert summary["updates"] == 96 and summary["last_gold_score"] == pytest.approx(metrics[-1]["objective/gold_score"],
                                                                                    abs=1e-4)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--set", "cliprange=0"], "cliprange: must be > 0, got 0.0"),
        (["--set", "lam=2"], "lam: must be in [0, 1], got 2.0"),
        (["--set", "learning_rate=-1e-5"], "learning_rate: must be >= 0"),
        (["--set", "kl_coeff=0.1"], "kl_coeff: unknown config key (did you mean 'kl_coef'?)"),
        (["--set", "num_ppo_epochs=many"], "num_ppo_epochs: expected int, got 'many'"),
        (["--set", "task=atari"], "task: unknown task 'atari'"),
        (["--set", "per_device_train_batch_size=3", "--set", "num_mini_batches=4"],
         "num_mini_batches: 4 must divide the rollout batch"),
        (["--set", "nonsense"], "--set: expected key=value"),
    ],
)
def test_bad_flags_exit_2_with_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    assert main(["train", str(SHIPPED_CONFIG), "--output", str(tmp_path), "--quiet", *arguments]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("ppo-tune train: error: ") and "\n" not in error
    assert message in error, error


def test_missing_config_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", str(tmp_path / "none.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
