"""Where studies live by default; light enough for the CLI and the dashboard to import at start-up."""

from __future__ import annotations

from pathlib import Path

DEFAULT_STUDIES_DIR = Path("studies")


def discover_storage_urls(studies_dir: Path = DEFAULT_STUDIES_DIR) -> list[str]:
    """A ``sqlite:///`` URL for every ``*.db`` file in ``studies_dir``, sorted by file name."""
    return [f"sqlite:///{path.resolve()}" for path in sorted(studies_dir.glob("*.db"))]
