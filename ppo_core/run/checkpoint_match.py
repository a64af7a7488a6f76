"""Whether a checkpoint may be resumed by this run: the same code, the same math, the same processes. A resume that
passes continues the run that wrote the checkpoint, update for update, as if it had never stopped; one that cannot
is refused in one line naming the first difference, before anything is loaded into the models. No torch.

What a checkpoint records and a resume compares:

- ``format``: the layout of its files (:data:`FORMAT`), which this version must read;
- ``versions``: ppo-tune's and those of the libraries whose kernels and sampling make the run's numbers (torch,
  transformers, peft, accelerate), each to equal this process's: another version may compute the same update with
  other rounding, and a resumed run would then not be the run that stopped;
- ``config``: every settable field of the run's config as it ran (its precision resolved), all but
  :data:`RESUME_MAY_CHANGE` to equal, and the schedules of :data:`SCHEDULES` to give the same value at every update
  up to the checkpoint's (a population-based training's child continues its parent with other values after it);
- ``run``: what the config alone does not fix: the run's length in updates, the processes, the dtype the rollout
  sampled in (``sampling_dtype: auto`` is measured per machine), and a digest of the training prompts, whose order
  the checkpoint continues.

Example::

    check_resumable(read_manifest(path), path, current_record(config.to_dict(), run_facts),
                    {"learning_rate_schedule": config.learning_rate, "kl_coef_schedule": config.kl_coefficient})
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ppo_core.config.schedules import first_difference, value_at
from ppo_core.run.checkpoint_files import CheckpointError

FORMAT = 1
"""The layout of a checkpoint's files; a change that an older reader cannot read raises it."""

VERSIONED = ("ppo-tune", "torch", "transformers", "peft", "accelerate")

RESUME_MAY_CHANGE = frozenset({
    # where the run writes, reads and caches
    "output_dir", "report_to", "task_cache_dir", "save_steps", "save_total_limit", "resume_from_checkpoint",
    # what it records beside training: samples and held-out evaluations draw from streams of their own
    "num_sample_generations", "num_eval_prompts", "eval_steps", "num_eval_samples", "eval_on_start",
    "dataset_test_split", "eval_logprobs_from_sampling", "judge_model_path", "judge_funcs", "judge_weights",
    "pairwise_judge",
    # how fast and in how much memory it computes the same numbers (up to float rounding)
    "local_rollout_forward_batch_size", "update_forward_batch_size", "shared_prompt_forwards", "fused_decode",
    "fused_logits_head", "static_decode", "gradient_checkpointing",
})
"""Config fields a resumed run may set otherwise than the run that wrote the checkpoint: none of them changes what
is trained (a smaller forward batch after running out of memory, another place to write, evaluations more often)."""


SCHEDULES = ("learning_rate_schedule", "kl_coef_schedule")
"""Config fields a resumed run may set otherwise after the checkpoint's update only: piecewise schedules
(ppo_core.config.schedules), compared by the values they put in force up to it."""


def code_versions() -> dict[str, str]:
    """The installed version of each of :data:`VERSIONED` ("unknown" where one is not installed as a package)."""
    versions: dict[str, str] = {}
    for name in VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "unknown"
    return versions


def as_json(value: Any) -> Any:
    """``value`` as JSON gives it back: what a manifest holds, so that a value is compared with its like."""
    return json.loads(json.dumps(value))


def current_record(config: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint written now records of the run, and a resume compares: see the module's docstring."""
    return {"format": FORMAT, "versions": code_versions(), "config": as_json(config), "run": as_json(run)}


def check_resumable(manifest: dict[str, Any], checkpoint: Path, current: dict[str, Any],
                    schedule_defaults: Mapping[str, float]) -> None:
    """Raise CheckpointError, one line naming the checkpoint and the first difference, unless the checkpoint whose
    manifest is ``manifest`` was written by this code for this run's math (``current``: :func:`current_record`).
    ``schedule_defaults``: the value in force before each of :data:`SCHEDULES`'s first pair, in this run's config
    (learning_rate, the KL coefficient in force; the checkpoint's are the same, or the fields differ)."""
    where = f"checkpoint {str(checkpoint)!r}"
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{where} has file format {manifest.get('format')!r}; this ppo-tune reads format "
                              f"{FORMAT}")
    for name, version in current["versions"].items():
        theirs = manifest.get("versions", {}).get(name)
        if theirs != version:
            raise CheckpointError(f"{where} was written with {name} {theirs}, this is {name} {version}: resumed, the "
                                  "run would not continue as it ran; resume it with that version")
    # The fields a user sets first; then what follows from them and the machine.
    recorded = manifest.get("config", {})
    differences = _differences(recorded, current["config"], ignored=RESUME_MAY_CHANGE | set(SCHEDULES))
    differences += _schedule_differences(recorded, current["config"], schedule_defaults, int(manifest["update"]))
    differences += _differences(manifest.get("run", {}), current["run"], ignored=frozenset())
    if differences:
        more = f" (and {len(differences) - 1} more: {', '.join(name for name, _ in differences[1:4])}" \
               f"{', ...' if len(differences) > 4 else ''})" if len(differences) > 1 else ""
        raise CheckpointError(f"{where} was made by another config: {differences[0][1]}{more}; resume it with the "
                              "config that made it")


def _differences(recorded: dict[str, Any], current: dict[str, Any],
                 ignored: frozenset[str]) -> list[tuple[str, str]]:
    """Each name whose value differs between ``recorded`` and ``current`` (absent from one: missing), with a
    phrase saying how."""
    found = []
    for name in sorted((set(recorded) | set(current)) - ignored):
        there, here = recorded.get(name, "missing"), current.get(name, "missing")
        if there != here:
            found.append((name, f"{name} is {_shown(there)} there, {_shown(here)} here"))
    return found


def _schedule_differences(recorded: dict[str, Any], current: dict[str, Any], defaults: Mapping[str, float],
                          update: int) -> list[tuple[str, str]]:
    """Each schedule whose values in force differ at an update up to the checkpoint's ``update``, with a phrase
    naming the first such update."""
    found = []
    for name in SCHEDULES:
        there, here, default = recorded.get(name), current.get(name), defaults[name]
        differs_at = first_difference(there, here, default, update)
        if differs_at is not None:
            found.append((name, f"{name} gives {value_at(there, default, differs_at)!r} there, "
                                f"{value_at(here, default, differs_at)!r} here from update {differs_at}, at or "
                                f"before the checkpoint's update {update}"))
    return found


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else f"{text[:45]}...{text[-10:]}"


__all__ = ["FORMAT", "RESUME_MAY_CHANGE", "SCHEDULES", "VERSIONED", "check_resumable", "code_versions",
           "current_record"]
