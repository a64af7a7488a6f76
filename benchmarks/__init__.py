"""Benchmarks: ppo_core against TRL 1.12's PPOTrainer on identical work (see benchmarks/README.md)."""
