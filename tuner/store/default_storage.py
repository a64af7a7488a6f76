"""Where studies live by default; light enough for the CLI and the dashboard to import at start-up."""

from __future__ import annotations

from pathlib import Path

DEFAULT_STUDIES_DIR = Path("studies")


def storage_urls(explicit: str | None = None, studies_dir: Path = DEFAULT_STUDIES_DIR) -> list[str]:
    """The storage given, else every ``studies/*.db``: what the CLI's commands and the dashboard read."""
    return [explicit] if explicit else discover_storage_urls(studies_dir)


def discover_storage_urls(studies_dir: Path = DEFAULT_STUDIES_DIR) -> list[str]:
    """A ``sqlite:///`` URL for every ``*.db`` file in ``studies_dir``, sorted by file name."""
    return [f"sqlite:///{path.resolve()}" for path in sorted(studies_dir.glob("*.db"))]
