"""Turning a config into a run's parts: where each comes from and its loaded tokenizer, prompts, rewards, judges and
stop token (``run_setup``), the precision it runs in (``run_precision``), the models it trains (``trained_models``),
and the metrics it will report (``reported_metrics``)."""
