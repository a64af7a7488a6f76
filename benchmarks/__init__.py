"""Benchmarks: every measured figure the project publishes, each from one command (benchmarks/README.md).

Every module at this level is an entry point, ``python -m benchmarks.<name>``; so is each subpackage, through its
``__main__``: ``python -m benchmarks.trl_comparison`` and ``python -m benchmarks.replay``. The subpackages' other
modules, and ``benchmarks.common``, are helpers, which never import an entry point.
"""
