"""Whether a model path can be loaded at all, checked before anything is made, and where it loads from: torch-free,
so that a command that only names a model (``ppo-tune best --policy-model``) checks it as a run does without loading
torch.

A model path is a model directory, a hub name, or a GGUF: a ``*.gguf`` file, or the name of a packaged one
(``smollm2-135m-instruct``, :data:`ppo_core.models.gguf.PACKAGED`). A GGUF loads from its dequantised copy in the
cache (:mod:`ppo_core.models.gguf`), which :func:`resolve_model` returns and builds on first use.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from ppo_core.config.checks import ConfigError
from ppo_core.models.gguf import cached_model_dir, gguf_file

if TYPE_CHECKING:
    from ppo_core.config.ppo_config import PPOConfig


def require_model(path: str, field_name: str) -> None:
    """Refuse a path that can only name a local directory (absolute, relative with ``.`` or ``~``, or deeper than a
    hub's ``owner/name``) when nothing is there: transformers would call it a malformed hub repo id instead. A GGUF
    must be there and start as a GGUF file does (its contents are read when it is resolved)."""
    if gguf_file(path, field_name) is not None:
        return
    local = path.startswith(("/", ".", "~")) or path.count("/") > 1 or "\\" in path
    if local and not Path(path).exists():
        raise ConfigError(f"{field_name}: no model at {path!r}")


def resolve_model(path: str, field_name: str) -> str:
    """What transformers loads for ``path``: the path itself, or for a GGUF the directory of its dequantised copy,
    built into the cache on first use (loading torch then). Raises ConfigError naming the field, as
    :func:`require_model` does, and for a GGUF file that cannot be read."""
    source = gguf_file(path, field_name)
    if source is None:
        require_model(path, field_name)
        return path
    return str(cached_model_dir(source, field_name))


def is_function_spec(spec: str) -> bool:
    """``module:function`` rather than a path or hub name (a Windows drive letter is not a module)."""
    module_name, sep, function_name = spec.partition(":")
    return bool(sep) and module_name.replace(".", "").replace("_", "").isalnum() and function_name.isidentifier() \
        and not Path(spec).exists() and len(module_name) > 1


def task_model_problem(name: str) -> str | None:
    """Why a run of this known task cannot start here, in one line: its pair policy is a packaged model that is not
    installed (or its file is missing); None when it can, or when the task samples no policy to build."""
    # Imported here: the task catalogue reads the fortunes package, which a command that only names a model skips.
    from ppo_core.tasks.fortunes.params import TextTaskParams
    from ppo_core.tasks.variants import VARIANTS, canonical_task

    params = VARIANTS.get(canonical_task(name))
    if isinstance(params, TextTaskParams) and params.pair_policy is not None:
        try:
            gguf_file(params.pair_policy, f"task {name!r}")
        except ConfigError as error:
            return str(error)
    return None


def resolve_models(config: PPOConfig) -> PPOConfig:
    """``config`` with every model path it names checked (there, where it can only be a local directory or file)
    and each GGUF replaced by its dequantised copy in the cache, built on first use (:mod:`ppo_core.models.gguf`):
    everything that loads a model after this sees an ordinary model directory. A run calls this before it creates
    anything or builds its task."""
    def model(field_name: str, path: str | None) -> str | None:
        return None if path is None else resolve_model(path, field_name)

    def reward(field_name: str, spec: str) -> str:
        return spec if is_function_spec(spec) else resolve_model(spec, field_name)

    if config.task is not None:
        problem = task_model_problem(config.task)
        if problem is not None:
            raise ConfigError(problem)
    return dataclasses.replace(
        config,
        sft_model_path=model("sft_model_path", config.sft_model_path),
        value_model_path=model("value_model_path", config.value_model_path),
        reward_model_path=reward("reward_model_path", config.reward_model_path) if config.reward_model_path
        else config.reward_model_path,
        reward_funcs=None if config.reward_funcs is None
        else [reward("reward_funcs", spec) for spec in config.reward_funcs],
        judge_model_path=reward("judge_model_path", config.judge_model_path) if config.judge_model_path
        else config.judge_model_path,
        judge_funcs=None if config.judge_funcs is None
        else [reward("judge_funcs", spec) for spec in config.judge_funcs],
    )
