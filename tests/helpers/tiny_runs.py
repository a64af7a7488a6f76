"""Settings for a tiny training run, as the GPU tests (test_cuda, test_generation_copy) start theirs: a tiny Llama and
a small dataset written to the test's directory, trained on the letter reward of examples/bring_your_own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools import tiny_data, tiny_models


def letter_run(tmp_path: Path, n_train: int, **values: Any) -> dict[str, Any]:
    """PPOConfig settings for a tiny Llama, written under ``tmp_path``, trained on the letter reward; ``values`` on
    top."""
    policy = tiny_models.write_llama(tmp_path / "llama", seed=1)
    data = tiny_data.write_jsonl_splits(tmp_path / "data", "standard", n_train=n_train, n_test=8)
    return {"task": None, "sft_model_path": str(policy), "dataset_name": str(data),
            "reward_funcs": ["examples.bring_your_own.rewards:letter_reward"], "num_sample_generations": 0, **values}
