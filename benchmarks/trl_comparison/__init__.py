"""ppo_core against TRL 1.12's PPOTrainer on identical work (benchmarks/trl_comparison/README.md).

``python -m benchmarks.trl_comparison`` runs it all; each side and mode runs in a fresh process,
``python -m benchmarks.trl_comparison.child_process``, which the comparison starts.
"""
