"""What the ``ppo-tune train`` tests share: a reward module written where the run looks for it, a run directory's
files as bytes, a one-line error, and a command run with a file system of its own mounted (a full or read-only one)."""

from __future__ import annotations

import importlib
import os
import subprocess
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write_module(directory: Path, source: str) -> str:
    """Write ``source`` as a module of a fresh name into ``directory`` (the run's working directory, where reward
    modules are looked for), so that no test reuses another's imported module or its call counter; its name."""
    name = f"rewards_{uuid.uuid4().hex[:12]}"
    (directory / f"{name}.py").write_text(source)
    importlib.invalidate_caches()
    return name


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` and its bytes: what "unchanged" means for a run directory."""
    return {str(file.relative_to(directory)): file.read_bytes() for file in sorted(directory.rglob("*"))
            if file.is_file()}


def one_line(text: str) -> str:
    line = text.strip()
    assert line and "\n" not in line and "Traceback" not in line, text
    return line


def private_mount(script: str, *arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the shell ``script`` in a mount namespace of its own, so that what it mounts (a tmpfs: a real full or
    read-only file system) is gone when it ends. Root may mount there; another user maps itself to root first."""
    unshare = ["unshare", "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
                   "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([*unshare, "sh", "-c", script, "sh", *arguments], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=300)
