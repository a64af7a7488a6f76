"""Imported last by each trial fork server (``tuner.trial.launch.PRELOAD``): freezes what the server imported
(:mod:`tuner.trial.frozen_heap`), so that the collector skips it in the server, at the server's exit, and in every trial
forked from it, whose copy-on-write pages holding those objects the collector then leaves shared, as
:func:`gc.freeze`'s documentation advises for a process that forks children."""

from tuner.trial.frozen_heap import freeze_now

freeze_now()
