"""A Python that lacks a package, for real: a ``sitecustomize`` puts ``None`` in ``sys.modules`` under its name, which
is how Python itself marks an import as refused (``import`` raises ImportError, ``find_spec`` ValueError)."""

from __future__ import annotations

import os
from pathlib import Path


def blocking(directory: Path, module: str) -> dict[str, str]:
    """An environment whose Python refuses to import ``module``, as if it were not installed."""
    directory.mkdir()
    (directory / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))}
