"""The tool's surface holds still through changes that mean to leave it alone: every command's ``--help`` and the
exports of the shipped studies, against the snapshot in tests/golden/cli_surface (``tools.cli_surface``).

A change that alters the surface on purpose rewrites the snapshot with
``python -m tools.cli_surface --write tests/golden/cli_surface`` and says why in its commit.
"""

from __future__ import annotations

from pathlib import Path

from tools.cli_surface import surface

GOLDEN = Path(__file__).parent / "golden" / "cli_surface"


def test_help_and_shipped_exports_match_the_snapshot() -> None:
    now = surface()
    kept = {path.name: path.read_text() for path in GOLDEN.iterdir()}
    assert sorted(now) == sorted(kept), "files added or gone: rewrite the snapshot if on purpose"
    changed = [name for name in sorted(now) if now[name] != kept[name]]
    assert not changed, f"changed: {', '.join(changed)}; rewrite the snapshot if on purpose"
