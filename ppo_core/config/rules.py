"""PPOConfig's own rules, run when a config is built, after its types are checked (ppo_core.config.checks): each
value's range and the rules between fields, in a few named steps. Every problem raises :class:`ConfigError` with a
one-line message that names the field."""

from __future__ import annotations

from typing import Literal, Protocol

from ppo_core.config.checks import REPORT_TO, ConfigError, require
from ppo_core.config.estimator_traits import ESTIMATORS
from ppo_core.config.schedules import check_schedule


class RuledConfig(Protocol):
    """The PPOConfig values the rules read by attribute (the rest they read by name). ppo_core.config.ppo_config imports
    this module to run the rules, so this module names what it reads instead of importing PPOConfig: that import, even
    one for type checkers alone, would close an import loop (tests/test_architecture.py counts every import). mypy
    checks PPOConfig against this where its ``__post_init__`` passes itself."""

    use_peft: bool
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    task: str | None
    task_seed: int | None
    reward_weights: list[float] | None
    judge_weights: list[float] | None
    pairwise_judge: str | None
    max_prompt_length: int | None
    value_learning_rate: float | None
    learning_rate_schedule: list[list[float]] | None
    warmup_ratio: float
    adam_epsilon: float
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    num_mini_batches: int
    total_episodes: int | None
    num_train_epochs: float
    cliprange: float
    cliprange_value: float
    gamma: float
    lam: float
    cliprange_low: float | None
    dual_clip: float | None
    advantage_estimator: str
    num_generations: int | None
    scale_rewards_epsilon: float
    kl_target: float | None
    kl_coef_schedule: list[list[float]] | None
    response_length: int | None
    temperature: float
    stop_token: Literal["eos"] | None
    stop_token_id: int | None
    missing_eos_penalty: float | None
    num_sample_generations: int
    eval_steps: float | None
    eval_on_start: bool
    update_forward_batch_size: int | None
    report_to: list[str]
    save_steps: float | None
    save_total_limit: int | None

    @property
    def kl_penalty_in_reward(self) -> bool: ...

    @property
    def kl_coefficient(self) -> float: ...

    @property
    def generations_per_prompt(self) -> int: ...

    @property
    def reward_specs(self) -> list[str]: ...

    @property
    def named_judges(self) -> list[tuple[str, str]]: ...


def check_values(c: RuledConfig) -> None:
    """Each value against its field's range and the rules between fields, after
    ``ppo_core.config.checks.check_types``: every problem one line naming the field."""
    _check_optimisation(c)
    _check_clipping(c)
    _check_run_length(c)
    _check_kl(c)
    _check_estimator(c)
    _check_batches(c)
    _check_models_and_rewards(c)
    _check_judges(c)
    _check_checkpoints(c)


def _check_optimisation(c: RuledConfig) -> None:
    for name in ("learning_rate", "weight_decay", "max_grad_norm", "vf_coef", "entropy_coef", "warmup_steps"):
        require(getattr(c, name) >= 0, name, ">= 0", getattr(c, name))
    if c.value_learning_rate is not None:
        require(c.value_learning_rate >= 0, "value_learning_rate", ">= 0", c.value_learning_rate)
    require(c.adam_epsilon > 0, "adam_epsilon", "> 0", c.adam_epsilon)
    check_schedule("learning_rate_schedule", c.learning_rate_schedule, zero_allowed=False)
    require(0.0 <= c.warmup_ratio < 1.0, "warmup_ratio", "in [0, 1)", c.warmup_ratio)
    require(0.0 <= c.lam <= 1.0, "lam", "in [0, 1]", c.lam)
    require(0.0 <= c.gamma <= 1.0, "gamma", "in [0, 1]", c.gamma)
    require(c.scale_rewards_epsilon >= 0, "scale_rewards_epsilon", ">= 0", c.scale_rewards_epsilon)
    require(c.temperature > 0, "temperature", "> 0", c.temperature)
    if c.use_peft:
        require(c.lora_r >= 1, "lora_r", ">= 1", c.lora_r)
        require(c.lora_alpha > 0, "lora_alpha", "> 0", c.lora_alpha)
        require(0.0 <= c.lora_dropout < 1.0, "lora_dropout", "in [0, 1)", c.lora_dropout)


