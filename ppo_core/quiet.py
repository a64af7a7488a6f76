"""Quieting transformers: ppo-tune's own progress bars and one-line messages replace its per-load bars and reports."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def quiet_transformers() -> None:
    """Errors only, and no download or load progress bars, for every later transformers call in this process."""
    # The environment reaches worker processes and transformers imported after this call.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()


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
