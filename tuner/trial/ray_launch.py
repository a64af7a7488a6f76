"""``--launcher ray``: trials run as Ray tasks on a cluster, while the local workers go on asking Optuna for them.

Each worker of ``ppo-tune run`` connects to the cluster as a Ray driver and, for each trial Optuna gives it, submits
one task (``tuner.trial.ray_task``) that asks for ``processes_per_trial`` GPUs (none on a CPU-only cluster) and the
trial's CPU threads; Ray packs the tasks onto nodes with room and queues the rest. The task runs the trial's process
as the local launcher would, and that process writes its metrics, samples and outcome to the study's storage, so the
storage stays the one record and the dashboard sees no difference. The worker keeps the trial's heartbeat and reads
the outcome, as it does for a local trial.

Ray is an optional extra (``pip install -e '.[ray]'``): nothing here imports it until a Ray launch is asked for.

Example::

    with ray_cluster(address=None, storage=spec.storage, processes_per_trial=1) as cluster:
        run_study(spec, n_trials=12, timeout=None, workers=cluster.default_workers(1), ray=cluster)
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from optuna.storages import BaseStorage

from ppo_core.errors import InputError, first_line, sigterm_as_interrupt
from tuner.store.database import sqlite_path
from tuner.store.messages import one_line
from tuner.trial.launch import ended_outcome
from tuner.trial.protocol import Outcome, TrialJob, read_outcome
from tuner.trial.ray_task import forwarded_environment, run_trial_task

RAY_TASK_ATTR = "ppo_tune:ray_task"
"""Trial system attribute: what Ray gave the trial's task (node, resources, GPU ids) and when it ran."""
INSTALL_HINT = "pip install -e '.[ray]'"
POLL_SECONDS = 0.5  # ray.wait in slices, so that Ctrl-C and SIGTERM reach the waiting worker between them
PROBE_TIMEOUT_S = 2.0
CANCEL_WAIT_S = 10.0  # for a cancelled task to kill its trial, before its Ray worker is killed instead


