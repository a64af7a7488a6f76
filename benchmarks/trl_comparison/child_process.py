"""One benchmark run in a fresh process: one side, one mode, results written as JSON.

    python -m benchmarks.trl_comparison.child_process --side trl --mode time --fixture DIR --workload '{...}' \
        --out run.json
    python -m benchmarks.trl_comparison.child_process --side ppo_core --mode profile --quick --out run.json
        # (its own 0.1M fixture)

The comparison (``python -m benchmarks.trl_comparison``) runs it with a fixture it built and its workload;
``--quick`` builds the 0.1M fixture in a temporary directory and takes the comparison's quick workload, to run one
side and mode alone.

A fresh process per run keeps each side's peak RSS its own and stops one side's warm caches
(allocator, kernels, imported modules) from helping the other.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

# Before torch and TRL are imported: a thread count fixed by the environment as well as by
# torch.set_num_threads, and no TRL experimental-API warning in the log.
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch

from benchmarks.common.memory import MemoryMeter
from benchmarks.trl_comparison.counters import WorkCounter
from benchmarks.trl_comparison.fixtures import Fixture, build_fixture
from benchmarks.trl_comparison.peer_trl import use_peer_trl
from benchmarks.trl_comparison.sizes import QUICK_CPU_SIZES, SIZES
from benchmarks.trl_comparison.timing import Side
from benchmarks.trl_comparison.workload import QUICK_WORKLOAD, Workload
from ppo_core.models.quiet import quiet_hugging_face
from tools.quick_mode import add_quick_argument, results_path

SIDES = ("ppo_core", "trl")
MODES = ("time", "count", "profile")


def side_class(name: str) -> Callable[[Fixture, Workload, str], Side]:
    # Imported here so a ppo_core run never imports TRL (and its datasets/pandas) and vice versa.
    if name == "ppo_core":
        from benchmarks.trl_comparison.core_side import CoreSide

        return CoreSide
    from benchmarks.trl_comparison.trl_side import TrlSide

    return TrlSide


def make_side(name: str, fixture: Fixture, workload: Workload, device: str) -> Side:
    return side_class(name)(fixture, workload, device)


def run_time(side_name: str, fixture: Fixture, workload: Workload, device: str) -> dict[str, Any]:
    build = side_class(side_name)  # imports first: the memory baseline excludes import footprints
    meter = MemoryMeter(device)
    meter.start()
    built = time.perf_counter()
    side = build(fixture, workload, device)
    setup_s = time.perf_counter() - built
    timings = side.train()
    return {
        "setup_s": setup_s,
        "updates": [timing.to_dict() for timing in timings],
        "memory": meter.report(),
    }


def run_count(side_name: str, fixture: Fixture, workload: Workload, device: str) -> dict[str, Any]:
    side = make_side(side_name, fixture, workload, device)
    counter = WorkCounter()
    for name, module in side.networks().items():
        counter.watch_module(name, module)
    if side_name == "ppo_core":  # on a CPU its rollout decodes with its own loop, not the policy's generate
        import ppo_core.rollout.collect

        counter.watch_sampling("policy", ppo_core.rollout.collect, "sample_chunk")
    else:
        counter.watch_generate("policy", side.generating_policy())
    for name, optimizer in side.optimizers().items():
        counter.watch_optimizer(name, optimizer)
    side.train()
    counter.remove()
    return {"counts": counter.snapshot(), "updates": workload.total_updates}


def run_profile(side_name: str, fixture: Fixture, workload: Workload, device: str) -> dict[str, Any]:
    from benchmarks.trl_comparison.core_side import CoreSide
    from benchmarks.trl_comparison.profile_core import profile_core

    if side_name != "ppo_core":
        raise SystemExit("profile mode profiles ppo_core only")
    side = make_side(side_name, fixture, workload, device)
    assert isinstance(side, CoreSide)  # side_class("ppo_core")
    return profile_core(side, workload)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trl_comparison.child_process", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", choices=SIDES, required=True)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--fixture", type=Path, help="a fixture the comparison built (needed without --quick)")
    parser.add_argument("--workload", help="Workload as JSON (required without --quick)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help="required without --quick")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if not args.quick and None in (args.fixture, args.workload, args.out):
        parser.error("--fixture, --workload and --out are required (or --quick)")
    if args.side == "trl":
        use_peer_trl()
    torch.set_num_threads(args.threads)
    quiet_hugging_face()
    warnings.filterwarnings("ignore")
    out = results_path(args.out, Path(f"worker-{args.side}-{args.mode}.json"), args.quick)
    with tempfile.TemporaryDirectory(prefix="ppo_bench_worker_") as scratch:
        if args.workload is not None:
            workload = Workload.from_dict(json.loads(args.workload))
        else:  # --quick: the comparison's quick workload, with the profile's extra updates as it adds them
            from benchmarks.trl_comparison.profile_core import PROFILED_UPDATES

            extra = PROFILED_UPDATES if args.mode == "profile" else 0
            workload = replace(QUICK_WORKLOAD, measured_updates=QUICK_WORKLOAD.measured_updates + extra)
        if args.fixture is not None:
            fixture = Fixture.at(args.fixture)
        else:
            fixture = build_fixture(Path(scratch) / "fixture", SIZES[QUICK_CPU_SIZES[0]], workload)
        runner = {"time": run_time, "count": run_count, "profile": run_profile}[args.mode]
        result = runner(args.side, fixture, workload, args.device)
    result.update(side=args.side, mode=args.mode, torch_threads=torch.get_num_threads(), device=args.device)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"worker {args.side} {args.mode}: done", file=sys.stderr)


if __name__ == "__main__":
    main()
