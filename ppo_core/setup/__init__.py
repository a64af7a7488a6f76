"""Turning a config into a run's parts: the precision it runs in (``run_precision``), its loaded models, rewards,
prompts and stop token (``run_setup``), and the metrics it will report (``reported_metrics``)."""
