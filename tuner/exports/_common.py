"""What every export shares: the mapping-table shape, the engine that reads a table, the layout of flags and
comments, and what a ppo-tune config means in the terms other trainers count in (prompts, optimizer steps).

A target is data (:class:`Target`): which of our fields becomes which of its keys, how a value converts where it is
not ours as is, why the target lacks a field, and which fields another field's key carries. :func:`export` walks
every PPOConfig field against it, so no field is dropped silently: a field is a setting, a ``# name=value: why``
comment, carried by another field's setting, unused by ppo-tune itself in this config (a comment when it was set), or
one of :data:`NOT_TRAINING` (where ppo-tune writes and how it evaluates, which change nothing that is trained).
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ppo_core.config.estimator_traits import critic_only_fields, estimator_fields, readers
from ppo_core.config.ppo_config import PPOConfig, settable_fields
from ppo_core.config.schedules import shown_schedule
from ppo_core.models.paths import is_function_spec

Why = str | Callable[[PPOConfig], str | None]
Layout = Literal["trl", "openrlhf", "hydra"]


@dataclass(frozen=True)
class Lacks:
    """A converter's answer where the target cannot express this config's value: it becomes a comment."""

    why: str


@dataclass(frozen=True)
class Differs:
    """A converter's answer where the target gets a setting, but counts or means it differently: the setting and a
    comment saying how."""

    value: Any
    why: str


# Fields that change nothing that is trained: where ppo-tune writes and caches, and its held-out evaluation. A target
# that has the same setting may still map one (TRL's output_dir, report_to); the others leave them out unsaid.
NOT_TRAINING = {
    "output_dir": "where ppo-tune wrote the run",
    "report_to": "ppo-tune's trackers",
    "save_steps": "ppo-tune's checkpoints, to resume an interrupted run",
    "save_total_limit": "ppo-tune's checkpoints, to resume an interrupted run",
    "resume_from_checkpoint": "the ppo-tune checkpoint a run continued from",
    "task_cache_dir": "where ppo-tune caches its built-in tasks",
    "num_sample_generations": "ppo-tune's sample log",
    "num_eval_prompts": "ppo-tune's held-out evaluation",
    "eval_steps": "ppo-tune's held-out evaluation",
    "num_eval_samples": "ppo-tune's held-out evaluation",
    "eval_on_start": "ppo-tune's held-out evaluation",
    "judge_model_path": "ppo-tune's held-out judge, which never trains",
    "judge_funcs": "ppo-tune's held-out judges, which never train",
    "judge_weights": "ppo-tune's held-out judges, which never train",
    "pairwise_judge": "ppo-tune's held-out pairwise judge, which never trains",
    "dataset_test_split": "held-out prompts, for evaluation only",
    "local_rollout_forward_batch_size": "rows per no-grad forward pass: memory and speed, not results",
    "fused_logits_head": "how ppo_core computes the update's log-probs on a GPU: speed, not results",
    "static_decode": "how ppo_core decodes on a GPU (the same distribution): speed, not results",
    "bf16_generation_copy": "which copy of the policy samples on a GPU in ppo_core: speed, not the trained math",
    "sampling_dtype": "which copy of the policy samples on a CPU in ppo_core: speed, not the trained math",
    "fused_decode": "how ppo_core's CPU sampling copy computes its logits (the same forward): speed, not results",
    "update_forward_batch_size": "rows per forward pass in ppo_core's update (the same gradient): speed, not results",
    "shared_prompt_forwards": "whether ppo_core runs a group's prompt once (the same gradient): speed, not results",
    "eval_logprobs_from_sampling": "how ppo_core's CPU evaluation reads log-probs (the same KL up to rounding): speed",
}

# Fields only a value network (and GAE's use of it) reads, from the one table of estimators; the LoRA fields (TRL
# ModelConfig's).
CRITIC_FIELDS = critic_only_fields()
LORA_FIELDS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_target_parameters",
               "lora_modules_to_save", "lora_task_type", "use_rslora", "use_dora")

TASK_WHY = "ppo-tune's built-in offline task: its SFT model, proxy reward model and prompts are in ppo-tune's cache"


@dataclass(frozen=True)
class Target:
    """One trainer's mapping, as data. ``keys``: our field -> the target's key (a tuple where one field sets several;
    its converter then returns a tuple, None for a key to leave unset). ``values``: converters for the fields whose
    value is not ours as is. ``why_not``: why the target lacks a field (a function of the config where that depends
    on it; None: nothing to say). ``same``: values of ours that behave as the target does unasked. ``carried``: fields
    whose value reaches the target through another field's key, and which. ``differences``: where the target, so
    set, still computes something else than the trial did."""

    name: str
    layout: Layout
    keys: Mapping[str, str | tuple[str, ...]]
    values: Mapping[str, Callable[[PPOConfig], Any]]
    why_not: Mapping[str, Why]
    same: Mapping[str, Any] = field(default_factory=dict)
    carried: Mapping[str, str] = field(default_factory=dict)
    remarks: Callable[[PPOConfig], list[str]] = lambda c: []
    fixed: Callable[[PPOConfig], dict[str, Any]] = lambda c: {}
    # What the target computes differently from the trial, one line each (tuner.exports.computes); [] is exact.
    differences: Callable[[PPOConfig], list[str]] = lambda c: []
    # The ppo_core settings that compute as the target does where it differs from ppo_core's defaults: a study that
    # names the target starts from them (tuner.study.target).
    profile: Mapping[str, Any] = field(default_factory=dict)

    def covers(self) -> set[str]:
        return set(self.keys) | set(self.why_not) | set(self.carried) | set(NOT_TRAINING)


@dataclass
class Export:
    """An export's settings (key, value, the field it came from) and comments (the field named, the line)."""

    settings: list[tuple[str, Any, str]] = field(default_factory=list)
    comments: list[tuple[str, str]] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    def comment(self, name: str, value: Any, why: str) -> None:
        line = f"# {name}={show(value)}: {why}"
        if (name, line) not in self.comments:
            self.comments.append((name, line))

    def render(self, layout: Layout) -> str:
        lines = [line for key, value, _ in self.settings if (line := setting_line(layout, key, value))]
        remarks = [line for _, line in self.comments]
        if self.differences:
            remarks += ["# Not exact: the target computes something else than the trial here:"]
            remarks += [f"#   {line}" for line in self.differences]
        return " \\\n".join(lines) + ("\n" if lines else "") + "".join(f"{line}\n" for line in remarks)


