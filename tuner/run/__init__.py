"""The run: workers that each run trials of a shared study, and ``ppo-tune run`` following them.

``worker`` (one process that joins the study and runs trials until the target), ``runner`` (``run_study``: start the
workers, follow the study, summarise it, exit with its status), ``failure_streak`` (when to give up) and ``savings``
(what stopping trials early saved).
"""

__all__ = ["failure_streak", "runner", "savings", "worker"]
