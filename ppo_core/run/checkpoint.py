"""A run's state at the end of an update, saved so that a later process continues the same run: resumed, it makes
the updates the run would have made had it never stopped, metric for metric (on a CPU with the same threads).

A checkpoint holds what the next update reads and the models do not bring back when they load:

- ``policy.pt``: the policy's trained weights (under use_peft its LoRA adapter alone: the base loads from its path);
- ``value.pt``: the value network's trained weights (its adapter or trunk, and its head), where the estimator has one;
- ``optimizers.pt``: each optimizer's state (AdamW's moments and step) and each learning-rate scheduler's;
- ``state.pt``: the KL controller's coefficient (the adaptive controller's moving beta), the episode count, the
  data order (the prompt sampler's generator and what is left of its current pass over the prompts, and the
  mini-batch shuffle's generator), and every random stream the rollout draws from (Python's, NumPy's, torch's CPU
  and CUDA ones), one set per process.

Nothing else carries from one update to the next: held-out evaluations and sample recordings draw from streams
seeded by the update they are made at, the reference is frozen, and the copies the rollout samples from are
refreshed from the restored policy. Files, atomicity and garbage collection: ``ppo_core.run.checkpoint_files``;
what a resume compares: ``ppo_core.run.checkpoint_match``.

Example::

    save_checkpoint(trainer, update)                    # after update ``update``'s metrics are written
    start = restore_checkpoint(trainer, Path("runs/a/checkpoints/checkpoint-12"))  # 12: continue with update 13
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from torch.optim.lr_scheduler import LRScheduler

from ppo_core.algorithm.kl import AdaptiveKLController, FixedKLController
from ppo_core.algorithm.update import Optimisation
from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.errors import first_line
from ppo_core.rollout.generation_copy import GenerationCopy
from ppo_core.rollout.sampling_copy import SamplingCopy
from ppo_core.run.checkpoint_files import (
    CheckpointError,
    checkpoints_dir,
    read_manifest,
    remove_older,
    verify_files,
    write_checkpoint,
    write_file,
)
from ppo_core.run.checkpoint_match import check_resumable, current_record
from ppo_core.run.distributed import ProcessGroup
from ppo_core.run.evaluation import evaluation_interval
from ppo_core.setup.run_setup import RunSetup

WEIGHTS = {"policy": "policy.pt", "value": "value.pt"}
OPTIMIZERS = "optimizers.pt"
STATE = "state.pt"


class Resumable(Protocol):
    """What a checkpoint reads from a trainer and writes back: :class:`ppo_core.run.trainer.PPOTrainer`'s attributes
    of these names."""

    episode: int

    @property
    def config(self) -> PPOConfig: ...
    @property
    def accelerator(self) -> Accelerator: ...
    @property
    def group(self) -> ProcessGroup: ...
    @property
    def setup(self) -> RunSetup: ...
    @property
    def num_updates(self) -> int: ...
    @property
    def optimisation(self) -> Optimisation: ...
    @property
    def schedulers(self) -> Sequence[LRScheduler]: ...
    @property
    def kl_controller(self) -> FixedKLController | AdaptiveKLController: ...
    @property
    def prompt_generator(self) -> torch.Generator: ...
    @property
    def shuffle_generator(self) -> torch.Generator: ...
    @property
    def prompt_order(self) -> list[int]: ...
    @property
    def generation_copy(self) -> GenerationCopy | None: ...
    @property
    def sampling_copy(self) -> SamplingCopy | None: ...


def save_interval(config: PPOConfig, num_updates: int) -> int | None:
    """PPO updates between checkpoints: TrainingArguments' rule for ``save_steps``, the one ``eval_steps`` follows
    (:func:`ppo_core.run.evaluation.evaluation_interval`); None without save_steps. ConfigError, before the run
    starts, where there is no output_dir to write them to."""
    if config.save_steps is not None and config.output_dir is None:
        raise ConfigError("save_steps: needs output_dir, where the checkpoints are written")
    return evaluation_interval(config.save_steps, num_updates)


def is_save_update(update: int, num_updates: int, interval: int | None) -> bool:
    """Whether a checkpoint follows update u of N: u mod interval = 0, or u = N (TrainingArguments saves at the
    end too: the state a later segment of a schedule would continue from)."""
    return interval is not None and (update % interval == 0 or update == num_updates)


def save_checkpoint(trainer: Resumable, update: int) -> Path | None:
    """Write the state after ``update`` to ``<output_dir>/checkpoints/checkpoint-<update>`` and remove the
    checkpoints past ``save_total_limit``; where it went (None on the processes other than the main one, which hand
    it their random streams). RunFailure when it cannot be written (a full disk)."""
    streams = gather_object([random_streams()]) if trainer.group.world_size > 1 else [random_streams()]
    if not trainer.group.is_main:
        return None
    directory = checkpoints_dir(trainer.config.output_dir or ".")  # save_interval refuses save_steps without it
    manifest = {"update": update, **_record(trainer)}
    path = write_checkpoint(directory, update, lambda staging: _write_parts(trainer, staging, streams), manifest)
    remove_older(directory, update, trainer.config.save_total_limit)
    return path


def restore_checkpoint(trainer: Resumable, path: Path) -> int:
    """Load the checkpoint at ``path`` into ``trainer``, after checking that it is whole and that this run may
    continue it (:func:`ppo_core.run.checkpoint_match.check_resumable`); the update it was written after.
    CheckpointError (one line) when it is damaged or was made by another config or version."""
    manifest = read_manifest(path)
    config = trainer.config
    check_resumable(manifest, path, _record(trainer),
                    {"learning_rate_schedule": config.learning_rate, "kl_coef_schedule": config.kl_coefficient})
    verify_files(path, manifest)
    models = _trained_models(trainer)
    for name, model in models.items():
        _load_weights(model, _loaded(path, WEIGHTS[name]), path, WEIGHTS[name])
    optimizers = _loaded(path, OPTIMIZERS)
    try:
        for optimizer, state in zip(trainer.optimisation.optimizers, optimizers["optimizers"], strict=True):
            optimizer.load_state_dict(state)
        for scheduler, state in zip(trainer.schedulers, optimizers["schedulers"], strict=True):
            scheduler.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError) as error:
        raise CheckpointError(f"checkpoint {str(path)!r} is damaged ({OPTIMIZERS}: {first_line(error)})") from None
    state = _loaded(path, STATE)
    trainer.kl_controller.value = state["kl_coefficient"]
    trainer.episode = state["episode"]
    trainer.prompt_generator.set_state(state["prompt_generator"])
    trainer.shuffle_generator.set_state(state["shuffle_generator"])
    trainer.prompt_order[:] = state["prompt_order"]
    for copy in (trainer.generation_copy, trainer.sampling_copy):  # they sample the policy as it now is
        if copy is not None:
            copy.refresh()
    set_random_streams(state["random_streams"][trainer.group.rank])
    return int(manifest["update"])


def random_streams() -> dict[str, Any]:
    """This process's random streams: Python's, NumPy's global one, torch's CPU generator and each CUDA device's."""
    state = cast(tuple[str, "np.ndarray[Any, Any]", int, int, float], np.random.get_state(legacy=True))
    kind, keys, position, has_gauss, cached = state
    return {"python": random.getstate(), "numpy": [kind, keys.tolist(), position, has_gauss, cached],
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_random_streams(streams: dict[str, Any]) -> None:
    """Put back what :func:`random_streams` returned."""
    random.setstate(streams["python"])
    kind, keys, position, has_gauss, cached = streams["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), position, has_gauss, cached))
    torch.set_rng_state(streams["torch"])
    if streams["cuda"]:
        torch.cuda.set_rng_state_all(streams["cuda"])


def _record(trainer: Resumable) -> dict[str, Any]:
    """What the checkpoint records of the run, and a resume compares (``ppo_core.run.checkpoint_match``)."""
    texts = json.dumps(list(trainer.setup.train_prompts.texts), default=str).encode()
    return current_record(trainer.config.to_dict(), {
        "num_updates": trainer.num_updates,
        "world_size": trainer.group.world_size,
        "sampling_dtype": str(_sampling_dtype(trainer)).removeprefix("torch."),
        "mixed_precision": str(trainer.accelerator.mixed_precision),
        "train_prompts_sha256": hashlib.sha256(texts).hexdigest(),
    })


def _sampling_dtype(trainer: Resumable) -> torch.dtype:
    """The dtype the rollout samples in: its copy's, where the run keeps one, else the policy's."""
    for copy in (trainer.generation_copy, trainer.sampling_copy):
        if copy is not None:
            return copy.model.dtype
    return trainer.setup.models.policy.dtype


def _trained_models(trainer: Resumable) -> dict[str, torch.nn.Module]:
    models: dict[str, torch.nn.Module] = {"policy": trainer.setup.models.policy}
    if trainer.setup.models.value_model is not None:
        models["value"] = trainer.setup.models.value_model
    return models


def _trained_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights training changes (a LoRA's base is frozen, and loads from its path again)."""
    return {name: parameter.detach().cpu() for name, parameter in model.named_parameters() if parameter.requires_grad}


def _write_parts(trainer: Resumable, directory: Path, streams: list[dict[str, Any]]) -> None:
    for name, model in _trained_models(trainer).items():
        write_file(directory / WEIGHTS[name], functools.partial(_save, _trained_weights(model)))
    write_file(directory / OPTIMIZERS, lambda file: torch.save({
        "optimizers": [optimizer.state_dict() for optimizer in trainer.optimisation.optimizers],
        "schedulers": [scheduler.state_dict() for scheduler in trainer.schedulers],
    }, file))
    write_file(directory / STATE, lambda file: torch.save({
        "kl_coefficient": trainer.kl_controller.value,
        "episode": trainer.episode,
        "prompt_generator": trainer.prompt_generator.get_state(),
        "shuffle_generator": trainer.shuffle_generator.get_state(),
        "prompt_order": list(trainer.prompt_order),
        "random_streams": streams,
    }, file))


def _save(obj: Any, file: Any) -> None:
    torch.save(obj, file)


def _loaded(path: Path, name: str) -> Any:
    """One of the checkpoint's files, read as plain tensors and containers (``weights_only``: no code runs)."""
    try:
        return torch.load(path / name, map_location="cpu", weights_only=True)
    except Exception as error:  # torch's reader raises several types for a file it cannot read
        raise CheckpointError(f"checkpoint {str(path)!r} is damaged ({name}: {first_line(error)})") from None


@torch.no_grad()
def _load_weights(model: torch.nn.Module, saved: dict[str, torch.Tensor], path: Path, name: str) -> None:
    """Copy ``saved`` into the model's trained weights, which must be the same names and shapes."""
    weights = {key: parameter for key, parameter in model.named_parameters() if parameter.requires_grad}
    wrong = sorted(set(weights) ^ set(saved)) or \
        sorted(key for key, parameter in weights.items() if parameter.shape != saved[key].shape)
    if wrong:
        raise CheckpointError(f"checkpoint {str(path)!r} is damaged ({name} holds other weights than this run "
                              f"trains: {wrong[0]})")
    for key, parameter in weights.items():
        parameter.copy_(saved[key])


__all__ = ["Resumable", "is_save_update", "random_streams", "restore_checkpoint", "save_checkpoint",
           "save_interval", "set_random_streams"]
