"""``python -m ppo_tune`` is ``ppo-tune``, so ``accelerate launch -m ppo_tune train ...`` works too."""

import sys

from ppo_tune.cli import entry_point

sys.exit(entry_point())
