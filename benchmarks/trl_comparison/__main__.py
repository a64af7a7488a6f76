"""ppo_core against TRL 1.12's PPOTrainer on identical work: one command runs everything.

    python -m benchmarks.trl_comparison                 # CPU: 0.1M and 5M models (about 7 minutes on 2 cores)
    python -m benchmarks.trl_comparison --device cuda   # GPU: a Pythia-160M-shaped model (untested here)
    python -m benchmarks.trl_comparison --quick --out /tmp/bench.json   # a smoke run of every step, in one process

First the machine's matmul peak, measured in a fresh process with the workers' threads (matmul_peak.py).
Then per model size: build the fixture (tokenizer, models, prompts); count each side's work in an
untimed run and check it is equal; time both sides in fresh processes, alternating; profile
ppo_core. Writes benchmarks/results/trl_comparison/<device>.json and the tables into benchmarks/trl_comparison/README.md
(a --quick run writes only to --out or a temporary directory).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.common.json_safe import json_safe
from benchmarks.common.machine import machine_facts
from benchmarks.trl_comparison.aggregate import ratios, side_summary
from benchmarks.trl_comparison.equal_work import compare
from benchmarks.trl_comparison.fixtures import build_fixture, count_parameters
from benchmarks.trl_comparison.flops import peak_flops, update_work
from benchmarks.trl_comparison.peer_trl import TRL_PPO_VERSION, use_peer_trl
from benchmarks.trl_comparison.profile_core import PROFILED_UPDATES
from benchmarks.trl_comparison.report import markdown, write_into_readme
from benchmarks.trl_comparison.sizes import CPU_SIZES, CUDA_SIZES, QUICK_CPU_SIZES, QUICK_CUDA_SIZES, SIZES
from benchmarks.trl_comparison.workload import CPU_WORKLOAD, CUDA_WORKLOAD, QUICK_WORKLOAD, Workload
from ppo_core.models.quiet import quiet_hugging_face
from tools.quick_mode import add_quick_argument, results_path

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO_ROOT / "benchmarks"
README = Path(__file__).resolve().parent / "README.md"
# What a worker run in this process (--quick) takes from the workers' environment: the rest (threads, PYTHONPATH)
# only matters to a process at its start.
IN_PROCESS_ENV = ("TRL_EXPERIMENTAL_SILENCE", "TOKENIZERS_PARALLELISM")
PROFILE_BREAKDOWN_UPDATES = 2
"""Updates the profile times with its wrappers only, before its PROFILED_UPDATES under torch.profiler (fewer when a
run measures fewer updates)."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Workers:
    """Runs ``benchmarks.trl_comparison.child_process`` in fresh processes with a fixed thread count; logs go to files.

    ``in_process`` (``--quick``) runs each in this process instead: a quick run's figures mean nothing, and six
    fresh processes importing torch, transformers and TRL were most of its time; every step still runs, from the
    same command line to the same JSON."""

    def __init__(self, scratch: Path, device: str, threads: int, in_process: bool = False) -> None:
        self.scratch, self.device, self.threads, self.in_process = scratch, device, threads, in_process
        self.runs = 0
        self.env = {
            **os.environ,
            # The environment and torch.set_num_threads agree, so no library spawns extra threads.
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "TRL_EXPERIMENTAL_SILENCE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }

    def run(self, side: str, mode: str, fixture: Path, workload: Workload) -> dict[str, Any]:
        return self._module("benchmarks.trl_comparison.child_process", f"{side}-{mode}", [
            "--side", side, "--mode", mode, "--fixture", str(fixture), "--workload", json.dumps(workload.to_dict()),
        ])

    def matmul_peak(self, quick: bool) -> dict[str, Any]:
        """The machine's matmul peak, measured as a worker runs: a fresh process, the same threads and environment."""
        return self._module("benchmarks.matmul_peak", "matmul-peak", ["--quick"] if quick else [])

    def _module(self, module: str, label: str, arguments: list[str]) -> dict[str, Any]:
        """Run ``python -m module ... --device D --threads N --out FILE``; its JSON, or its log's tail on failure."""
        self.runs += 1
        out = self.scratch / f"run{self.runs:03d}-{label}.json"
        log_path = out.with_suffix(".log")
        argv = [*arguments, "--device", self.device, "--threads", str(self.threads), "--out", str(out)]
        if self.in_process:
            os.environ.update({key: self.env[key] for key in IN_PROCESS_ENV})
            importlib.import_module(module).main(argv)
            return json.loads(out.read_text())
        command = [sys.executable, "-m", module, *argv]
        with log_path.open("w") as log_file:
            completed = subprocess.run(command, cwd=REPO_ROOT, env=self.env, stdout=log_file, stderr=subprocess.STDOUT)
        if completed.returncode != 0:
            tail = "\n".join(log_path.read_text().splitlines()[-30:])
            raise RuntimeError(f"{module} {label} failed (exit {completed.returncode}):\n{tail}")
        return json.loads(out.read_text())


def measure_size(
    name: str, root: Path, workload: Workload, workers: Workers, repeats: int, peak: float | None,
    matmul_peak: float, profile: bool,
) -> dict[str, Any]:
    size = SIZES[name]
    fixture = build_fixture(root / name, size, workload)
    parameters = count_parameters(fixture)
    work = update_work(workload, parameters)
    log(f"[{name}] parameters: policy {parameters['policy']:,}, value {parameters['value']:,}, "
        f"reward {parameters['reward']:,} (reference = policy)")

    # Counting runs also warm the page cache and the Python bytecode cache for the timed runs.
    count_workload = replace(workload, warmup_updates=0, measured_updates=1)
    counted = {side: workers.run(side, "count", fixture.root, count_workload) for side in ("ppo_core", "trl")}
    check = {**compare(counted["ppo_core"], counted["trl"]), "raw_counts": counted}
    log(f"[{name}] equal-work check: {'equal' if check['all_equal'] else 'NOT EQUAL'}")
    for row in check["rows"]:
        mark = "==" if row["equal"] else "!="
        log(f"    {row['quantity']:45s} {row['ppo_core']:>14,.0f} {mark} {row['trl']:>14,.0f}")

    runs: dict[str, list[dict[str, Any]]] = {"ppo_core": [], "trl": []}
    for repeat in range(repeats):
        # ABAB... with the order flipped every repeat, so drift in machine load hits both sides alike.
        order = ("ppo_core", "trl") if repeat % 2 == 0 else ("trl", "ppo_core")
        for side in order:
            started = time.perf_counter()
            run = workers.run(side, "time", fixture.root, workload)
            runs[side].append(run)
            walls = [u["wall_s"] for u in run["updates"][workload.warmup_updates:]]
            log(f"[{name}] repeat {repeat + 1}/{repeats} {side:8s}: wall/update "
                f"{', '.join(f'{w:.3f}' for w in walls)} s (process {time.perf_counter() - started:.0f} s)")

    summary = {side: side_summary(side_runs, workload, work, peak, matmul_peak) for side, side_runs in runs.items()}
    summary["ratio"] = ratios(summary["ppo_core"], summary["trl"])
    result: dict[str, Any] = {
        "note": size.note,
        "parameters": parameters,
        "work": work,
        "equal_work": check,
        "summary": summary,
        "runs": runs,
    }
    if profile:
        breakdown = min(PROFILE_BREAKDOWN_UPDATES, workload.measured_updates)
        profile_workload = replace(workload, measured_updates=breakdown + PROFILED_UPDATES)
        result["profile"] = workers.run("ppo_core", "profile", fixture.root, profile_workload)
        log(f"[{name}] profiled ppo_core")
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trl_comparison", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES),
                        help="default: 0.1M 5M on CPU, pythia-160m on CUDA (--quick: 0.1M on CPU, neox-tiny on CUDA)")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per side (default 4; --quick 1)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for both sides (default 1 on CPU: see README; 4 on CUDA)")
    parser.add_argument("--warmup-updates", type=int, help="updates dropped from each run's timings")
    parser.add_argument("--measured-updates", type=int, help="timed updates per run")
    parser.add_argument("--peak-tflops", type=float, help="accelerator peak for MFU (default: fp32 table in flops.py)")
    parser.add_argument("--no-profile", action="store_true", help="skip the ppo_core profile")
    parser.add_argument("--out", type=Path, help="results JSON (default "
                                                           "benchmarks/results/trl_comparison/<device>.json)")
    parser.add_argument("--no-readme", action="store_true", help="do not rewrite benchmarks/trl_comparison/README.md")
    add_quick_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    use_peer_trl()
    quiet_hugging_face()
    cuda = args.device == "cuda"
    default_sizes = (QUICK_CUDA_SIZES if cuda else QUICK_CPU_SIZES) if args.quick else CUDA_SIZES if cuda else CPU_SIZES
    sizes = args.sizes or list(default_sizes)
    threads = args.threads or (4 if cuda else 1)
    repeats = args.repeats or (1 if args.quick else 4)
    workload = QUICK_WORKLOAD if args.quick else CUDA_WORKLOAD if cuda else CPU_WORKLOAD
    out = results_path(args.out, BENCH_DIR / "results" / "trl_comparison" / f"{args.device}.json", args.quick)
    write_readme = not (args.no_readme or args.quick)
    overrides = {"warmup_updates": args.warmup_updates, "measured_updates": args.measured_updates}
    workload = replace(workload, **{key: value for key, value in overrides.items() if value is not None})

    machine = machine_facts(args.device)
    machine["trl"] = TRL_PPO_VERSION  # the peer this process imports, not the environment's own TRL
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    if cuda and peak is None:
        import torch

        precision = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"
        peak = peak_flops(machine.get("gpu", ""), precision)
        machine["mfu_peak_precision"] = precision
    machine["mfu_peak_flops"] = peak

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ppo_bench_") as scratch:
        workers = Workers(Path(scratch), args.device, threads, in_process=args.quick)
        machine["matmul_peak"] = workers.matmul_peak(args.quick)
        # Both trainers run fp32 (TF32 matmuls on a GPU that allows them): the update is read against that peak.
        matmul_peak = machine["matmul_peak"]["peak_flops"]["fp32"]
        log(f"measured fp32 matmul peak: {matmul_peak / 1e9:,.1f} GFLOP/s with {threads} thread(s)")
        results = {
            name: measure_size(name, Path(scratch) / "fixtures", workload, workers, repeats, peak, matmul_peak,
                               not args.no_profile)
            for name in sizes
        }
    machine["load_average_at_end"] = os.getloadavg()
    result = {
        "settings": {"device": args.device, "threads": threads, "repeats": repeats, "quick": args.quick,
                     "total_seconds": time.perf_counter() - started},
        "machine": machine,
        "workload": workload.to_dict(),
        "sizes": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(result), indent=1) + "\n")
    text = markdown(result)
    print(text)
    if write_readme:
        write_into_readme(README, args.device, text)
    readme = f" and {README.relative_to(REPO_ROOT)}" if write_readme else ""
    log(f"wrote {out}{readme} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
