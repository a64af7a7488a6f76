"""Quieting transformers and datasets: ppo-tune's own progress bars and one-line messages replace theirs."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

# What transformers, huggingface_hub and datasets read from the environment when they are imported.
QUIET_ENVIRONMENT = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "DATASETS_VERBOSITY": "error",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}


def quiet_hugging_face() -> None:
    """Errors only, and no download or load progress bars, from transformers and datasets in this process and its
    workers. A user's own settings of these variables win.

    The environment does it without importing either library, so a command that never loads a model (``list``,
    ``dashboard``) does not pay their start-up; only a library already imported is told directly.
    """
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    if "transformers" in sys.modules and os.environ["TRANSFORMERS_VERBOSITY"] == "error":
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()
    if "datasets" in sys.modules and os.environ["DATASETS_VERBOSITY"] == "error":
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
