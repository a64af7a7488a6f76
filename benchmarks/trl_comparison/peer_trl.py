"""TRL 1.12, the last release with a PPOTrainer, kept beside the environment as a peer: the environment's own TRL is
the current one that ``trainer: trl-grpo`` trials run (the ``trl`` extra), so the comparison imports 1.12 from
``.cache/trl-1.12.0`` (``scripts/setup.sh --test`` installs it there, without dependencies: the environment's serve).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TRL_PPO_VERSION = "1.12.0"
REPO_ROOT = Path(__file__).resolve().parents[2]
DIRECTORY_ENV = "PPO_TUNE_TRL_PPO_DIR"


def peer_directory() -> Path:
    """Where TRL 1.12 is installed: ``$PPO_TUNE_TRL_PPO_DIR``, else the repository's ``.cache/trl-1.12.0``."""
    return Path(os.environ.get(DIRECTORY_ENV, REPO_ROOT / ".cache" / f"trl-{TRL_PPO_VERSION}"))


def install_command() -> str:
    return f"python -m pip install --no-deps --target {peer_directory()} trl=={TRL_PPO_VERSION}"


def use_peer_trl() -> Path:
    """Put TRL 1.12 first on this process's path and on its children's, before anything imports trl; SystemExit
    (status 2, one line with the install command) when it is not installed."""
    directory = peer_directory()
    if not (directory / "trl" / "__init__.py").is_file():
        print(f"benchmarks.trl_comparison: TRL {TRL_PPO_VERSION} (the last PPOTrainer) is not in {directory}: "
              f"{install_command()}", file=sys.stderr)
        raise SystemExit(2)
    if "trl" in sys.modules and not sys.modules["trl"].__file__.startswith(str(directory)):  # type: ignore[union-attr]
        raise RuntimeError(f"trl was imported from {sys.modules['trl'].__file__} before TRL {TRL_PPO_VERSION} "
                           "could be put first on the path")
    sys.path.insert(0, str(directory))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    return directory
