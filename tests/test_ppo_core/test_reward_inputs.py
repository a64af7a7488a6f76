"""What a reward model reads: the policy's own tokens when it shares the vocabulary, the whole decoded sequence
when it does not, and never a value network built on a vocabulary that reads the policy's ids as other tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.rewards.models import SequenceClassifierReward


def small_config(lm: Path, prompts: Path, rm: Path, **overrides: Any) -> PPOConfig:
    values: dict[str, Any] = dict(
        task=None, sft_model_path=str(lm), reward_model_path=str(rm), dataset_name=str(prompts), response_length=6,
        per_device_train_batch_size=8, total_episodes=16, num_ppo_epochs=1, num_sample_generations=0,
        learning_rate=1e-3, stop_token="eos",
    )
    values.update(overrides)
    return PPOConfig(**values)


def score_alone(model: PreTrainedModel, ids: list[int]) -> float:
    """The reward model's head at the last position of one unpadded sequence, alone in its batch.

    Read directly rather than through the model's own pooling, which skips trailing pad ids: a random policy
    can sample the pad token as a real token, and the reward model must see it.
    """
    with torch.no_grad():
        hidden = model.base_model(input_ids=torch.tensor([ids])).last_hidden_state
        # The classification head, fetched as a submodule: torch types an undeclared attribute as Tensor | Module.
        return float(model.get_submodule("score")(hidden)[0, -1, 0])


def test_a_reward_model_sharing_the_vocabulary_scores_the_policys_tokens(
    tiny_lm_dir: Path, tiny_rm_dir: Path, prompts_file: Path,
) -> None:
    trainer = PPOTrainer(small_config(tiny_lm_dir, prompts_file, tiny_rm_dir))
    rollout = trainer._rollout(trainer.setup.train_prompts.select(range(8)))
    assert bool(rollout.has_stop.any())  # some responses end with the stop token, which the RM must see
    model = AutoModelForSequenceClassification.from_pretrained(tiny_rm_dir).eval()
    expected = [
        score_alone(model, query[query_mask.bool()].tolist() + response[mask].tolist())
        for query, query_mask, response, mask in zip(rollout.queries, rollout.query_mask, rollout.responses,
                                                     rollout.response_mask, strict=True)
    ]
    torch.testing.assert_close(rollout.scores, torch.tensor(expected), atol=1e-5, rtol=0)


def test_a_reward_model_on_another_vocabulary_reads_the_decoded_sequence_and_its_eos(
    tiny_lm_dir: Path, small_vocab_rm_dir: Path, prompts_file: Path,
) -> None:
    trainer = PPOTrainer(small_config(tiny_lm_dir, prompts_file, small_vocab_rm_dir))
    reward = trainer.setup.models.rewards.rewards[0]
    assert isinstance(reward, SequenceClassifierReward) and not reward.reads_policy_ids
    rollout = trainer._rollout(trainer.setup.train_prompts.select(range(8)))
    model = AutoModelForSequenceClassification.from_pretrained(small_vocab_rm_dir).eval()
    rm_tokenizer = AutoTokenizer.from_pretrained(small_vocab_rm_dir)
    expected = []
    for prompt, response, stopped in zip(rollout.prompts, rollout.response_texts, rollout.has_stop.tolist(),
                                         strict=True):
        # A word-level policy decodes with spaces between words: the response's first word stays its own.
        ids = rm_tokenizer(f"{prompt} {response}".strip())["input_ids"]
        expected.append(score_alone(model, ids + ([rm_tokenizer.eos_token_id] if stopped else [])))
    torch.testing.assert_close(rollout.scores, torch.tensor(expected), atol=1e-5, rtol=0)


def test_the_value_network_uses_the_policys_trunk_when_the_reward_models_vocabulary_differs(
    tiny_lm_dir: Path, small_vocab_rm_dir: Path, tiny_rm_dir: Path, prompts_file: Path,
) -> None:
    # The small reward model's embedding table has 8 rows; the policy's ids go up to 28.
    trainer = PPOTrainer(small_config(tiny_lm_dir, prompts_file, small_vocab_rm_dir))
    value_trunk = trainer.setup.models.value_model.trunk
    assert value_trunk.get_input_embeddings().num_embeddings == len(trainer.setup.tokenizer)
    assert len(trainer.train().metrics) == 2
    # Sharing the vocabulary, the reward model's trunk is the better start (it already judges answers).
    same = PPOTrainer(small_config(tiny_lm_dir, prompts_file, tiny_rm_dir))
    assert same.setup.models.value_model.trunk.name_or_path == str(tiny_rm_dir)