def _check_clipping(c: RuledConfig) -> None:
    require(c.cliprange_value >= 0, "cliprange_value", ">= 0", c.cliprange_value)
    require(c.cliprange > 0, "cliprange", "> 0", c.cliprange)
    for name in ("cliprange_low", "cliprange_high"):
        if getattr(c, name) is not None:
            require(getattr(c, name) > 0, name, "> 0 (null means cliprange)", getattr(c, name))
    if c.cliprange_low is not None:
        # Below 1 - 1 = 0 the ratio could never be clipped from below.
        require(c.cliprange_low < 1, "cliprange_low", "< 1 (the ratio is clipped at 1 - cliprange_low)",
                c.cliprange_low)
    if c.dual_clip is not None:
        require(c.dual_clip > 1, "dual_clip", "> 1 (the loss of a negative advantage is capped at -A x dual_clip)",
                c.dual_clip)


def _check_run_length(c: RuledConfig) -> None:
    if c.task_seed is not None:
        require(c.task_seed >= 0, "task_seed", ">= 0", c.task_seed)
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_mini_batches",
                 "num_ppo_epochs", "local_rollout_forward_batch_size", "kl_horizon", "num_eval_prompts",
                 "num_eval_samples"):
        require(getattr(c, name) >= 1, name, ">= 1", getattr(c, name))
    require(c.num_sample_generations >= 0, "num_sample_generations", ">= 0", c.num_sample_generations)
    require(c.num_train_epochs > 0, "num_train_epochs", "> 0", c.num_train_epochs)
    require(not c.eval_on_start or c.eval_steps is not None, "eval_on_start",
            "false without eval_steps (it is the first of the run's evaluations)", c.eval_on_start)
    if c.eval_steps is not None:
        require(c.eval_steps > 0, "eval_steps", "> 0", c.eval_steps)
        # At 1 and above it counts updates; a fraction of the run is only meaningful below 1.
        require(c.eval_steps < 1 or float(c.eval_steps).is_integer(), "eval_steps",
                "a whole number of updates when >= 1 (below 1, a fraction of the run's updates)", c.eval_steps)
    if c.total_episodes is not None:
        require(c.total_episodes >= 1, "total_episodes", ">= 1", c.total_episodes)
    if c.response_length is not None:
        require(c.response_length >= 1, "response_length", ">= 1", c.response_length)
    if c.max_prompt_length is not None:
        require(c.max_prompt_length >= 1, "max_prompt_length", ">= 1", c.max_prompt_length)
    if c.missing_eos_penalty is not None:
        require(c.missing_eos_penalty >= 0, "missing_eos_penalty", ">= 0", c.missing_eos_penalty)
    if c.stop_token is not None and c.stop_token_id is not None:
        raise ConfigError("stop_token_id: cannot be set together with stop_token; set stop_token to null")
    for tracker in c.report_to:
        require(tracker in REPORT_TO, "report_to", f"one of {', '.join(REPORT_TO)}", tracker)


def _check_kl(c: RuledConfig) -> None:
    for name in ("kl_coef", "beta"):
        require(getattr(c, name) >= 0, name, ">= 0", getattr(c, name))
    check_schedule("kl_coef_schedule", c.kl_coef_schedule, zero_allowed=True)
    if c.kl_target is not None and c.kl_coef_schedule is not None:
        raise ConfigError("kl_coef_schedule: cannot be set together with kl_target (its adaptive controller moves "
                          "the coefficient itself); set one of them to null")
    if c.kl_target is not None:
        require(c.kl_target > 0, "kl_target", "> 0 nats", c.kl_target)
        coefficient = "kl_coef" if c.kl_penalty_in_reward else "beta"
        require(c.kl_coefficient > 0, coefficient, "> 0 when kl_target is set (the adaptive controller scales it)",
                c.kl_coefficient)


def _rollout_batch(c: RuledConfig) -> int:
    """One process's share of a rollout batch: per_device_train_batch_size x gradient_accumulation_steps."""
    return c.per_device_train_batch_size * c.gradient_accumulation_steps


def _check_estimator(c: RuledConfig) -> None:
    """The advantage estimator's needs: a group of responses per prompt for the group estimators, and whole groups
    on every process (its share of a rollout batch is per_device_train_batch_size x gradient_accumulation_steps)."""
    if c.num_generations is not None:
        require(c.num_generations >= 1, "num_generations", ">= 1", c.num_generations)
    generations = c.generations_per_prompt
    if ESTIMATORS[c.advantage_estimator].groups and generations < 2:
        raise ConfigError(f"num_generations: advantage_estimator {c.advantage_estimator} compares the responses to "
                          f"one prompt, so it needs >= 2, got {generations}")
    local_batch = _rollout_batch(c)
    if local_batch % generations:
        raise ConfigError(f"num_generations: {generations} must divide the rollout batch per_device_train_batch_size "
                          f"x gradient_accumulation_steps = {local_batch}, so that each process holds whole groups")


