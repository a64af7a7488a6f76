"""A long measurement's worker pool (benchmarks.common.pool): its workers die with the measurement's process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from helpers.studies import wait_for

REPO = Path(__file__).resolve().parents[2]
# A measurement with one job in flight: a worker sleeping for two minutes, its parent waiting for it.
MEASUREMENT = """
import time
from benchmarks.common.pool import worker_pool
pool = worker_pool(1)
pool.submit(time.sleep, 120)
print("submitted", flush=True)
time.sleep(120)
"""


def pool_workers(parent: psutil.Process) -> list[psutil.Process]:
    return [child for child in parent.children() if "spawn_main" in " ".join(child.cmdline())]


def test_a_measurement_killed_takes_its_workers_with_it() -> None:
    # Regression: the real-model study's re-measure, stopped with `kill`, left both workers running their jobs,
    # minutes of CPU whose results nobody would write, beside the resumed measurement.
    measurement = subprocess.Popen([sys.executable, "-c", MEASUREMENT], cwd=REPO, stdout=subprocess.PIPE, text=True,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})
    workers: list[psutil.Process] = []
    try:
        assert measurement.stdout is not None and measurement.stdout.readline().strip() == "submitted"
        parent = psutil.Process(measurement.pid)
        wait_for(lambda: pool_workers(parent), 60, "the pool's worker to start")
        workers = pool_workers(parent)
        measurement.send_signal(signal.SIGKILL)
        measurement.wait(timeout=30)
        wait_for(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers), 30,
                 "the pool's worker to die with the measurement")
    finally:
        measurement.kill()
        for worker in workers:
            if worker.is_running():
                worker.kill()
