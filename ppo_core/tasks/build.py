"""What every built-in task's build shares: the layout of a built task's directory, the temperatures its SFT policy
is evaluated at, and the seeded, single-threaded torch state a build runs in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

POLICY_DIR = "policy"
REWARD_MODEL_DIR = "reward_model"
EVAL_TEMPERATURES = (1.0, 0.7)


@contextmanager
def torch_build_state(seed: int) -> Iterator[None]:
    """Seed torch and run single-threaded for the build, restoring both afterwards.

    One thread: these models are so small that a second thread gains ~20%, while two
    processes each spinning two threads on a 2-core machine run ~30x slower. It also makes
    the float results independent of the machine's core count.
    """
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
