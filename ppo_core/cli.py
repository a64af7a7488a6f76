"""``ppo-tune train CONFIG.yaml [--set key=value ...] [--output DIR]``: one PPO run."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppo_core.errors import RunFailure, add_context, first_line
from ppo_core.metric_names import GOLD_SCORE  # no torch: the CLI starts fast

if TYPE_CHECKING:
    from ppo_core.config.ppo_config import PPOConfig
    from ppo_core.run.callbacks import TrainerCallback
    from ppo_core.run.directory import RunDirectory
    from ppo_core.run.trainer import PPOTrainer

MODEL_DIR = "model"  # under the run's output directory: the trained policy (or its LoRA adapter) and its tokenizer
MERGED_DIR = "merged"  # with --merge: the adapter merged into its base, a plain model


def add_train_command(commands: Any) -> None:
    """Add ``train`` to an argparse subparsers object; the parsed arguments carry ``handler``."""
    parser = commands.add_parser("train", help="Run one PPO run from a config file.")
    parser.add_argument("config", help="Run config (YAML or JSON) with PPOConfig fields, e.g. studies/train.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override one PPOConfig field; repeatable.")
    parser.add_argument("--output", default=None,
                        help="Output directory (default: the config's output_dir, else runs/<config name>). It "
                             "receives the run once it is complete; a run that fails after its first update leaves "
                             "what it wrote in OUTPUT.incomplete. A run with save_steps that was interrupted (or "
                             "killed) continues from its last checkpoint when the same command runs again.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace the run already in the output directory, once the new run completes.")
    parser.add_argument("--no-resume", action="store_true",
                        help="Start afresh where an interrupted run of the output directory left a checkpoint, "
                             "removing that run.")
    parser.add_argument("--quiet", action="store_true", help="No progress bar.")
    parser.add_argument("--estimate", action="store_true",
                        help="Print parameter counts, memory per model and tokens per update, then exit: no weights "
                             "load, nothing is written.")
    parser.add_argument("--merge", action="store_true",
                        help=f"With use_peft, also write the adapter merged into its base to DIR/{MERGED_DIR}.")
    parser.set_defaults(handler=train_command)


def train_command(args: argparse.Namespace) -> int:
    """Run one PPO run; write metrics.jsonl, samples.jsonl, config.yaml and the trained model (``model/``).

    The run is written beside the output directory and renamed into place when complete
    (ppo_core.run.directory), so the output directory holds a whole run or nothing. An interrupted run of the same
    output directory that left a checkpoint (``save_steps``) is continued from it, unless ``--no-resume``. Raises
    InputError on bad input (a checkpoint made by another config or version, or damaged, too), NonFiniteError on
    divergence and RunFailure when the model or a checkpoint cannot be written; the command line reports them.
    """
    # Everything a run is refused for is checked before the trainer is imported: torch and transformers cost seconds
    # of CPU to import (7.5 s here), which a mistyped path or field should not wait for. ``ppo-tune list`` and
    # ``ppo-tune dashboard`` import none of this.
    from ppo_core.config.io import load_config
    from ppo_core.config.launch_env import launched_rank
    from ppo_core.models.paths import resolve_models
    from ppo_core.run.directory import RunDirectory, check_output

    config = load_config(args.config, args.overrides)
    if args.estimate:
        from ppo_core.memory.estimate import estimate_run
        from ppo_core.memory.report import print_estimate

        print_estimate(estimate_run(config))
        return 0
    output = Path(args.output or config.output_dir or Path("runs") / Path(args.config).stem)
    config = dataclasses.replace(config, output_dir=str(output))
    # Before anything is created: a missing model or an unreadable GGUF is bad input, not a failed run. (The trainer
    # resolves the paths again, finding a GGUF's cached copy; the config it gets and writes keeps the user's paths.)
    resolve_models(config)
    # Under ``accelerate launch`` every process runs this command; the main one alone writes and prints. Each checks
    # the output directory, so that all refuse alike.
    main_process = launched_rank() == 0
    check_output(output, args.overwrite)
    from ppo_core.run.trainer import PPOTrainer

    if not main_process:
        trainer = PPOTrainer(config)
        trainer.train()  # continues the checkpoint the main process continues, if any
        trainer.save_model(output / MODEL_DIR)
        return 0
    interrupted = _interrupted_run(output, discard=args.no_resume)
    run = RunDirectory.resume(output, interrupted[0], args.overwrite) if interrupted else \
        RunDirectory.open(output, args.overwrite)
    resumed_at = interrupted[1] if interrupted else None
    summary, trainer = _train_into(run, config, args, resumed_at)
    summary["trainable_parameters"] = {name: count.trainable for name, count in trainer.parameter_counts.items()}
    summary["total_parameters"] = {name: count.total for name, count in trainer.parameter_counts.items()}
    print(json.dumps(summary, indent=2))
    return 0


def _interrupted_run(output: Path, discard: bool) -> tuple[Path, int] | None:
    """The interrupted run of ``output`` to continue, and the update of its last checkpoint: of the runs that left
    one (ppo_core.run.directory.interrupted_runs), the one furthest on. With ``discard`` (``--no-resume``), none:
    those runs are removed, and the new run starts afresh."""
    import shutil

    from ppo_core.run.checkpoint_files import checkpoints_dir, complete_checkpoints
    from ppo_core.run.directory import interrupted_runs

    found = [(run, whole[-1][0]) for run in interrupted_runs(output)
             if (whole := complete_checkpoints(checkpoints_dir(run)))]
    if discard:
        for run, _ in found:
            shutil.rmtree(run, ignore_errors=True)
        return None
    return max(found, key=lambda pair: pair[1], default=None)


def _train_into(run: RunDirectory, config: PPOConfig, args: argparse.Namespace,
                resumed_at: int | None) -> tuple[dict[str, Any], PPOTrainer]:
    """Train in ``run``'s staging directory (from the checkpoint of update ``resumed_at`` there, if given), write
    the model and commit the run; the summary and the trainer. On any failure the run is left as
    ``RunDirectory.abandon`` leaves it, a resumed one always kept."""
    from ppo_core.run.callbacks import JsonlWriter
    from ppo_core.run.checkpoint_files import CheckpointError, checkpoint_name, checkpoints_dir
    from ppo_core.run.progress import ProgressCallback
    from ppo_core.run.trainer import PPOTrainer

    output = run.output
    writer: JsonlWriter | None = None
    try:
        writer = JsonlWriter(run.staging, resume_at=resumed_at)
        callbacks: list[TrainerCallback] = [_config_writer(config, run.staging / "config.yaml"), writer] + \
            ([] if args.quiet else [ProgressCallback()])
        started = time.perf_counter()
        # Trackers and checkpoints are written under output_dir too: the staging directory, until the run is whole.
        trainer = PPOTrainer(dataclasses.replace(config, output_dir=str(run.staging)), callbacks)
        checkpoint = checkpoints_dir(run.staging) / checkpoint_name(resumed_at) if resumed_at is not None else None
        if not args.quiet:
            for name, count in trainer.parameter_counts.items():
                print(f"{name}: {count}", file=sys.stderr)
            if resumed_at is not None:
                print(f"resuming from the checkpoint of update {resumed_at} of {trainer.num_updates}",
                      file=sys.stderr)
        try:
            result = trainer.train(checkpoint)
        except CheckpointError as error:
            if checkpoint is not None:
                add_context(error, f"it is {str(output)!r}'s interrupted run: pass --no-resume to start afresh")
            raise
        model_dir = _saved(lambda: trainer.save_model(run.staging / MODEL_DIR), output, MODEL_DIR)
        summary = _summary(_update_rows(writer.metrics_path), time.perf_counter() - started, output)
        summary["model"] = str(model_dir)
        if result.resumed_at:
            summary["resumed_at_update"] = result.resumed_at
        if args.merge and config.use_peft:
            summary["merged_model"] = str(_saved(
                lambda: trainer.save_merged_model(run.staging / MODEL_DIR, run.staging / MERGED_DIR), output,
                MERGED_DIR))
        run.commit()
    except BaseException as error:
        # A resumed run's metrics hold at least the updates up to its checkpoint: it is kept, whatever happened.
        updates = max(writer.updates if writer is not None else 0, resumed_at or 0)
        kept = run.abandon(updates)
        if kept is not None:
            add_context(error, f"its metrics so far ({updates} update{'s' if updates != 1 else ''}) are in "
                               f"{str(kept)!r}")
        raise
    return summary, trainer


def _config_writer(config: PPOConfig, path: Path) -> TrainerCallback:
    """A callback that writes ``config`` to ``path`` as training begins: a resumed run's once the trainer has
    accepted its checkpoint, so that a resume refused leaves the interrupted run's config as it was."""
    from ppo_core.config.io import dump_config
    from ppo_core.run.callbacks import TrainerCallback

    class ConfigWriter(TrainerCallback):
        def on_train_begin(self, run_config: Any, num_updates: int) -> None:
            dump_config(config, path)

    return ConfigWriter()


