"""The trial: one Optuna trial run as a process of its own, locally or as a Ray task.

``trial_function`` (the function ``study.optimize`` calls) starts the trial's process through ``launch`` (or
``ray_launch`` and ``ray_task``), speaking ``protocol``; ``process`` is that process's entry point, which trains and
reports every update through ``reporter`` to the store, the pruner and the ``kl_guard``; ``factory`` builds the
samplers and pruners; ``interrupts``, ``frozen_heap``, ``fork_server_freeze`` and ``lifetime`` keep the processes'
ends clean; ``checkpoints`` is where a trial's checkpoints live, so that its retry resumes from them;
``segment_run`` trains a population's segment from its parent's checkpoint. Imports the wings below it (store,
exports, search, TRL trial, study).
"""

__all__ = [
    "checkpoints", "factory", "fork_server_freeze", "frozen_heap", "interrupts", "kl_guard", "launch", "lifetime",
    "process", "protocol", "ray_launch", "ray_task", "reporter", "segment_run", "trial_function",
]
