"""The workers' command lines: how many of them, each with its GPUs or its share of the CPU threads, and whether the one
worker runs in ``ppo-tune run``'s own process."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.study.spec import StudySpec
from tuner.study.values import StudySpecError

if TYPE_CHECKING:  # only --launcher ray makes one
    from tuner.trial.ray_launch import RayCluster

WORKER_COMMAND = [sys.executable, "-m", "tuner.run.worker"]


# The device nodes through which torch reaches a GPU: NVIDIA's driver on Linux, WSL 2's GPU paravirtualisation, and
# AMD's ROCm (whose torch answers torch.cuda too).
GPU_DEVICE_NODES = ("nvidiactl", "nvidia0", "dxg", "kfd")


def gpu_driver_present(dev: Path = Path("/dev")) -> bool:
    """Whether any GPU driver's device node is in ``dev``: without one, torch can see no GPU."""
    return any((dev / node).exists() for node in GPU_DEVICE_NODES)


def visible_gpus() -> list[str]:
    """GPU indices this machine exposes (honouring an existing CUDA_VISIBLE_DEVICES). Without a GPU driver there are
    none, and torch is not imported to say so: its import costs ``ppo-tune run`` seconds of CPU before any trial."""
    if not gpu_driver_present():
        return []
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:  # a broken CUDA install must not stop a CPU study
        count = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [index for index in visible.split(",") if index.strip()][:count]
    return [str(index) for index in range(count)]


def gpu_groups(gpus: Sequence[str], workers: int, processes_per_trial: int) -> list[list[str]]:
    """The GPU ids each worker's trials see (its CUDA_VISIBLE_DEVICES), from the ids this machine exposes.

    Without GPUs every worker gets none: trials run on the CPU, several processes of one trial over gloo. With one
    process per trial each worker gets one GPU, shared round-robin when there are more workers than GPUs. With N
    processes per trial each worker gets N GPUs of its own (one process per GPU, as NCCL requires), so the machine
    needs N x workers of them; GPUs left over stay idle.

    Example::

        gpu_groups(["0", "1", "2", "3"], workers=2, processes_per_trial=2)  # [["0", "1"], ["2", "3"]]
    """
    if not gpus:
        return [[] for _ in range(workers)]
    if processes_per_trial == 1:
        return [[gpus[index % len(gpus)]] for index in range(workers)]
    if len(gpus) < processes_per_trial:
        raise StudySpecError(f"processes_per_trial: {processes_per_trial} processes per trial need "
                             f"{processes_per_trial} GPUs, this machine has {len(gpus)}")
    if len(gpus) < processes_per_trial * workers:
        raise StudySpecError(f"processes_per_trial: {workers} workers x {processes_per_trial} processes need "
                             f"{processes_per_trial * workers} GPUs, this machine has {len(gpus)} "
                             f"(run with --workers {len(gpus) // processes_per_trial})")
    return [list(gpus[index * processes_per_trial:(index + 1) * processes_per_trial]) for index in range(workers)]


def cpu_threads_per_worker(workers: int) -> int:
    """Each of ``workers`` local workers' share of the CPU threads: the cores this process may run on (its affinity,
    which a Slurm or taskset allocation sets; not the machine's count) split evenly, at most ``OMP_NUM_THREADS``
    when that is set to a number (torch's own default for a process's threads, which a user sets to say how many)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # not on macOS
    share = max(1, usable // workers)
    cap = os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(share, int(cap)) if cap.isdigit() and int(cap) > 0 else share


def worker_commands(spec: StudySpec, n_trials: int | None, timeout: float | None, workers: int,
                    stored: bool = False, ray: RayCluster | None = None) -> list[tuple[list[str], dict[str, str]]]:
    """The command line and environment of each worker: its GPUs, or its share of the CPU threads. ``stored``:
    the workers read the study's stored spec instead of a study file (a validation study has none). With
    ``ray`` the workers run their trials on that cluster, which gives each its GPUs; the threads are a share of the
    cluster's CPUs."""
    threads: int | None
    if ray is None:
        groups = gpu_groups(visible_gpus(), workers, spec.processes_per_trial)
        threads = cpu_threads_per_worker(workers)
    else:
        ray_threads = ray.threads_per_process(workers, spec.processes_per_trial)
        groups = [[] for _ in range(workers)]
        threads = ray_threads * spec.processes_per_trial if ray_threads else None
    commands = []
    for index, gpus in enumerate(groups):
        command = [*WORKER_COMMAND, spec.name if stored else str(spec.path),
                   "--storage", spec.storage, "--worker-index", str(index), *(["--stored"] if stored else [])]
        if ray is not None:
            command += ["--ray-address", ray.address]
        if n_trials is not None:
            command += ["--n-trials", str(n_trials)]
        if timeout is not None:
            command += ["--timeout", str(timeout)]
        env = dict(os.environ)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        elif threads is not None:
            command += ["--threads", str(threads)]
        commands.append((command, env))
    return commands


def runs_here(commands: Sequence[tuple[list[str], dict[str, str]]], ray: RayCluster | None) -> bool:
    """Whether the workers' one command runs in this process: a single local worker whose environment is this
    process's (one given a subset of the GPUs, or a Ray driver, stays a process of its own)."""
    return ray is None and len(commands) == 1 and commands[0][1] == dict(os.environ)
