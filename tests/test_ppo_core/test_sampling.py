"""What the rollout samples, and the log-probabilities it records, are exactly what PPO assumes.

PPO's ratio compares the update's log pi(y_t) with the rollout's; both must describe sampling from
softmax(z / T) with nothing else applied, and the response mask must describe exactly what was generated.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import SAMPLING_DEFAULTS

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.metric_names import run_metrics
from ppo_core.models.attention_kernel import attention_dtype, ratio_attention
from ppo_core.models.sequences import token_logprobs
from ppo_core.rollout.collect import collect_samples, scoring_logits, update_shares_prompts


def small_config(lm: Path, prompts: Path, **overrides: object) -> PPOConfig:
    values: dict[str, object] = dict(
        task=None, sft_model_path=str(lm), reward_model_path="reward_functions:count_letter_a",
        dataset_name=str(prompts), response_length=6, per_device_train_batch_size=8, total_episodes=8,
        num_ppo_epochs=1, num_sample_generations=1, num_eval_prompts=8, learning_rate=1e-3,
    )
    values.update(overrides)
    return PPOConfig(**values)  # type: ignore[arg-type]


def test_without_a_stop_token_every_response_runs_its_full_length(eos_loving_lm_dir: Path, prompts_file: Path) -> None:
    # The model emits EOS almost surely at every step; with stop_token null, EOS is an ordinary token.
    trainer = PPOTrainer(small_config(eos_loving_lm_dir, prompts_file, stop_token=None))
    rollout = trainer._rollout(trainer.setup.train_prompts.select(range(8)))
    assert rollout.responses.shape == (8, 6)
    assert bool(rollout.response_mask.all())
    eos = trainer.setup.tokenizer.eos_token_id
    assert (rollout.responses == eos).float().mean() > 0.9  # what was sampled, not padding forced after a stop
    metrics = trainer.train().metrics[0]
    assert metrics["objective/response_length"] == 6.0 and metrics["val/num_eos_tokens"] == 0.0


def test_with_a_stop_token_the_mask_ends_at_it(eos_loving_lm_dir: Path, prompts_file: Path) -> None:
    trainer = PPOTrainer(small_config(eos_loving_lm_dir, prompts_file, stop_token="eos"))
    rollout = trainer._rollout(trainer.setup.train_prompts.select(range(8)))
    first_is_stop = rollout.responses[:, 0] == trainer.setup.tokenizer.eos_token_id
    assert first_is_stop.float().mean() > 0.9
    assert bool((rollout.response_mask.sum(dim=1)[first_is_stop] == 1).all())


def test_sampling_defaults_in_the_models_generation_config_do_not_apply(
    tiny_lm_dir: Path, lm_with_sampling_defaults_dir: Path, prompts_file: Path,
) -> None:
    assert SAMPLING_DEFAULTS["top_k"] == 2  # the saved file would visibly change sampling if it applied

    def run(lm: Path) -> tuple[list[str], list[dict[str, float]]]:
        result = PPOTrainer(small_config(lm, prompts_file, stop_token="eos", total_episodes=16)).train()
        metrics = [run_metrics(m) for m in result.metrics]
        return [sample.response for sample in result.samples], metrics

    plain_samples, plain_metrics = run(tiny_lm_dir)
    assert run(lm_with_sampling_defaults_dir) == (plain_samples, plain_metrics)


def test_rollout_logprobs_match_the_update_under_bf16_autocast(wider_lm_dir: Path, prompts_file: Path) -> None:
    # At learning rate 0 nothing moves, so every ratio must be 1 and KL to the reference 0; any gap is a
    # difference between how the rollout and the update compute log-probabilities. generate()'s cached
    # logits differed from the full forward pass by up to 0.01 nats per token here.
    config = small_config(wider_lm_dir, prompts_file, bf16=True, use_cpu=True, learning_rate=0.0,
                          value_learning_rate=0.0, total_episodes=32, stop_token="eos", response_length=12,
                          per_device_train_batch_size=4, gradient_accumulation_steps=2)
    trainer = PPOTrainer(config)
    assert trainer.accelerator.mixed_precision == "bf16"
    rollout = trainer._rollout(trainer.setup.train_prompts.select(range(8)))
    # As the update decides: prompts shared or not, and the attention kernel for its length and dtype.
    kernel = ratio_attention(attention_dtype(trainer.optimisation.policy, rollout.queries.device, "bf16"),
                             rollout.queries.device, rollout.queries.shape[1] + 12)
    with torch.no_grad(), trainer.accelerator.autocast(), kernel:
        shared = update_shares_prompts(config, rollout.queries.shape[1], 12)
        logits = scoring_logits(trainer.optimisation.policy, shared, rollout.queries[:4], rollout.query_mask[:4],
                                rollout.responses[:4], rollout.response_mask[:4])
    update_logprobs = token_logprobs(logits, rollout.responses[:4], config.temperature)
    gap = (update_logprobs - rollout.logprobs[:4]).abs()[rollout.response_mask[:4]]
    assert float(gap.max()) < 1e-4, float(gap.max())
    # The update's forward runs with gradients on, and a CPU may pick another bf16 kernel for it (one with AMX did:
    # the same inputs' log-probs then differ in rounding, val/ratio_var 2e-7 and approxkl 1.6e-8, against 0 without
    # AMX). The bound sits at bf16's rounding, well below what a real mismatch gives: 0.01 nats a token, generate()'s
    # cached logits above, is an approxkl of 5e-5.
    for metrics in trainer.train().metrics:
        assert metrics["val/ratio"] == pytest.approx(1.0, abs=1e-4)
        assert metrics["policy/approxkl_avg"] < 1e-6
        assert abs(metrics["objective/kl"]) < 1e-4


def test_a_sample_recording_draws_the_rollouts_responses_without_its_forwards(tiny_lm_dir: Path,
                                                                             prompts_file: Path) -> None:
    # Recorded samples need no log-probabilities: the same seed draws the same responses and scores as a full
    # rollout, which also runs the policy's and the reference's scoring forwards.
    trainer = PPOTrainer(small_config(tiny_lm_dir, prompts_file, stop_token="eos", local_rollout_forward_batch_size=3))
    prompts = trainer.setup.eval_prompts
    torch.manual_seed(11)
    rollout = trainer._rollout(prompts)
    torch.manual_seed(11)
    scored = collect_samples(trainer.setup, prompts, trainer.config, torch.device("cpu"), trainer._sampler())
    assert scored.response_texts == rollout.response_texts and len(scored.response_texts) == len(prompts)
    assert torch.equal(scored.scores, rollout.scores)