class RayLaunchError(InputError):
    """``--launcher ray`` cannot run as asked (no Ray, a cluster that cannot hold a trial, SQLite across nodes)."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def import_ray() -> ModuleType:
    """The ``ray`` module, or one line saying what to install."""
    try:
        import ray
    except ImportError:
        raise RayLaunchError(f"--launcher ray: Ray is not installed in this environment; {INSTALL_HINT}") from None
    return ray


@dataclass(frozen=True)
class RayCluster:
    """The cluster a study's trials run on, as Ray saw it when ``ppo-tune run`` connected."""

    address: str
    """The GCS address the workers connect to (the one ``ppo-tune run`` found or started)."""
    nodes: int
    cpus: float
    gpus: float
    node_cpus: float
    """CPUs of the largest node: a trial's task cannot ask for more."""
    node_gpus: float

    def default_workers(self, processes_per_trial: int) -> int:
        """Concurrent trials: the cluster's GPUs over each trial's, or on a CPU-only cluster its CPUs over them."""
        return max(1, int((self.gpus or self.cpus) // processes_per_trial))

    def threads_per_process(self, workers: int, processes_per_trial: int) -> int | None:
        """CPU threads for each process of a trial on a CPU-only cluster (its CPUs shared between the workers' trials,
        at most a node's); None with GPUs, where torch's default stands, as with the local launcher."""
        if self.gpus:
            return None
        share = self.cpus // (workers * processes_per_trial)
        return max(1, int(min(share, self.node_cpus // processes_per_trial)))


def connect(address: str | None) -> RayCluster:
    """Connect this process to the Ray cluster at ``address``; without one, to ``RAY_ADDRESS``'s or the cluster
    ``ray start`` started on this machine, else a new local one that ends with this process."""
    ray = import_ray()
    if address is None and not os.environ.get("RAY_ADDRESS"):
        # Ray's own lookup (address None or "auto") trusts the address file a stopped cluster leaves behind, and
        # then retries its GCS for minutes: look first, and start a cluster ("local") when nothing answers there.
        address = "auto" if _recorded_cluster_answers() else "local"
    ray.init(address=address, logging_level=logging.WARNING)
    if threading.current_thread() is threading.main_thread():
        sigterm_as_interrupt()  # ray.init put its own SIGTERM handler in place of ours: ours re-queues the trial
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    resources = ray.cluster_resources()
    return RayCluster(
        address=ray.get_runtime_context().gcs_address, nodes=len(nodes),
        cpus=float(resources.get("CPU", 0)), gpus=float(resources.get("GPU", 0)),
        node_cpus=max((float(node["Resources"].get("CPU", 0)) for node in nodes), default=0.0),
        node_gpus=max((float(node["Resources"].get("GPU", 0)) for node in nodes), default=0.0))


def recorded_address_file() -> Path:
    """Where ``ray start`` records the address of the cluster it started on this machine."""
    try:
        from ray._common.utils import get_ray_address_file  # private; its place has moved between releases
    except ImportError:
        return Path("/tmp/ray/ray_current_cluster")
    return Path(get_ray_address_file(None))


def _recorded_cluster_answers() -> bool:
    """Whether the cluster ``ray start`` last recorded on this machine answers at its address."""
    try:
        host, _, port = recorded_address_file().read_text().strip().rpartition(":")
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


def check_cluster(cluster: RayCluster, storage: str, processes_per_trial: int) -> None:
    """Refuse, in one line, a study this cluster cannot run: SQLite storage across several nodes (each node would
    write a file of its own, or one file over a network file system, which SQLite's locking does not survive), or a
    trial bigger than any node."""
    if cluster.nodes > 1 and sqlite_path(storage) is not None:
        raise RayLaunchError(f"storage: SQLite cannot be shared by the {cluster.nodes} nodes of the Ray cluster at "
                             f"{cluster.address}; give a PostgreSQL --storage (a single-node cluster may use SQLite)")
    if cluster.gpus and processes_per_trial > cluster.node_gpus:
        raise RayLaunchError(f"processes_per_trial: {processes_per_trial} GPUs per trial, the largest node of the Ray "
                             f"cluster at {cluster.address} has {cluster.node_gpus:g}")
    if not cluster.gpus and processes_per_trial > cluster.node_cpus:
        raise RayLaunchError(f"processes_per_trial: {processes_per_trial} processes per trial, the largest node of "
                             f"the CPU-only Ray cluster at {cluster.address} has {cluster.node_cpus:g} CPUs")


@contextlib.contextmanager
def ray_cluster(address: str | None, storage: str, processes_per_trial: int) -> Iterator[RayCluster]:
    """Connected to the cluster (started, without one running) and checked for the study, for as long as the study
    runs; disconnected after, which stops a cluster started here."""
    cluster = connect(address)
    try:
        check_cluster(cluster, storage, processes_per_trial)
        yield cluster
    finally:
        import_ray().shutdown()


def trial_resources(with_gpus: bool, processes: int, threads: int | None) -> dict[str, float]:
    """What a trial's task asks Ray for: a GPU per process (none on a CPU-only cluster), and a CPU per thread."""
    return {"num_gpus": float(processes) if with_gpus else 0.0, "num_cpus": float(processes * (threads or 1))}


@functools.cache
def _remote_trial_task() -> Any:
    # max_retries=0: a trial whose task died is retried by Optuna (a new trial, on the record), never silently by Ray.
    return import_ray().remote(max_retries=0)(run_trial_task)


def ray_launcher(with_gpus: bool) -> Callable[[TrialJob, int, float | None, BaseStorage], tuple[Outcome, bool]]:
    """The objective's way to run a trial on the cluster this process is connected to (:func:`connect`): returns
    the outcome and whether the trial was lost to something outside it (its process killed, its node or Ray worker
    gone), which is worth running again."""

    def launch(job: TrialJob, processes: int, timeout: float | None, storage: BaseStorage) -> tuple[Outcome, bool]:
        ray = import_ray()
        ref = _remote_trial_task().options(**trial_resources(with_gpus, processes, job.threads)).remote(
            job.arguments(), processes, timeout, os.getcwd(), forwarded_environment(dict(os.environ)))
        try:
            result = _wait(ray, ref)
        except KeyboardInterrupt:
            _cancel(ray, ref)
            raise
        except ray.exceptions.RayTaskError as error:  # the task's own code raised: a fault here, not a lost trial
            return read_outcome(storage, job.trial_id) or Outcome("fail", reason=f"Ray task: {first_line(error)}"), \
                False
        except ray.exceptions.RayError as error:  # its Ray worker or node died
            recorded = read_outcome(storage, job.trial_id)
            return recorded or Outcome("fail", reason=lost_reason(error)), recorded is None
        returncode = result.pop("returncode")
        storage.set_trial_system_attr(job.trial_id, RAY_TASK_ATTR, result)
        recorded = read_outcome(storage, job.trial_id)
        lost = recorded is None and returncode is not None and returncode < 0  # a signal from outside the trial
        return ended_outcome(storage, job.trial_id, returncode, timeout), lost

    return launch


LOST_BECAUSE = {
    "NodeDiedError": "the node running it died",
    "LocalRayletDiedError": "this machine's Ray node died",
    "WorkerCrashedError": "the Ray worker running it died",
    "OutOfMemoryError": "Ray killed its worker, its node being short of memory",
    "ObjectLostError": "Ray lost its result",
    "TaskCancelledError": "it was cancelled outside ppo-tune",
}
"""What happened to a trial's task, by the Ray exception that said so (or the nearest class it derives from)."""


def lost_reason(error: BaseException) -> str:
    """The trial's fail reason when Ray lost its task: what happened, the exception's name, and the node Ray named
    (``Ray task lost: the node running it died (NodeDiedError, node 2ff8511a1a79 at 10.0.0.7)``)."""
    because = next((LOST_BECAUSE[cls.__name__] for cls in type(error).__mro__ if cls.__name__ in LOST_BECAUSE),
                   first_line(error))
    details = [type(error).__name__]
    node = re.search(r"node ID: ([0-9a-f]{12})", str(error), re.IGNORECASE)
    address = re.search(r"Node IP: ([0-9A-Fa-f.:]+[0-9A-Fa-f])", str(error))
    if node:
        details.append(f"node {node.group(1)}" + (f" at {address.group(1)}" if address else ""))
    return f"Ray task lost: {because} ({', '.join(details)})"


def _wait(ray: ModuleType, ref: Any) -> dict[str, Any]:
    while not ray.wait([ref], timeout=POLL_SECONDS)[0]:
        pass
    result: dict[str, Any] = ray.get(ref)
    return result


def _cancel(ray: ModuleType, ref: Any) -> None:
    """Cancel the task: Ray raises KeyboardInterrupt in it, and it kills the trial's processes; a task still
    running after ``CANCEL_WAIT_S`` has its Ray worker killed, and the trial's processes end with it. A second
    Ctrl-C (the terminal's, after ppo-tune's) must not cut this short."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread else None
    try:
        with contextlib.suppress(Exception):  # a cluster already gone has nothing left to cancel
            ray.cancel(ref)
            if not ray.wait([ref], timeout=CANCEL_WAIT_S)[0]:
                ray.cancel(ref, force=True)
                ray.wait([ref], timeout=CANCEL_WAIT_S)
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
