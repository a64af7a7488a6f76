"""The study: a study file parsed into one spec (:class:`~tuner.study.spec.StudySpec`), checked, recorded with the
study and read back from it, and who won it and the tables read from its trials.

``study_file`` (``load_study_spec``, ``parse_study``: the entry point) composes ``sections``, ``space_section``,
``values`` (the value readers and ``StudySpecError``), ``cross_checks``, ``metric_check``, ``target`` and
``trainer_check``; ``spec_record`` records the spec with its study and rebuilds it from there, and ``stored_spec``
reads the recorded spec leniently into typed parts; ``defaults``, ``seed_policy`` (with ``shrinkage``, how a race
weighs seeds), ``constraints`` and ``reduction`` are what the sections parse into; ``winner`` reads who won a study
and why (its seed policy, its constraints and its race); ``reports``, ``edge_findings`` and ``inert_knobs`` read its
trials, and ``judge_notice`` says what a study with no held-out judge tunes; ``population_section`` reads a population
study's settings; ``student_t`` is the t quantile the KL guard's forecast and the validated intervals share.
Imports the store, the exports, the
search and the TRL trial's arguments.
"""

__all__ = [
    "constraints", "cross_checks", "defaults", "edge_findings", "inert_knobs", "judge_notice", "metric_check",
    "population_section", "reduction", "reports", "sections", "seed_policy", "shrinkage", "space_section", "spec",
    "spec_record", "stored_spec", "student_t", "study_file", "target", "trainer_check", "values", "winner",
]
