"""Small real studies on the built-in task, built by the tuner's own code, for the dashboard's tests and screenshots.

Three studies in one SQLite file, each run as ``ppo-tune run <file>`` runs a study file (the same YAML parsed by
``tuner.study.study_file``, its trials run by ``tuner.run.worker.run_worker``, each in a process of its own):

- ``heldout``: PPO with GAE on ``task: shortest_path`` with held-out evaluations (``eval/kl``, ``eval/score``,
  ``eval/gold_score``), a KL budget as a constraint, one trial under the adaptive KL controller and two the KL
  guard prunes (a learning rate far too high, and one high enough to cross the threshold at the last update); then
  ``ppo-tune validate``'s runs of its two best configurations on two fresh seeds each, in ``heldout:validation``.
- ``estimators``: ``advantage_estimator`` searched over gae, grpo, rloo and reinforce_pp_baseline, one queued trial
  each (as ``studies/estimators.yaml`` starts) and one the sampler draws, whose estimator another trial shares.
- ``custom_reward``: the task's SFT policy and prompts brought as one's own (``task: null``), scored by a reward
  function (:func:`reaches_goal`) instead of the task's reward model: a study with no gold score, its trials in
  TRL's own GRPOTrainer (``trainer: trl-grpo``): what the dashboard shows of a TRL study.

The trials are tiny (8 updates of 16 responses) so that the set builds in well under a minute on 2 cores, plus the
task's own first build (about 20 s, cached under ``$PPO_TUNE_CACHE/tasks``). The built set is cached too, in
``$PPO_TUNE_CACHE/real_studies/<key>/``; the key hashes the specs below and the source that trains and stores
trials (``ppo_core``, ``tuner``, this file), so a change to either builds it again, and a test session builds it at
most once.

Usage::

    python -m tools.real_studies              # build (or reuse) the cached set; prints its storage URL
    python -m tools.real_studies --out DIR    # build a fresh set into DIR/real.db
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TASK = "shortest_path"
DB_NAME = "real.db"
COMPLETE = "complete.json"  # written last: its presence marks a finished build
HELDOUT, ESTIMATORS, CUSTOM_REWARD = "heldout", "estimators", "custom_reward"
# What the cache key covers besides the specs: the code that trains a trial and writes it to the study.
SOURCES = ("ppo_core", "tuner", "tools/real_studies.py")

# Every study's runs: 8 PPO updates of 16 responses, one epoch each, sample generations for 4 prompts every 2
# updates, and a held-out evaluation (the same 4 prompts x 4 responses) at the middle and at the end.
TINY_RUN: dict[str, Any] = {
    "total_episodes": 128,
    "per_device_train_batch_size": 16,
    "num_ppo_epochs": 1,
    "lr_scheduler_type": "constant",
    "temperature": 0.7,
    "num_sample_generations": 3,
    "num_eval_prompts": 4,
    "eval_steps": 0.5,
    "num_eval_samples": 4,
    "seed": 0,
}
KL_THRESHOLD = 3.0
GOLD = [{"metric": "eval/gold_score", "direction": "maximize", "reduce": "mean_last_k", "k": 2}]
KL_BUDGET = [{"metric": "eval/kl", "reduce": "last", "max": 5.0}]
LEARNING_RATE = {"type": "float", "low": 1e-6, "high": 5e-2, "log": True}
VALIDATION_TOP_K, VALIDATION_SEEDS = 2, 2  # ppo-tune validate heldout --top-k 2 --seeds 2
# One thread per trial: for models this small a second thread costs more than it gains (measured on 2 busy cores:
# the set took 29 s wall and 31 s CPU with one thread, 35 s wall and 47 s CPU with torch's two).
THREADS = 1


@dataclass(frozen=True)
class RealStudy:
    """One study of the set: its study file's mapping, and ``validate``'s (top_k, seeds) when it is validated."""

    definition: dict[str, Any]
    validate: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        return str(self.definition["name"])


def _study(name: str, base: dict[str, Any], search_space: dict[str, Any], enqueue: list[Any], n_trials: int,
           objectives: list[dict[str, Any]], **rest: Any) -> dict[str, Any]:
    """A study file's mapping: a seeded random sampler after the queued trials, and a KL guard without prediction
    (the runs are too short to extrapolate)."""
    return {
        "name": name, "n_trials": n_trials, "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"},
        "objectives": objectives, "kl_guard": {"threshold": KL_THRESHOLD, "predict": False},
        "heartbeat_interval": 1, "base": {**TINY_RUN, **base}, "search_space": search_space, "enqueue": enqueue,
        **rest,
    }


SPECS: tuple[RealStudy, ...] = (
    RealStudy(_study(
        HELDOUT, {"task": TASK},
        {"learning_rate": LEARNING_RATE, "kl_control": {"type": "categorical", "choices": ["fixed", "adaptive"]},
         "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
         "kl_target": {"type": "float", "low": 1.0, "high": 4.0}},
        # The second crosses the guard's threshold at its last update; the last blows KL up within two.
        [{"learning_rate": 3e-4, "kl_control": "fixed", "kl_coef": 0.05},
         {"learning_rate": 1e-3, "kl_control": "fixed", "kl_coef": 0.02},
         {"learning_rate": 1e-3, "kl_control": "adaptive", "kl_target": 2.0},
         {"learning_rate": 1e-4, "kl_control": "fixed", "kl_coef": 0.1},
         {"learning_rate": 3e-2, "kl_control": "fixed", "kl_coef": 0.01}],
        5, GOLD, constraints=KL_BUDGET,
    ), validate=(VALIDATION_TOP_K, VALIDATION_SEEDS)),
    RealStudy(_study(
        ESTIMATORS, {"task": TASK},
        {"advantage_estimator": {"type": "categorical", "choices": ["gae", "grpo", "rloo", "reinforce_pp_baseline"]},
         "learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True},
         "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
         "beta": {"type": "float", "low": 0.005, "high": 0.2, "log": True},
         "num_generations": {"type": "categorical", "choices": [2, 4]}},
        [{"advantage_estimator": "gae", "learning_rate": 3e-4, "kl_coef": 0.05},
         {"advantage_estimator": "grpo", "learning_rate": 3e-4, "beta": 0.04, "num_generations": 4},
         {"advantage_estimator": "rloo", "learning_rate": 3e-4, "kl_coef": 0.05, "num_generations": 4},
         {"advantage_estimator": "reinforce_pp_baseline", "learning_rate": 3e-4, "kl_coef": 0.05,
          "num_generations": 4}],
        5, GOLD, constraints=KL_BUDGET,
    )),
    # Every trial in TRL's own GRPOTrainer (trainer: trl-grpo), scored by the reward function.
    RealStudy(_study(
        CUSTOM_REWARD,
        {"task": None, "reward_model_path": "tools.real_studies:reaches_goal", "response_length": 18,
         "advantage_estimator": "grpo", "num_generations": 4},
        {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True},
         "beta": {"type": "float", "low": 0.01, "high": 0.1, "log": True}},
        # Both well inside the KL guard's threshold: this study's health page has no critical sign.
        [{"learning_rate": 3e-4, "beta": 0.04}, {"learning_rate": 5e-4, "beta": 0.04}], 2,
        [{"metric": "objective/scores", "direction": "maximize", "reduce": "mean_last_k", "k": 2}],
        trainer="trl-grpo",
    )),
)


def reaches_goal(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the walk ends at the trip's goal, minus 0.05 a step: a hand-written reward, in TRL GRPOTrainer's
    signature, standing in for the task's reward model."""
    rewards = []
    for prompt, completion in zip(prompts, completions, strict=True):
        goal, steps = str(prompt).split()[-2], str(completion).split()  # "from 3 to 7 :" -> "7"
        rewards.append((1.0 if steps and steps[-1] == goal else 0.0) - 0.05 * len(steps))
    return rewards


