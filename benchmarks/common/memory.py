"""Peak memory of one run: CPU resident set (from the kernel) or CUDA allocator peak."""

from __future__ import annotations

from pathlib import Path

import torch

from ppo_core.memory.peak import peak_memory_gib


def current_rss_mib() -> float:
    """Resident set size now, from /proc (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mib() -> float:
    """Highest resident set size of this process so far, in MiB: the reading a run reports as memory/peak_gib."""
    return peak_memory_gib(torch.device("cpu")) * 1024


class MemoryMeter:
    """Peak memory of what happens after ``start``: models, optimizer state, activations.

    On CPU the baseline is the RSS after imports, so the two sides' different import footprints
    (TRL also imports datasets and pandas) do not count; each run is its own process, so the
    kernel's peak belongs to one side only. On CUDA it is the allocator's peak.
    """

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.baseline_rss_mib = 0.0

    def start(self) -> None:
        self.baseline_rss_mib = current_rss_mib()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def report(self) -> dict[str, float]:
        peak = peak_rss_mib()
        result = {
            "baseline_rss_mib": self.baseline_rss_mib,
            "peak_rss_mib": peak,
            "peak_rss_delta_mib": peak - self.baseline_rss_mib,
        }
        if self.device.type == "cuda":
            result["cuda_peak_allocated_mib"] = torch.cuda.max_memory_allocated(self.device) / 2**20
            result["cuda_peak_reserved_mib"] = torch.cuda.max_memory_reserved(self.device) / 2**20
        return result
