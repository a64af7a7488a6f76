"""The store: what the tuner writes about studies and trials, and where.

The lowest wing of ``tuner``: it imports nothing of the other wings. ``attrs`` (the names of what is recorded on a
study and its trials), ``database`` (storage URLs and the Optuna RDB storage, opened for writers and read-only
readers), ``records`` (the project's own tables: per-update metrics and samples), ``default_storage`` (where studies
live by default), ``messages`` (one-line errors) and ``segments`` (a population's segments as its trials record
them).
"""

__all__ = ["attrs", "database", "default_storage", "messages", "records", "segments"]