def _prompts_dataset(directory: Path) -> Path:
    """The task's training and held-out prompts as a dataset with a train and a test split, saved with
    ``save_to_disk``, as a user who brings their own prompts might (loading it builds no Hugging Face cache)."""
    import datasets

    from ppo_core.tasks import get_task

    datasets.disable_progress_bars()
    task = get_task(TASK)
    splits = {"train": task.train_prompts, "test": task.eval_prompts}
    datasets.DatasetDict({split: datasets.Dataset.from_dict({"prompt": list(prompts)})
                          for split, prompts in splits.items()}).save_to_disk(str(directory))
    return directory


def _resolved(study: RealStudy, work: Path) -> dict[str, Any]:
    """The study file's mapping with the paths this machine gives it: the storage, and for a study that brings its
    own model and prompts, the task's SFT policy and a prompt dataset written from the task's prompts."""
    definition = copy.deepcopy(study.definition)
    definition["storage"] = f"sqlite:///{work / DB_NAME}"
    base = definition["base"]
    if base.get("task") is None:
        from ppo_core.tasks import get_task

        base["sft_model_path"] = get_task(TASK).policy_path
        base["dataset_name"] = str(_prompts_dataset(work / "prompts"))
    return definition


def run_study_file(definition: dict[str, Any], directory: Path, threads: int | None) -> None:
    """What ``ppo-tune run <file>`` does with one worker: the file parsed, its trials run until ``n_trials``."""
    import yaml

    from tuner.run.worker import run_worker
    from tuner.study.study_file import load_study_spec

    path = directory / f"{definition['name']}.yaml"
    path.write_text(yaml.safe_dump(definition, sort_keys=False))
    spec = load_study_spec(path)
    run_worker(spec, n_trials=spec.n_trials, timeout=None, threads=threads)


