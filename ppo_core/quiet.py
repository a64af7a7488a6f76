"""Quieting transformers and datasets: ppo-tune's own progress bars and one-line messages replace theirs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def quiet_hugging_face() -> None:
    """Errors only, and no download or load progress bars, for every later transformers and datasets call."""
    # The environment reaches worker processes and transformers imported after this call.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


@contextlib.contextmanager
def transformers_errors_only() -> Iterator[None]:
    """Errors only for the duration of the block, e.g. a load whose expected warnings would mislead a user."""
    from transformers.utils import logging as transformers_logging

    previous = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(previous)
