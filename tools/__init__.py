"""Developer tools kept out of the installed packages, because they write files or drive a browser.

- ``tools.tiny_models`` and ``tools.tiny_data``: tiny random Hugging Face models of four architectures, with
  tokenizers built offline, and prompt datasets in TRL's formats, for tests and ``examples/bring_your_own``.
- ``tools.demo_study``: the synthetic study that the dashboard tests needing exact shapes and
  ``benchmarks.dashboard_read`` use.
- ``python -m tools.real_studies``: small real studies on the built-in task (validated, several estimators, no gold
  score), cached under ``$PPO_TUNE_CACHE``, for the dashboard's browser tests.
- ``python -m tools.screenshots``: regenerates docs/screenshots/ (every dashboard page, on a real study).
"""
