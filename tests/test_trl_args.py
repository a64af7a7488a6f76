"""``ppo-tune best --format trl-args``: TRL 1.12 PPOConfig flags, with what TRL lacks as comments."""

from __future__ import annotations

import shlex

from transformers import HfArgumentParser

from ppo_core.config import PPOConfig
from tuner.trl_args import TRL_FIELDS, trl_arguments


def test_flags_round_trip_and_missing_concepts_become_comments() -> None:
    config = PPOConfig(learning_rate=7e-6, value_learning_rate=6e-5, kl_target=8.0, kl_estimator="k2",
                       num_mini_batches=2, gradient_accumulation_steps=2).to_dict()
    text = trl_arguments(config)
    flag_lines = [line.rstrip(" \\") for line in text.splitlines() if line.startswith("--")]
    comments = [line for line in text.splitlines() if line.startswith("#")]
    flags = shlex.split(" ".join(flag_lines))
    assert all(flag[2:] in TRL_FIELDS for flag in flags if flag.startswith("--"))
    # Our field names are TRL's, so our parser reads the flags back to the same values.
    (parsed,) = HfArgumentParser(PPOConfig).parse_args_into_dataclasses(flags)
    assert parsed.learning_rate == 7e-6 and parsed.num_mini_batches == 2 and parsed.kl_estimator == "k1"
    assert any(c.startswith("# value_learning_rate=6e-05") for c in comments)
    assert any(c.startswith("# kl_target=8") for c in comments)
    assert any(c.startswith("# kl_estimator=k2: TRL 1.12 accepts only k1 or k3") for c in comments)
    assert any("num_mini_batches > 1" in c for c in comments)
    assert not any("entropy_coef" in c for c in comments)  # 0 behaves as TRL does: nothing to say
