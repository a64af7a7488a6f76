"""Which network the value model's trunk starts from: one rule for a run (``ppo_core.setup.run_setup``) and for its
estimate (``ppo_core.memory.estimate``), so that ``--estimate`` sizes the network a run loads."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def value_trunk(value_model_path: str | None, reward_models: Sequence[tuple[str, str]], policy_path: str,
                reads_policy_ids: Callable[[str, str], bool]) -> tuple[str, str]:
    """(field, path) of the value trunk: ``value_model_path`` when set; else the first reward model (field, path),
    in scoring order, whose tokenizer has the policy's vocabulary (``reads_policy_ids(field, path)``); else the
    policy. A trunk on another vocabulary would read the policy's token ids as other tokens, or index past its
    embedding table; a reward model's trunk already knows what the reward looks at."""
    if value_model_path is not None:
        return "value_model_path", value_model_path
    for field_name, path in reward_models:
        if reads_policy_ids(field_name, path):
            return field_name, path
    return "sft_model_path", policy_path
