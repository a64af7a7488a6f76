"""PPOTrainer end to end on tiny real models saved to disk, with callable and model rewards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedTokenizerBase

from ppo_core import NonFiniteError, PPOConfig, PPOTrainer, TrainerCallback
from ppo_core.algorithm.losses import clipped_policy_loss
from ppo_core.config.ppo_config import ConfigError
from ppo_core.metric_names import run_metrics
from ppo_core.models.loading import LoadOptions, load_causal_lm, load_tokenizer, load_value_model
from ppo_core.models.prompt_data import text_prompts
from ppo_core.models.sequences import token_logprobs
from ppo_core.rewards.base import RewardInputs
from ppo_core.rewards.models import SequenceClassifierReward, keep_last
from ppo_core.rollout.collect import response_logits, response_token_ids, response_values

# Measurements of the machine, not of the run: they differ between identical runs.
TIME_METRICS = ("time/rollout_s", "time/update_s", "time/tokens_per_s", "memory/peak_gib")


def small_config(lm: Path, prompts: Path, **overrides: object) -> PPOConfig:
    values: dict[str, object] = dict(
        task=None, sft_model_path=str(lm), reward_model_path="reward_functions:count_letter_a",
        dataset_name=str(prompts), response_length=6, per_device_train_batch_size=4,
        gradient_accumulation_steps=4, num_mini_batches=2, num_ppo_epochs=2, total_episodes=48,
        num_sample_generations=2, num_eval_prompts=3, learning_rate=1e-3, stop_token="eos",
    )
    values.update(overrides)
    return PPOConfig(**values)  # type: ignore[arg-type]


def test_padding_never_changes_logprobs_values_or_loss(tiny_lm_dir: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_lm_dir))
    policy = load_causal_lm(str(tiny_lm_dir))
    value_model = load_value_model(str(tiny_lm_dir))
    torch.nn.init.normal_(value_model.head.weight)  # a zero head would hide padding bugs
    query = torch.tensor([tokenizer.convert_tokens_to_ids(["a", "b", "c"])])
    response = torch.tensor([tokenizer.convert_tokens_to_ids(["d", "e", "f"])])
    pad = tokenizer.pad_token_id

    def scored(left: int, right: int) -> tuple[torch.Tensor, torch.Tensor]:
        queries = torch.cat([torch.full((1, left), pad), query], dim=1)
        query_mask = torch.cat([torch.zeros(1, left), torch.ones_like(query)], dim=1).long()
        responses = torch.cat([response, torch.full((1, right), pad)], dim=1)
        mask = torch.cat([torch.ones_like(response), torch.zeros(1, right)], dim=1).bool()
        with torch.no_grad():
            logits = response_logits(policy, queries, query_mask, responses, mask)
            values = response_values(value_model, queries, query_mask, responses, mask)
        return token_logprobs(logits, responses, 0.7)[:, :3], values[:, :3]

    base_logprobs, base_values = scored(0, 0)
    advantages = torch.tensor([[1.0, -0.5, 2.0]])
    base_loss = clipped_policy_loss(base_logprobs, base_logprobs - 0.1, advantages, torch.ones(1, 3), 0.2).loss
    for left, right in [(3, 0), (0, 4), (5, 2)]:
        logprobs, values = scored(left, right)
        torch.testing.assert_close(logprobs, base_logprobs, atol=1e-5, rtol=0)
        torch.testing.assert_close(values, base_values, atol=1e-5, rtol=0)
        loss = clipped_policy_loss(logprobs, logprobs - 0.1, advantages, torch.ones(1, 3), 0.2).loss
        torch.testing.assert_close(loss, base_loss, atol=1e-5, rtol=0)


def test_the_vocabulary_projection_reads_the_kept_positions_as_one_contiguous_block(tiny_lm_dir: Path) -> None:
    """A strided [B, K, H] slice made torch run the projection as a batched product against the weight expanded
    over the batch (in bf16 a copy of B x H x V first); the kept rows must arrive contiguous, with the logits
    unchanged."""
    policy = load_causal_lm(str(tiny_lm_dir))
    seen: list[torch.Tensor] = []
    policy.get_output_embeddings().register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    generator = torch.Generator().manual_seed(0)
    queries = torch.randint(4, 20, (3, 5), generator=generator)
    responses = torch.randint(4, 20, (3, 4), generator=generator)
    with torch.no_grad():
        kept = response_logits(policy, queries, torch.ones_like(queries), responses, torch.ones_like(responses))
        whole = policy(torch.cat([queries, responses], dim=1)).logits
    assert seen[0].shape == (3, 5, policy.config.n_embd) and seen[0].is_contiguous()
    torch.testing.assert_close(kept, whole[:, 4:-1], atol=1e-6, rtol=0)


def test_value_head_starts_at_zero(tiny_rm_dir: Path) -> None:
    value_model = load_value_model(str(tiny_rm_dir))
    ids = torch.tensor([[3, 4, 5]])
    values = value_model(ids, torch.ones_like(ids), torch.arange(3)[None])
    assert torch.all(values == 0)


def test_ppo_learns_a_callable_reward(tiny_lm_dir: Path, prompts_file: Path) -> None:
    config = small_config(tiny_lm_dir, prompts_file, total_episodes=16 * 25, learning_rate=3e-3,
                          kl_coef=0.01, stop_token=None)
    result = PPOTrainer(config).train()
    first = sum(m["objective/scores"] for m in result.metrics[:3]) / 3
    last = sum(m["objective/scores"] for m in result.metrics[-3:]) / 3
    assert last > first + 1.5, (first, last)
    assert result.metrics[-1]["objective/kl"] > 0.1


def test_zero_learning_rates_leave_policy_unchanged_and_kl_zero(tiny_lm_dir: Path, prompts_file: Path) -> None:
    config = small_config(tiny_lm_dir, prompts_file, learning_rate=0.0, value_learning_rate=0.0)
    trainer = PPOTrainer(config)
    before = {name: p.detach().clone() for name, p in trainer.optimisation.policy.named_parameters()}
    result = trainer.train()
    after = dict(trainer.optimisation.policy.named_parameters())
    assert all(torch.equal(before[name], after[name]) for name in before)
    for metrics in result.metrics:
        assert abs(metrics["objective/kl"]) < 1e-4
        # True averages over mini-batches x accumulation: TRL 1.12 reported ~0.5 here.
        assert metrics["val/ratio"] == pytest.approx(1.0, abs=1e-4)
        assert metrics["val/ratio_var"] == pytest.approx(0.0, abs=1e-6)
        assert metrics["policy/approxkl_avg"] == pytest.approx(0.0, abs=1e-6)
        assert metrics["policy/entropy_avg"] > 1.0  # a random 29-token model is far from zero entropy


def test_same_seed_same_metrics_on_cpu(tiny_lm_dir: Path, prompts_file: Path) -> None:
    def run(seed: int) -> list[dict[str, float]]:
        result = PPOTrainer(small_config(tiny_lm_dir, prompts_file, seed=seed)).train()
        return [run_metrics(m) for m in result.metrics]

    first = run(3)
    assert first == run(3)
    assert first != run(4)


def test_metrics_and_samples_reach_callbacks_which_can_stop(tiny_lm_dir: Path, prompts_file: Path) -> None:
    class Recorder(TrainerCallback):
        def __init__(self) -> None:
            self.updates: list[int] = []
            self.sample_updates: list[int] = []
            self.ended: tuple[int, str | None] | None = None

        def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
            self.updates.append(update)
            return "enough" if update == 2 else None

        def on_samples(self, update: int, samples: list) -> None:
            self.sample_updates.append(update)
            assert len(samples) == 3 and all(isinstance(s.response, str) for s in samples)

        def on_train_end(self, num_updates: int, stop_reason: str | None) -> None:
            self.ended = (num_updates, stop_reason)

    recorder = Recorder()
    result = PPOTrainer(small_config(tiny_lm_dir, prompts_file, total_episodes=80), [recorder]).train()
    assert recorder.updates == [1, 2] and result.stop_reason == "enough"
    assert recorder.ended == (2, "enough")
    assert recorder.sample_updates[0] == 0  # the SFT policy's samples come first
    expected_keys = {
        "objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
        "objective/scores", "policy/approxkl_avg", "policy/clipfrac_avg", "loss/policy_avg", "loss/value_avg",
        "val/clipfrac_avg", "policy/entropy_avg", "val/ratio", "val/ratio_var", "val/num_eos_tokens", "lr",
        "episode", "objective/kl_coef", "lr_value", *TIME_METRICS,
    }
    assert expected_keys <= set(result.metrics[0])
    assert result.metrics[1]["episode"] == 32


def test_non_finite_score_stops_with_update_named(tiny_lm_dir: Path, prompts_file: Path) -> None:
    config = small_config(tiny_lm_dir, prompts_file, reward_model_path="reward_functions:nan_reward")
    # The reward that returned the NaN is named: the total score alone cannot say whose it was.
    message = r"objective/scores is nan at update 1 \(reward reward_functions:nan_reward returned nan for 16 of 16 "
    with pytest.raises(NonFiniteError, match=message + r"completions\)$"):
        PPOTrainer(config).train()


def test_reward_from_a_sequence_classifier_directory(tiny_lm_dir: Path, tiny_rm_dir: Path, prompts_file: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_lm_dir))
    reward = SequenceClassifierReward(str(tiny_rm_dir), LoadOptions(), batch_size=2, policy_tokenizer=tokenizer,
                                      name="reward")
    scores = reward(reward_inputs(tokenizer, ["a b", "c"], ["d e f", "g"])).values
    # The score is read at the last real token whatever the padding: scoring alone gives the same number.
    torch.testing.assert_close(scores[1:], reward(reward_inputs(tokenizer, ["c"], ["g"])).values, atol=1e-5, rtol=0)
    config = small_config(tiny_lm_dir, prompts_file, reward_model_path=str(tiny_rm_dir), total_episodes=32)
    result = PPOTrainer(config).train()
    assert len(result.metrics) == 2


def reward_inputs(tokenizer: PreTrainedTokenizerBase, prompts: list[str], responses: list[str]) -> RewardInputs:
    """A batch as the rollout hands it to rewards: left-padded prompts, right-padded responses."""
    queries = tokenizer(prompts, return_tensors="pt", padding=True)
    tokenizer.padding_side = "right"
    answers = tokenizer(responses, return_tensors="pt", padding=True)
    tokenizer.padding_side = "left"
    return RewardInputs(
        prompts=text_prompts(prompts), completions=responses,
        completion_ids=response_token_ids(answers["input_ids"], answers["attention_mask"].bool()),
        queries=queries["input_ids"],
        query_mask=queries["attention_mask"], responses=answers["input_ids"],
        response_mask=answers["attention_mask"].bool(), has_stop=torch.zeros(len(prompts), dtype=torch.bool),
        tokenizer=tokenizer,
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sft_model_path": "/nonexistent/model"}, "^sft_model_path: no model at"),
        ({"reward_model_path": "reward_functions:missing"}, "^reward_model_path: 'reward_functions' has no callable"),
        ({"reward_model_path": "no_such_module_xyz:f"}, "^reward_model_path: cannot import module"),
    ],
)
def test_bad_model_paths_are_config_errors(
    tiny_lm_dir: Path, prompts_file: Path, overrides: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        PPOTrainer(small_config(tiny_lm_dir, prompts_file, **overrides))


def test_a_reward_model_scores_an_episode_longer_than_its_positions(tiny_lm_dir: Path, tiny_rm_dir: Path,
                                                                    tmp_path: Path) -> None:
    # Regression: a SmolLM2 response re-tokenized by the text task's word-level reward model came out longer than
    # the model's 64 positions, and the validation run failed with "IndexError: index out of range in self".
    short = tmp_path / "short_rm"
    model = AutoModelForSequenceClassification.from_pretrained(tiny_rm_dir)
    positions = 8
    config = model.config
    config.n_positions = positions
    torch.manual_seed(0)
    type(model)(config).save_pretrained(short)
    AutoTokenizer.from_pretrained(tiny_rm_dir).save_pretrained(short)
    tokenizer = load_tokenizer(str(tiny_lm_dir))
    reward = SequenceClassifierReward(str(short), LoadOptions(), batch_size=2, policy_tokenizer=tokenizer,
                                      reward_text=lambda prompt, response: f"{prompt} {response}", name="reward")
    long_response = " ".join(["a b c"] * 10)
    inputs = reward_inputs(tokenizer, ["a", "b"], [long_response, "c"])
    scores = reward(inputs).values
    assert scores.shape == (2,) and torch.isfinite(scores).all()
    # The end is kept, where the response is and the score is read.
    full = reward.tokenizer(f"a {long_response}")["input_ids"]
    assert len(full) > positions
    assert reward._token_rows(inputs)[0] == full[-positions:]
    assert keep_last([[1, 2, 3], [4]], 2) == [[2, 3], [4]] and keep_last([[1, 2]], None) == [[1, 2]]
