"""The study: a study file parsed into one :class:`~tuner.study.spec.StudySpec`, checked, stored with the study and
read back from it, and the tables read from its trials.

``config`` (``load_study_spec``, ``parse_study``: the entry point) composes ``sections``, ``space_section``,
``values`` (the value readers and ``StudyConfigError``), ``checks``, ``metric_check``, ``target`` and
``trainer_check``; ``definition`` stores and reads the definition; ``defaults``, ``seed_policy``, ``constraints`` and
``reduction`` are what the sections parse into; ``winner`` reads who won a study and why (its seed policy, its
constraints and its race); ``reports`` and ``edge_findings`` read its trials. Imports the store, the exports, the
search and the TRL trial's arguments.
"""

__all__ = [
    "checks", "config", "constraints", "defaults", "definition", "edge_findings", "metric_check", "reduction",
    "reports", "sections", "seed_policy", "space_section", "spec", "target", "trainer_check", "values", "winner",
]
