"""One table of advantage estimators (``ppo_core.config.estimator_traits``): an estimator added there, with its
function, is seen by the config, a run, its metrics, the search space, the study file's choices, the dashboard and the
exports, with nothing else edited."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from ppo_core import PPOTrainer, reported_metrics
from ppo_core.algorithm.estimators import ESTIMATORS as FUNCTIONS
from ppo_core.algorithm.estimators import AdvantageInputs, estimator
from ppo_core.config.estimator_traits import ESTIMATORS, EstimatorTraits, critic_estimators, estimator_names, readers
from ppo_core.config.ppo_config import ConfigError, PPOConfig
from tuner.search.space import Regime

DUMMY = "leave_one_in"


def centred_on_the_batch(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A_i = R_i - mean_j R_j, on every token: a group-free, critic-free baseline."""
    rewards = inputs.sequence_rewards()
    return inputs.over_tokens(rewards - rewards.mean()), None


@pytest.fixture
def dummy(monkeypatch: pytest.MonkeyPatch) -> str:
    """The dummy's traits in the table, and its function registered: the two places an estimator lives."""
    monkeypatch.setitem(ESTIMATORS, DUMMY, EstimatorTraits(critic=False, groups=False, kl_in_loss=True,
                                                           reads=frozenset({"gamma"})))
    monkeypatch.setattr("ppo_core.algorithm.estimators.ESTIMATORS", {**FUNCTIONS})
    estimator(DUMMY)(centred_on_the_batch)
    return DUMMY


def test_an_estimator_without_traits_cannot_be_registered() -> None:
    first = "register its traits in ppo_core.config.estimator_traits.ESTIMATORS first"
    with pytest.raises(ValueError, match=re.escape(first)):
        estimator("unlisted")(centred_on_the_batch)


def test_an_estimator_added_to_the_table_is_seen_everywhere(dummy: str, tiny_lm_dir: Path,
                                                            prompts_file: Path) -> None:
    from tuner.exports import EXPORT_FORMATS
    from tuner.exports._common import unused_fields
    from tuner.study.study_file import _field_values

    assert dummy in estimator_names() and dummy not in critic_estimators()
    assert readers("gamma") == ("gae", "reinforce_pp", "reinforce_pp_baseline", dummy)
    # The config takes it with its traits' defaults: one response a prompt, KL a loss term, no value network.
    config = PPOConfig(task=None, sft_model_path=str(tiny_lm_dir), dataset_name=str(prompts_file),
                       reward_model_path="tests.reward_functions:count_letter_a", response_length=6,
                       per_device_train_batch_size=4, gradient_accumulation_steps=2, total_episodes=16,
                       num_sample_generations=0, learning_rate=1e-3, advantage_estimator=dummy)
    assert (config.generations_per_prompt, config.kl_penalty_in_reward, config.uses_critic) == (1, False, False)
    # A run trains with it and reports the metrics known before it: no critic's, the KL loss's.
    trainer = PPOTrainer(config)
    metrics = trainer.train().metrics
    assert trainer.setup.models.value_model is None
    assert set().union(*metrics) == reported_metrics(config) and "loss/kl_avg" in metrics[-1]
    assert all(math.isfinite(value) for m in metrics for value in m.values())
    assert critic_estimators() == ("gae",)  # what the dashboard asks to tell a run without a value loss
    # The search space chooses gamma for it and not lam; a study file may name it among the choices.
    regime = Regime(dummy, kl_in_reward=False, kl_control=None)
    assert regime.idle_reason("gamma") is None
    assert regime.idle_reason("lam") == f"not used by advantage_estimator {dummy} (only by gae)"
    assert dummy in (_field_values("advantage_estimator") or ())
    # Every export takes it: a comment where the target has no name for it, never an error (regression: verl,
    # openrlhf, trl-grpo and trl-rloo raised a bare KeyError).
    for format_name in EXPORT_FORMATS:
        text = EXPORT_FORMATS[format_name](config.to_dict())
        assert f"advantage_estimator={dummy}" in text, format_name
    # The exports say what it leaves unused.
    unused = unused_fields(config)
    assert unused["lam"] == f"{dummy} trains no value network"
    assert unused["scale_rewards"] == "only grpo reads it" and "gamma" not in unused


def test_a_name_missing_from_the_table_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^advantage_estimator: expected one of 'gae', 'grpo', 'rloo', "
                                          r"'reinforce_pp', 'reinforce_pp_baseline', got 'dummy'$"):
        PPOConfig(advantage_estimator="dummy")
