"""One run on two processes (gloo, on the CPU) against one process with the same global batch.

A reward function logs, per rank, the dataset rows it scored and the scores it gave, so the test sees each rank's
share of every batch from outside the trainer, and can check the reported metrics against the scores themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from accelerate.utils import DistributedType
from helpers.data_parallel import GLOBAL_BATCH, UPDATES, run, write_run_config
from rank_rewards import LOG_DIR_ENV

from ppo_core.algorithm.kl import make_kl_controller
from ppo_core.config.ppo_config import ConfigError
from ppo_core.run.distributed import check_launch

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("data_parallel")
    config = write_run_config(root)
    # The same global batch (32) and global mini-batch (16): 1 x 8 x 4 accumulation, and 2 x 8 x 2.
    one = run(root, "one", 1, config, gradient_accumulation_steps=4)
    two = run(root, "two", 2, config, gradient_accumulation_steps=2)
    return {"one": one, "two": two}


def test_each_rank_scores_its_own_share_of_the_global_batch(runs: dict[str, Any]) -> None:
    (_, one_log), (_, two_log) = runs["one"], runs["two"]
    assert set(two_log) == {0, 1} and len(two_log[0]) == len(two_log[1]) == len(one_log[0]) == UPDATES
    for update in range(UPDATES):
        rank0, rank1 = two_log[0][update]["rows"], two_log[1][update]["rows"]
        assert len(rank0) == len(rank1) == GLOBAL_BATCH // 2
        assert not set(rank0) & set(rank1)  # disjoint shares, never the same prompts twice
        # Together the two ranks see exactly the prompts one process sees with the whole batch.
        assert Counter(rank0 + rank1) == Counter(one_log[0][update]["rows"])


def test_metrics_are_global_not_the_main_ranks(runs: dict[str, Any]) -> None:
    metrics, logs = runs["two"]
    differs_from_rank0 = 0
    for update, row in enumerate(metrics):
        scores = logs[0][update]["scores"] + logs[1][update]["scores"]
        assert row["objective/scores"] == pytest.approx(sum(scores) / len(scores), abs=1e-6)
        rank0 = logs[0][update]["scores"]
        differs_from_rank0 += abs(sum(rank0) / len(rank0) - row["objective/scores"]) > 1e-6
        assert row["episode"] == (update + 1) * GLOBAL_BATCH
        # Every rank shaped its rewards with the coefficient the main rank reports: the non-score reward of the
        # global batch is -beta x its KL only if no rank used another beta.
        assert row["objective/non_score_reward"] == pytest.approx(-row["objective/kl_coef"] * row["objective/kl"],
                                                                  rel=1e-4, abs=1e-6)
    assert differs_from_rank0 > UPDATES // 2


def test_the_kl_controller_steps_on_the_global_kl(runs: dict[str, Any]) -> None:
    metrics, _ = runs["two"]
    controller = make_kl_controller(0.05, 2.0, 10000)
    for row in metrics:
        assert row["objective/kl_coef"] == pytest.approx(controller.value, rel=1e-9)
        controller.update(row["objective/kl"], GLOBAL_BATCH)


def test_two_processes_learn_as_one_does(runs: dict[str, Any]) -> None:
    curves = {name: [row["objective/scores"] for row in runs[name][0]] for name in ("one", "two")}
    for name, scores in curves.items():
        first, last = sum(scores[:4]) / 4, sum(scores[-4:]) / 4
        assert last > first + 0.2, (name, first, last)
    # Different samples (each rank draws its own), the same learning: final rewards within sampling noise.
    assert abs(sum(curves["one"][-4:]) - sum(curves["two"][-4:])) / 4 < 0.15, curves


# Each rank ends its process group once, before its exit, tracker or not. Left to the interpreter's exit, gloo's
# threads can abort a rank after a run that succeeded ("terminate called without an active exception"); ended by the
# main rank's tracker at the end of training, it breaks the other ranks' wait as the model is saved. This launch, a
# user's script with a tracker, is one; the two-process run of ``runs`` above, through ``ppo-tune train`` without a
# tracker, is the other, checked for the same by helpers.data_parallel.run.
def test_each_rank_ends_its_process_group_once_before_it_exits_with_a_tracker(tmp_path: Path) -> None:
    config = write_run_config(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"]
    env = {**os.environ, LOG_DIR_ENV: str(tmp_path), "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
           "CUDA_VISIBLE_DEVICES": ""}
    completed = subprocess.run(
        [*launch, "-m", "end_of_launch", str(config), str(out), f"total_episodes={GLOBAL_BATCH}", "num_ppo_epochs=1",
         "gradient_accumulation_steps=2", "report_to=tensorboard", f"output_dir={tmp_path / 'run'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "terminate called" not in completed.stderr, completed.stderr[-3000:]
    views = {path.stem: json.loads(path.read_text()) for path in out.glob("rank*.json")}
    assert views == {f"rank{rank}": {"initialized": False, "destroyed": 1} for rank in (0, 1)}, views


@pytest.mark.parametrize(("launch", "name"), [(DistributedType.FSDP, "FSDP"), (DistributedType.DEEPSPEED, "DeepSpeed")])
def test_sharded_launches_are_refused_in_one_line(launch: DistributedType, name: str) -> None:
    # accelerate starts FSDP and DeepSpeed only on accelerators, so the refusal itself is what runs here.
    with pytest.raises(ConfigError, match=rf"^accelerate launch: {name} is not supported yet") as error:
        check_launch(launch)
    assert "\n" not in str(error.value)
    check_launch(DistributedType.MULTI_GPU)
    check_launch(DistributedType.MULTI_CPU)
