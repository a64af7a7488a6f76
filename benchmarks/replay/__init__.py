"""Tuning strategies replayed against a curve table of measured runs, without training
(benchmarks/replay/README.md): ``python -m benchmarks.replay``. The table is built by ``python -m
benchmarks.curve_table``.
"""
