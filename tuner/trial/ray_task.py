"""The Ray side of a trial: a task that runs ``python -m tuner.trial.process`` in a subprocess and returns how it
ended.

The task holds the trial's GPUs and CPUs in Ray's accounting for as long as the trial's process runs, so Ray packs
and queues trials over the cluster; the process itself is the same one the local launcher starts (as
``tuner.trial.launch`` builds its command) and writes its metrics, samples and outcome to the study's storage. The
worker that asked Optuna for the trial waits for the task (``tuner.trial.ray_launch``).

The trial's process watches this task's process instead of the local worker (which may be on another machine): if
Ray kills the task's worker (a cancelled task, a lost driver), the trial's processes end with it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from tuner.trial.launch import launch_trial_command, wait_or_kill
from tuner.trial.protocol import TrialJob

# What the trial's process takes from the worker's environment besides what the Ray node gives it: where the tests'
# and users' reward modules are (PYTHONPATH), ppo-tune's cache, Hugging Face's and the trackers' settings. Not
# CUDA_VISIBLE_DEVICES: Ray sets it to the GPUs it gave the task.
FORWARDED_ENV = ("PYTHONPATH",)
FORWARDED_PREFIXES = ("PPO_TUNE_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "WANDB_", "MLFLOW_")


def forwarded_environment(environment: dict[str, str]) -> dict[str, str]:
    """The variables of the worker's ``environment`` that its trials' processes get on whichever node runs them."""
    return {name: value for name, value in environment.items()
            if name in FORWARDED_ENV or name.startswith(FORWARDED_PREFIXES)}


def run_trial_task(arguments: list[str], processes: int, timeout: float | None, cwd: str,
                   environment: dict[str, str]) -> dict[str, Any]:
    """Run the trial that ``arguments`` (``TrialJob.arguments``) names, in ``cwd`` where this node has it (a shared
    file system; else the task's own directory), and return its exit status (None: killed at ``timeout``) with what
    Ray gave the task. A cancelled task (KeyboardInterrupt) kills the trial's processes first."""
    import ray  # on the Ray worker, where it is always installed

    job = dataclasses.replace(TrialJob.from_arguments(arguments), worker_pid=os.getpid())
    started = time.time()
    process = launch_trial_command(job, processes, cwd=cwd if os.path.isdir(cwd) else None,
                                   env={**os.environ, **environment})
    returncode = wait_or_kill(process, timeout)
    context = ray.get_runtime_context()
    return {"returncode": returncode, "node_id": context.get_node_id(), "resources": context.get_assigned_resources(),
            "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()], "started": started, "ended": time.time()}