def rendered(target: Target) -> Callable[[dict[str, Any]], str]:
    """The export of a stored config dict to ``target`` as the text ``best --format`` prints: its settings, one a
    line and shell-continued, then a ``#`` comment for each field the target lacks or means differently."""
    return lambda config: export(target, config).render(target.layout)


def resolve(config: dict[str, Any]) -> PPOConfig:
    """The PPOConfig a stored config dict describes, for its derived properties (to_dict's keys are the
    constructor's; keys this version no longer has are left out here and commented by :func:`export`)."""
    fields = settable_fields()
    return PPOConfig(**{name: value for name, value in config.items() if name in fields})


def field_default(name: str) -> Any:
    spec = settable_fields()[name]
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


def shown_value(c: PPOConfig, name: str) -> Any:
    """The value a comment shows: the resolved one where null means "the estimator's default"."""
    if name == "num_generations":
        return c.generations_per_prompt
    if name == "kl_in_reward":
        return c.kl_penalty_in_reward
    if name in SCHEDULE_FIELDS and getattr(c, name):
        return shown_schedule(getattr(c, name))
    return getattr(c, name)


SCHEDULE_FIELDS = {"learning_rate_schedule": "learning rate", "kl_coef_schedule": "KL coefficient"}


def piecewise_schedules(trainer: str) -> dict[str, Why]:
    """The schedules' comments for a trainer whose config takes one learning rate and one KL coefficient for a run:
    the pairs, which no config value of the trainer carries, and what was exported instead."""
    def why(name: str, what: str) -> Why:
        def said(c: PPOConfig) -> str | None:
            schedule = getattr(c, name)
            if not schedule:
                return None
            return (f"{trainer} takes no piecewise schedule as a config value; the {what} exported is the one before "
                    f"update {int(schedule[0][0])}, and ppo-tune put each pair's {what} in force from its update on: "
                    "train in segments to follow it")
        return said

    return {name: why(name, what) for name, what in SCHEDULE_FIELDS.items()}


