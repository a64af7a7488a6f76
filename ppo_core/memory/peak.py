"""Peak memory of one update: the CUDA allocator's peak on a GPU, the process's peak resident set on the CPU."""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path

import torch

GIB = 2**30
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak window. On Linux, writing 5 to clear_refs resets the kernel's peak RSS (VmHWM), so each
    update gets its own peak rather than the process's all-time high."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    # Not Linux, or a sandbox that forbids it: the reading below is then the all-time peak.
    with contextlib.suppress(OSError):
        _CLEAR_REFS.write_text("5")


def peak_memory_gib(device: torch.device) -> float:
    """GiB at the peak since the last reset: allocated tensors on CUDA, resident set (VmHWM) on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / GIB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # KiB on Linux
