"""ppo-tune's command line: ``ppo-tune`` and ``python -m ppo_tune``.

The package sits above the three parts and only assembles them. Imports go one way::

    ppo_tune  ->  dashboard  ->  tuner  ->  ppo_core

Each part contributes its own subcommands (``ppo_core.cli``, ``tuner.cli``, ``dashboard.serve``);
this package builds the parser from them, quiets transformers, and turns bad input into one line and
exit status 2.
"""
