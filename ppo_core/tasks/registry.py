"""Named task variants, and the on-disk cache that builds each one once and shares it.

A task lives in ``<cache_dir>/tasks/<name>-<hash12>/``, the hash covering every build
parameter, so all trials (and all tuner worker processes) start from the same SFT
policy and reward model. Builds go to a temporary directory that is renamed into place
only when complete, under a file lock, so concurrent callers wait for one build instead
of racing or reading half-written files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock
from safetensors import safe_open

from ppo_core.errors import first_line
from ppo_core.models.cache_root import default_cache_dir
from ppo_core.models.loading import UNREADABLE
from ppo_core.models.paths import resolve_model
from ppo_core.tasks.build import POLICY_DIR, REWARD_MODEL_DIR
from ppo_core.tasks.builtin_task import BuiltinTask
from ppo_core.tasks.cache_dirs import BUILD_INFO, is_built, task_dir
from ppo_core.tasks.fortunes.build import build_text_task
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.fortunes.probe_proxy import proxy_text
from ppo_core.tasks.fortunes.proxy import proxy_recipe
from ppo_core.tasks.fortunes.task_data import text_task_data
from ppo_core.tasks.graph.build import build_task, task_graph, task_prompts
from ppo_core.tasks.graph.gold import GoldScorer
from ppo_core.tasks.reward_model import format_for_reward
from ppo_core.tasks.variants import (
    TASK_NAMES,
    VARIANTS,
    AnyTaskParams,
    canonical_task,
    task_params,
    task_params_of,
)

# The variants live in ppo_core.tasks.variants (torch-free, for the config's checks); they are named here too, beside
# the builds, for the callers that read both.
__all__ = ["TASK_NAMES", "VARIANTS", "default_cache_dir", "get_task", "is_built", "task_dir", "task_params",
           "task_params_of"]

logger = logging.getLogger(__name__)

def _is_complete(directory: Path) -> bool:
    return (directory / BUILD_INFO).is_file()


def work_dir(target: Path) -> Path:
    """Where a build keeps what it must not lose when interrupted (a pretrained policy's samples), beside
    ``target``; removed once the build is in place."""
    return target.parent / f"{target.name}.work"


def _build_atomically(name: str, params: AnyTaskParams, target: Path) -> None:
    """Build into a sibling temp dir, then rename it to ``target`` (caller holds the lock)."""
    if target.exists():
        # Not produced by us (renames are atomic): a leftover to replace, not to trust.
        shutil.rmtree(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared and browsed
        logger.info("building task %s into %s (first use only)", name, target)
        info = build_text_task(name, params, tmp, work_dir(target)) if isinstance(params, TextTaskParams) \
            else build_task(name, params, tmp)
        os.rename(tmp, target)
        shutil.rmtree(work_dir(target), ignore_errors=True)
        logger.info("built task %s in %.1f s", name, info["seconds"]["total"])
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def get_task(name: str, cache_dir: str | None = None, seed: int | None = None) -> BuiltinTask:
    """Return the named built-in task, drawn from ``seed`` (None: the variant's own), building and caching it on
    first use.

    Safe to call from several processes at once: one builds, the others wait on the lock
    and then load the same files.
    """
    params = task_params(name, seed)
    target = task_dir(name, cache_dir, seed)
    if not _is_complete(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(target) + ".lock"):
            if not _is_complete(target):
                # Built under the variant's name, whichever of its names asked: its build info says which it is.
                _build_atomically(canonical_task(name), params, target)
    info = check_build(name, target)
    if isinstance(params, TextTaskParams):
        return _text_task(name, params, target, info)
    graph = task_graph(params)
    train_prompts, eval_prompts = task_prompts(params, graph)
    return BuiltinTask(
        name=name,
        policy_path=str(target / POLICY_DIR),
        reward_model_path=str(target / REWARD_MODEL_DIR),
        train_prompts=train_prompts,
        eval_prompts=eval_prompts,
        gold_score=GoldScorer(graph),
        reward_text=format_for_reward,
        response_length=params.response_length,
        info=info,
    )


def _read_back(path: Path) -> Any:
    """``path`` read back: a JSON file parsed, weights opened as far as their header (None)."""
    if path.suffix == ".json":
        return json.loads(path.read_text())
    with safe_open(str(path), framework="pt") as opened:
        opened.keys()
    return None


def check_build(name: str, target: Path) -> dict[str, Any]:
    """The build info of the cached task at ``target``, once every JSON file and weights header of it reads back;
    ``ValueError`` naming the first damaged file and the remedy otherwise (a cache is derived, so deleting it loses
    nothing but the build's time)."""
    others = [p for p in sorted(target.rglob("*.json")) if p != target / BUILD_INFO]
    read: list[Any] = []
    for path in [target / BUILD_INFO, *others, *sorted(target.rglob("*.safetensors"))]:
        try:
            read.append(_read_back(path))
        except UNREADABLE as error:
            raise ValueError(f"{name}'s cached build is damaged ({path.relative_to(target)}: {first_line(error)}); "
                             f"delete {target} and it is built again on first use") from None
    info: dict[str, Any] = read[0]
    return info


def _text_task(name: str, params: TextTaskParams, target: Path, info: dict[str, Any]) -> BuiltinTask:
    """The built text task: its models from ``target``, its prompts and gold derived again from the corpus."""
    data = text_task_data(params)
    # A task whose proxy learned on a pretrained policy's samples trains that policy; the others their companion.
    policy = target / POLICY_DIR if params.pair_policy is None else resolve_model(params.pair_policy, "task")
    return BuiltinTask(
        name=name,
        policy_path=str(policy),
        reward_model_path=str(target / REWARD_MODEL_DIR),
        train_prompts=data.split.train_prompts,
        eval_prompts=data.split.heldout_prompts,
        gold_score=data.gold,
        # The text the proxy was trained on: the prompt and response joined (ppo_core.tasks.reward_model.encode_pairs),
        # or a probe's response alone.
        reward_text=format_for_reward if proxy_recipe(params.proxy_version).reads_prompt else proxy_text,
        response_length=params.response_length,
        info=info,
    )
