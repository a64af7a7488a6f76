"""Each process's own entry point freezes its heap (tuner.trial.frozen_heap); an in-process call never does."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from ppo_tune.cli import main
from tuner.trial.launch import PRELOAD

ROOT = Path(__file__).resolve().parents[2]
# Runs a module as ``python -m`` does, and prints at exit how many objects the collector had been told to skip.
AT_EXIT = ("import atexit, gc, runpy, sys; "
           "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr)); "
           "sys.argv = [sys.argv[1], '--help']; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def frozen_at_exit(module: str) -> int:
    completed = subprocess.run([sys.executable, "-c", AT_EXIT, module], cwd=ROOT, capture_output=True, text=True,
                               timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return int(completed.stderr.split("frozen ")[-1])


@pytest.mark.parametrize("module", ["ppo_tune", "tuner.run.worker", "tuner.trial.process"])
def test_a_command_run_as_its_own_process_exits_with_its_heap_frozen(module: str) -> None:
    # Tens of thousands of objects at least: the imports alone (argparse's --help exits before any work).
    assert frozen_at_exit(module) > 10_000


def test_the_trial_fork_server_freezes_after_everything_it_preloads() -> None:
    assert PRELOAD[-1] == "tuner.trial.fork_server_freeze"
    completed = subprocess.run([sys.executable, "-c", "import gc, tuner.trial.fork_server_freeze; "
                                "print(gc.get_freeze_count(), len(gc.get_objects()))"], cwd=ROOT,
                               capture_output=True, text=True, timeout=300, check=True)
    frozen, still_tracked = map(int, completed.stdout.split())
    assert frozen > 1_000 and still_tracked < 100, (frozen, still_tracked)  # all it had imported


def test_main_called_in_process_leaves_its_callers_heap_alone(capsys: pytest.CaptureFixture[str]) -> None:
    # Frozen objects are never collected: a caller's garbage cycles would be kept for good.
    before = gc.get_freeze_count()
    with pytest.raises(SystemExit):
        main(["--help"])
    assert gc.get_freeze_count() == before
