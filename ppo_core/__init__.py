"""ppo_core: a compact PPO trainer for causal language models, configured with TRL's PPOConfig names."""

from ppo_core.callbacks import JsonlWriter, SampleGeneration, TrainerCallback
from ppo_core.config import ConfigError, PPOConfig
from ppo_core.trainer import NonFiniteError, PPOTrainer, TrainResult

__all__ = [
    "ConfigError",
    "JsonlWriter",
    "NonFiniteError",
    "PPOConfig",
    "PPOTrainer",
    "SampleGeneration",
    "TrainResult",
    "TrainerCallback",
]
