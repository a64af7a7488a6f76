"""Production: a study's winners re-validated on fresh seeds and carried to the production run.

``validation`` (``ppo-tune validate``: the K best configurations on new seeds) with ``local_validation`` and
``confidence``; ``carry`` (the winner's configuration at another length or on another policy), the length rules of
``horizon``, and ``pilot`` runs on another policy. The top wing below the CLI.
"""

__all__ = ["carry", "confidence", "horizon", "local_validation", "pilot", "validation"]
