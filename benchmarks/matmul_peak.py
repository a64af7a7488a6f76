"""The machine's measured matrix-multiply peak, to read the update phase's GFLOP/s against.

    python -m benchmarks.matmul_peak --threads 1             # CPU: fp32 torch.mm, n = 512, 1024, 2048
    python -m benchmarks.matmul_peak --device cuda           # GPU: fp32 (TF32 when allowed) and bf16, n = 2048..8192
    python -m benchmarks.matmul_peak --quick --out peak.json

The best GFLOP/s of ``torch.mm`` on square matrices over a few sizes and repeats, at the thread count the
benchmark's workers use: the TRL comparison runs this module in a fresh process with the workers' environment
(``OMP_NUM_THREADS=N``, ``torch.set_num_threads(N)``), so the peak is what one of its timed runs could reach on this
machine under this load, not a datasheet's number. A PPO update is mostly such matmuls (70% of operator time at 5M),
at smaller and thinner shapes, so its share of this peak says how much room the update phase leaves.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from tools.quick_mode import add_quick_argument, results_path

CPU_SIZES = (512, 1024, 2048)
CUDA_SIZES = (2048, 4096, 8192)
QUICK_SIZES = (128, 256)
REPEATS = 5
QUICK_REPEATS = 2
MIN_TIMING_S = 0.05
"""Each timing spans at least this long (several calls when one is shorter), so timer resolution and kernel-launch
overhead stay small beside it."""


def matmul_flops(n: int) -> int:
    """2 n^3: n^2 outputs, each n multiplies and n adds."""
    return 2 * n**3


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_flops_per_s(n: int, dtype: torch.dtype, device: torch.device, repeats: int,
                     min_seconds: float = MIN_TIMING_S) -> float:
    """The best FLOP/s of ``torch.mm`` on two n x n matrices of ``dtype`` over ``repeats`` timings."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    out = torch.empty(n, n, dtype=dtype, device=device)
    torch.mm(a, b, out=out)  # the first call pays for allocations, kernel selection and page faults
    _sync(device)
    started = time.perf_counter()
    torch.mm(a, b, out=out)
    _sync(device)
    calls = max(1, math.ceil(min_seconds / max(time.perf_counter() - started, 1e-9)))
    best = 0.0
    for _ in range(repeats):
        _sync(device)
        started = time.perf_counter()
        for _ in range(calls):
            torch.mm(a, b, out=out)
        _sync(device)
        best = max(best, calls * matmul_flops(n) / (time.perf_counter() - started))
    return best


def measure(device: str, threads: int, quick: bool = False) -> dict[str, Any]:
    """Best GFLOP/s per dtype and size, and each dtype's peak (its best size) in FLOP/s.

    On CPU fp32 only (both trainers run fp32 there); on CUDA fp32, which uses TF32 tensor cores when
    ``torch.backends.cuda.matmul.allow_tf32`` is on (recorded), and bf16.
    """
    torch.set_num_threads(threads)
    target = torch.device(device)
    cuda = target.type == "cuda"
    sizes = QUICK_SIZES if quick else CUDA_SIZES if cuda else CPU_SIZES
    repeats = QUICK_REPEATS if quick else REPEATS
    dtypes = {"fp32": torch.float32, **({"bf16": torch.bfloat16} if cuda else {})}
    gflops = {
        name: {str(n): best_flops_per_s(n, dtype, target, repeats) / 1e9 for n in sizes}
        for name, dtype in dtypes.items()
    }
    result: dict[str, Any] = {
        "operation": "torch.mm, square n x n",
        "device": device,
        "threads": torch.get_num_threads(),
        "sizes": list(sizes),
        "repeats": repeats,
        "gflops": gflops,
        "peak_flops": {name: max(by_size.values()) * 1e9 for name, by_size in gflops.items()},
    }
    if cuda:
        result["gpu"] = torch.cuda.get_device_name(target)
        result["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.matmul_peak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads (default 1, as in the TRL comparison)")
    add_quick_argument(parser)
    parser.add_argument("--out", type=Path, help="write the JSON here too (it always goes to stdout)")
    args = parser.parse_args(argv)
    out = results_path(args.out, args.out, args.quick) if args.out is not None else None
    result = measure(args.device, args.threads, args.quick)
    text = json.dumps(result, indent=1)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