def build(out: Path, studies: Sequence[RealStudy] = SPECS, threads: int | None = THREADS) -> dict[str, float]:
    """Build ``studies`` into ``out/real.db`` (``out`` is emptied first); returns the seconds each one took."""
    from tuner.production.local_validation import validate_here

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    storage = f"sqlite:///{out / DB_NAME}"
    seconds = {}
    for study in studies:
        started = time.perf_counter()
        run_study_file(_resolved(study, out), out, threads)
        if study.validate is not None:
            validate_here(study.name, storage, *study.validate, threads=threads)
        seconds[study.name] = round(time.perf_counter() - started, 1)
    return seconds


def cache_key(studies: Sequence[RealStudy] = SPECS) -> str:
    """A hash of the specs and of every source file in ``SOURCES``: 16 hex digits."""
    digest = hashlib.sha256(json.dumps([[s.definition, s.validate] for s in studies], sort_keys=True).encode())
    for source in SOURCES:
        path = ROOT / source
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(ROOT)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def cached_set(cache_dir: Path | None = None, threads: int | None = THREADS) -> str:
    """The storage URL of the cached set, built first when the cache has none for the current key.

    Safe from several processes at once: one builds under a file lock while the others wait for it.
    """
    from filelock import FileLock

    from ppo_core.tasks.registry import default_cache_dir

    directory = (cache_dir or default_cache_dir()) / "real_studies" / cache_key()
    if not (directory / COMPLETE).is_file():
        directory.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(directory) + ".lock"):
            if not (directory / COMPLETE).is_file():
                started = time.perf_counter()
                seconds = build(directory, threads=threads)
                seconds["total"] = round(time.perf_counter() - started, 1)
                (directory / COMPLETE).write_text(json.dumps({"seconds": seconds}, indent=2))
    return f"sqlite:///{directory / DB_NAME}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.real_studies", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="Build a fresh set into OUT/real.db (default: the cached set, built if missing).")
    parser.add_argument("--threads", type=int, default=THREADS, help=f"CPU threads per trial (default {THREADS}).")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.out is None:
        print(cached_set(threads=args.threads))
    else:
        for name, seconds in build(args.out, threads=args.threads).items():
            print(f"{name}: {seconds:.1f} s", file=sys.stderr)
        print(f"sqlite:///{args.out / DB_NAME}")
    print(f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
