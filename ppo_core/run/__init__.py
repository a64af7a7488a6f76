"""Running the loop: PPOTrainer (``trainer``) with its callbacks, trackers and progress line, evaluation on held-out
prompts, the process group of a launched run (``distributed``), the rollout's metrics and the run directory."""
