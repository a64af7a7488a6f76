"""The run: workers that each run trials of a shared study, and ``ppo-tune run`` following them.

``worker`` (one process that joins the study and runs trials until the target), ``runner`` (``run_study``: the spine
of ``ppo-tune run``, each step in a module of its own), ``commands`` (the workers' command lines: their GPUs or CPU
threads), ``follow`` (dead workers' trials retried, then the progress display until the workers end), ``conclusion``
(what the finished run says, and its exit status), ``failure_streak`` (when to give up), ``savings`` (what stopping
trials early saved) and ``task_build`` (the built-in task, built before the first trial).
"""

__all__ = ["commands", "conclusion", "failure_streak", "follow", "runner", "savings", "task_build", "worker"]