def unused_fields(c: PPOConfig) -> dict[str, str]:
    """Fields ppo-tune itself ignores in this config, each with the reason: set to anything, they changed nothing."""
    unused: dict[str, str] = {}
    if not c.use_peft:
        unused.update(dict.fromkeys((*LORA_FIELDS, "value_use_peft"), "use_peft is off"))
    critic_only = critic_only_fields()
    for name in estimator_fields():  # ppo_core.config.estimator_traits: what only some estimators read
        only = readers(name) or ()
        if c.advantage_estimator in only:
            continue
        if name in critic_only:
            unused[name] = f"{c.advantage_estimator} trains no value network"
        elif len(only) == 1:
            unused[name] = f"only {only[0]} reads it"
    if c.kl_penalty_in_reward:
        unused.update(dict.fromkeys(("beta", "kl_loss_estimator"), "the KL penalty is in the reward"))
    else:
        unused.update(dict.fromkeys(("kl_coef", "kl_estimator"), "the KL penalty is a loss term"))
    if c.kl_target is None:
        unused["kl_horizon"] = "no kl_target, so no adaptive KL controller"
    if c.task is None:
        unused["task_seed"] = "no built-in task"
    if c.total_episodes is not None:
        unused["num_train_epochs"] = "total_episodes sets the run's length"
    if c.warmup_steps > 0:
        unused["warmup_ratio"] = "warmup_steps overrides it"
    if c.cliprange_low is not None and c.cliprange_high is not None:
        unused["cliprange"] = "cliprange_low and cliprange_high replace it"
    return unused


def export(target: Target, config: dict[str, Any]) -> Export:
    """Every field of ``config`` against ``target``: settings, and a comment for whatever it cannot take."""
    c = resolve(config)
    out = Export()
    unused = unused_fields(c)
    covered = target.covers()
    for name in settable_fields():
        raw = getattr(c, name)
        if name in unused:
            if raw != field_default(name):
                out.comment(name, raw, f"unused by ppo-tune in this config ({unused[name]})")
        elif name in target.keys:
            _map(out, c, name, target)
        elif name in target.why_not:
            text = _why(target, name, c)
            if text:
                out.comment(name, shown_value(c, name), text)
        elif name not in covered and raw != field_default(name):
            out.comment(name, raw, f"ppo-tune's export to {target.name} does not know this field")
    for name, value in config.items():
        if name not in settable_fields():
            out.comment(name, value, "not a field of this ppo-tune version")
    for key, value in target.fixed(c).items():
        out.settings.append((key, value, ""))
    out.comments.extend(("", f"# {remark}") for remark in target.remarks(c))
    out.differences = target.differences(c)
    return out


_UNSET = object()


def _why(target: Target, name: str, c: PPOConfig) -> str | None:
    """The comment a why_not entry makes: a function's answer, or the text unless the value is null or ``same``."""
    why = target.why_not[name]
    if callable(why):
        return why(c)
    raw = getattr(c, name)
    return None if raw is None or target.same.get(name, _UNSET) == raw else why


def _map(out: Export, c: PPOConfig, name: str, target: Target) -> None:
    keys = target.keys[name]
    value = target.values[name](c) if name in target.values else getattr(c, name)
    pairs = zip(keys, value, strict=True) if isinstance(keys, tuple) else [(keys, value)]
    for key, item in pairs:
        if isinstance(item, Lacks):
            out.comment(name, shown_value(c, name), item.why)
        elif isinstance(item, Differs):
            out.settings.append((key, item.value, name))
            out.comment(name, shown_value(c, name), item.why)
        elif item is not None:
            out.settings.append((key, item, name))


# --- layout ---