def _update_rows(path: Path) -> list[dict[str, float]]:
    """The metrics file's updates (the evaluation before training, update 0, left out): the whole run's, a
    resumed run's earlier updates included."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [row for row in rows if row.get("update", 0) >= 1]


def _saved(save: Callable[[], Path], output: Path, name: str) -> Path:
    """Run ``save``, which writes a model into the staging directory; a disk that fills up is a RunFailure. The
    path the model will have once the run is in place."""
    from safetensors import SafetensorError  # what save_pretrained raises when its writes fail

    try:
        save()
    except (OSError, SafetensorError) as error:
        raise RunFailure(f"cannot write {str(output / name)!r} ({first_line(error)})") from error
    return output / name


def _summary(metrics: list[dict[str, float]], seconds: float, output: Path) -> dict[str, Any]:
    first, last = metrics[0], metrics[-1]
    summary: dict[str, Any] = {
        "updates": len(metrics),
        "seconds": round(seconds, 1),
        "seconds_per_update": round(sum(m["time/rollout_s"] + m["time/update_s"] for m in metrics) / len(metrics), 3),
        "first_score": round(first["objective/scores"], 4),
        "last_score": round(last["objective/scores"], 4),
        "last_kl": round(last["objective/kl"], 4),
        "output": str(output),
    }
    if GOLD_SCORE in last:
        summary["first_gold_score"] = round(first[GOLD_SCORE], 4)
        summary["last_gold_score"] = round(last[GOLD_SCORE], 4)
    return summary