def _check_batches(c: RuledConfig) -> None:
    """TRL's batch hierarchy divides evenly: the rollout batch into mini-batches, each mini-batch into micro-batches
    (and the update's forward batches into micro-batches)."""
    if c.update_forward_batch_size is not None:
        require(c.update_forward_batch_size >= c.per_device_train_batch_size
                and c.update_forward_batch_size % c.per_device_train_batch_size == 0, "update_forward_batch_size",
                f"a multiple of per_device_train_batch_size ({c.per_device_train_batch_size})",
                c.update_forward_batch_size)
    local_batch = _rollout_batch(c)
    if local_batch % c.num_mini_batches:
        raise ConfigError(
            f"num_mini_batches: {c.num_mini_batches} must divide the rollout batch "
            f"per_device_train_batch_size x gradient_accumulation_steps = {local_batch}"
        )
    mini_batch = local_batch // c.num_mini_batches
    if mini_batch % c.per_device_train_batch_size:
        raise ConfigError(
            f"per_device_train_batch_size: {c.per_device_train_batch_size} must divide the mini-batch "
            f"{mini_batch}; make gradient_accumulation_steps a multiple of num_mini_batches"
        )


def _check_models_and_rewards(c: RuledConfig) -> None:
    if c.task is not None:
        # Here, not when the task is built: a study would otherwise be stored and then fail in every trial.
        from ppo_core.tasks.variants import task_problem

        problem = task_problem(c.task)
        if problem is not None:
            raise ConfigError(problem)
    if c.task is None:
        for name in ("sft_model_path", "dataset_name"):
            if getattr(c, name) is None:
                raise ConfigError(f"{name}: required when task is null")
        if not c.reward_specs:
            raise ConfigError("reward_model_path: required when task is null (or give reward_funcs)")
    if c.reward_weights is not None:
        rewards = len(c.reward_specs) or 1  # none named: the task's own reward model
        if len(c.reward_weights) != rewards:
            raise ConfigError(f"reward_weights: {len(c.reward_weights)} weights for {rewards} rewards "
                              f"({', '.join(c.reward_specs) or 'the task reward model'})")


def _check_checkpoints(c: RuledConfig) -> None:
    """save_steps follows eval_steps' rule: whole updates from 1, a fraction of the run below 1. (It needs an
    output_dir too, which ppo-tune train sets after reading the file: the trainer checks that.)"""
    if c.save_steps is not None:
        require(c.save_steps > 0, "save_steps", "> 0", c.save_steps)
        require(c.save_steps < 1 or float(c.save_steps).is_integer(), "save_steps",
                "a whole number of updates when >= 1 (below 1, a fraction of the run's updates)", c.save_steps)
    if c.save_total_limit is not None:
        require(c.save_total_limit >= 1, "save_total_limit", ">= 1 (null keeps every checkpoint)",
                c.save_total_limit)


def _check_judges(c: RuledConfig) -> None:
    """Judges score held-out evaluations only: one without eval_steps would never score anything."""
    named = [field_name for field_name, _ in c.named_judges] + (["pairwise_judge"] if c.pairwise_judge else [])
    if named and c.eval_steps is None:
        raise ConfigError(f"{named[0]}: needs eval_steps (a judge scores the held-out evaluations only)")
    if c.pairwise_judge is not None:
        module_name, sep, name = c.pairwise_judge.partition(":")
        if not (sep and module_name and name.isidentifier()):
            raise ConfigError(f"pairwise_judge: expected 'module:name' of a pairwise judge, got {c.pairwise_judge!r}")
    if c.judge_weights is not None:
        judges = len(c.named_judges) or (1 if c.task is not None else 0)  # none named: a built-in task's gold
        if len(c.judge_weights) != judges:
            specs = ", ".join(spec for _, spec in c.named_judges) or ("the task's gold" if judges else "none")
            raise ConfigError(f"judge_weights: {len(c.judge_weights)} weights for {judges} judges ({specs})")