def show(value: Any) -> str:
    """A value in a comment or a flag: floats exactly (repr), lists space-separated."""
    if isinstance(value, list | tuple):
        return " ".join(show(item) for item in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


_HYDRA_PLAIN = re.compile(r"[\w./:~+@-]+")


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    return text if _HYDRA_PLAIN.fullmatch(text) else "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def setting_line(layout: Layout, key: str, value: Any) -> str | None:
    """One shell-ready line: ``--key value`` (TRL: booleans as True/False; OpenRLHF: a true switch alone, a false one
    left out), or a Hydra ``key=value`` override."""
    if layout == "hydra":
        return shlex.quote(f"{key}={hydra_value(value)}")
    if layout == "openrlhf" and isinstance(value, bool):
        return f"--{key}" if value else None
    items = value if isinstance(value, list | tuple) else [value]
    return " ".join([f"--{key}", *(shlex.quote(show(item)) for item in items)])


# --- what a ppo-tune config means in other trainers' counts (one process: a config does not record how many a
# trial was launched on; every count below scales with it the same way in ppo-tune and in the targets) ---

def rollout_batch(c: PPOConfig) -> int:
    """Completions per rollout batch on one process: one generation, then num_mini_batches x num_ppo_epochs
    optimizer steps."""
    return c.per_device_train_batch_size * c.gradient_accumulation_steps


def optimizer_steps_per_update(c: PPOConfig) -> int:
    return c.num_mini_batches * c.num_ppo_epochs


def updates(c: PPOConfig) -> int | None:
    """PPO updates (rollout batches) total_episodes makes, on one process; None when num_train_epochs sets them."""
    if c.total_episodes is None:
        return None
    return max(1, math.ceil(c.total_episodes / rollout_batch(c)))


def whole_prompt_passes(c: PPOConfig, key: str) -> int | Lacks:
    """num_train_epochs for a target that counts whole passes over the prompts (each pass answers every prompt
    num_generations times, as ppo-tune's does)."""
    if float(c.num_train_epochs).is_integer():
        return int(c.num_train_epochs)
    return Lacks(f"{key} counts whole passes over the prompts, and ppo-tune made {c.num_train_epochs:g}: set "
                 "total_episodes and export again")


def unknown_estimator(c: PPOConfig, target: str) -> Lacks:
    """An estimator of ppo_core's table (ppo_core.config.estimator_traits) that this target's export has no name for
    yet."""
    return Lacks(f"{target}'s export does not know advantage_estimator {c.advantage_estimator} (add it to the "
                 "export's table of estimators)")


def generated_length_of(c: PPOConfig) -> int:
    """Tokens the trial generated per response: its response_length, else its built-in task's, else 53."""
    from ppo_core.tasks.variants import generated_length  # the tasks' code, loaded only when an export is made

    return generated_length(c.response_length, c.task, c.task_seed)


def per_token_kl_target(c: PPOConfig, key: str) -> Differs:
    """kl_target is the KL summed over a response (objective/kl); verl and OpenRLHF steer the per-token mean."""
    assert c.kl_target is not None
    length = generated_length_of(c)
    return Differs(c.kl_target / length,
                   f"ppo-tune's target is the KL summed over a response; {key} is the per-token mean, set here to "
                   f"kl_target / response_length ({length}): raise it if responses end early")


def scheduler_with_warmup(c: PPOConfig) -> str:
    """ppo-tune's constant schedule honours warmup, as transformers' constant_with_warmup does."""
    if c.lr_scheduler_type == "constant" and (c.warmup_steps or c.warmup_ratio):
        return "constant_with_warmup"
    return c.lr_scheduler_type


def schedule_remark(c: PPOConfig, target: str) -> list[str]:
    """ppo-tune steps its learning-rate schedule once per PPO update; these targets once per optimizer step."""
    steps = optimizer_steps_per_update(c)
    if c.lr_scheduler_type == "constant" or steps == 1:
        return []
    return [f"lr_scheduler_type={c.lr_scheduler_type}: ppo-tune stepped it once per PPO update ({steps} optimizer "
            f"steps), {target} every optimizer step: the same curve, smooth instead of in stairs"]


def actor_and_critic(value: Callable[[PPOConfig], Any]) -> Callable[[PPOConfig], tuple[Any, Any]]:
    """A converter for an (actor key, critic key) pair: the critic's setting only where the estimator trains one."""
    def pair(c: PPOConfig) -> tuple[Any, Any]:
        actor = value(c)
        return actor, actor if c.uses_critic else None

    return pair


def stops_at_eos(trainer: str) -> Why:
    """stop_token's comment for a trainer that always stops at the tokenizer's EOS."""
    return lambda c: None if c.stop_token == "eos" \
        else f"{trainer} stops at the tokenizer's EOS; ppo-tune generated to response_length"


def lora_lacks(trainer: str) -> dict[str, str]:
    """The LoRA fields of TRL's ModelConfig that a DeepSpeed/FSDP trainer's LoRA (rank, alpha, modules) lacks."""
    return {"lora_target_parameters": f"{trainer}'s LoRA targets modules only",
            "lora_modules_to_save": f"{trainer}'s LoRA has no modules_to_save",
            "lora_task_type": f"{trainer}'s LoRA is a causal-LM one",
            "use_rslora": f"{trainer}'s LoRA has no rank-stabilised scaling",
            "use_dora": f"{trainer}'s LoRA has no DoRA"}


def one_process_remark(c: PPOConfig, prompts: str, per_prompt: str) -> str:
    """Where a target counts global prompts: the counts exported are those of one process."""
    return (f"batch sizes of a one-process run: {prompts} {rollout_batch(c) // c.generations_per_prompt} prompts x "
            f"{per_prompt} {c.generations_per_prompt} = the {rollout_batch(c)}-completion rollout batch; a trial "
            "launched on N processes had N times as many prompts per step")


def is_model(spec: str | None) -> bool:
    return spec is not None and not is_function_spec(spec)


def dotted(spec: str) -> str:
    """``module:function`` as a dotted import path (TRL's scripts' spelling)."""
    return spec.replace(":", ".")

