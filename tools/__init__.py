"""Developer tools kept out of the installed packages, because they write files or drive a browser.

- ``tools.tiny_models`` and ``tools.tiny_data``: tiny random Hugging Face models of four architectures, with
  tokenizers built offline, and prompt datasets in TRL's formats, for tests and ``examples/bring_your_own``.
- ``tools.demo_study``: the synthetic study that the dashboard tests and ``benchmarks.dashboard_read`` use.
- ``python -m tools.screenshots``: regenerates docs/screenshots/.
"""
