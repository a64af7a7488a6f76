"""The ppo-tune dashboard: ``streamlit run dashboard/app.py [-- --storage URL]`` or ``ppo-tune dashboard``.

The storage comes from ``--storage`` (after ``--``), else ``$PPO_TUNE_STORAGE``, else every
``studies/*.db`` under the current directory, as the ``ppo-tune`` CLI finds them.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _main() -> None:
    # `streamlit run dashboard/app.py` puts dashboard/ on sys.path, not the repository root; an
    # installed package would not need this, a checkout does.
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from dashboard.navigation import main

    main(sys.argv[1:])


_main()
