"""The run's settings: PPOConfig (TRL's names, each field with its help), the rules a config must satisfy, the files
it reads from and writes to, and the reference table docs/reference.md shows. Torch-free: the tuner and the dashboard
read configs without loading torch.

- ``ppo_config``: PPOConfig itself, its fields and derived values
- ``checks``, ``value_types``: a field's type and choices, checked; ConfigError
- ``rules``: the rules across fields; ``readings``: what the fields mean together
- ``estimator_traits``: the advantage estimators by name and what each reads
- ``schedules``: piecewise values over the updates (learning_rate_schedule, kl_coef_schedule), read and checked
- ``trl_config``: TRL's ModelConfig and ScriptArguments, for TRL's argument names
- ``launch_env``: the world size and rank a launcher sets
- ``io``: reading a config from YAML or JSON, writing it back
- ``doc``: the config reference of docs/reference.md
"""

from __future__ import annotations

from ppo_core.config.checks import ConfigError
from ppo_core.config.ppo_config import PPOConfig

__all__ = ["ConfigError", "PPOConfig"]
