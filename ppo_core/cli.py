"""``ppo-tune train CONFIG.yaml [--set key=value ...] [--output DIR]``: one PPO run."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ppo_core.errors import RunFailure, add_context, first_line
from ppo_core.metric_names import GOLD_SCORE  # no torch: the CLI starts fast

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
                             "what it wrote in OUTPUT.incomplete.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace the run already in the output directory, once the new run completes.")
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
    (ppo_core.run.directory), so the output directory holds a whole run or nothing. Raises InputError on bad input,
    NonFiniteError on divergence and RunFailure when the model cannot be written; the command line reports them.
    """
    # Everything a run is refused for is checked before the trainer is imported: torch and transformers cost seconds
    # of CPU to import (7.5 s here), which a mistyped path or field should not wait for. ``ppo-tune list`` and
    # ``ppo-tune dashboard`` import none of this.
    from ppo_core.config.io import dump_config, load_config
    from ppo_core.config.launch_env import launched_rank
    from ppo_core.models.paths import resolve_models
    from ppo_core.run.callbacks import JsonlWriter, TrainerCallback
    from ppo_core.run.directory import RunDirectory, check_output
    from ppo_core.run.progress import ProgressCallback

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
        trainer.train()
        trainer.save_model(output / MODEL_DIR)
        return 0
    run = RunDirectory.open(output, args.overwrite)
    writer: JsonlWriter | None = None
    try:
        dump_config(config, run.staging / "config.yaml")
        writer = JsonlWriter(run.staging)
        callbacks: list[TrainerCallback] = [writer] + ([] if args.quiet else [ProgressCallback()])
        started = time.perf_counter()
        # Trackers write under output_dir too: the staging directory, until the run is complete.
        trainer = PPOTrainer(dataclasses.replace(config, output_dir=str(run.staging)), callbacks)
        if not args.quiet:
            for name, count in trainer.parameter_counts.items():
                print(f"{name}: {count}", file=sys.stderr)
        result = trainer.train()
        model_dir = _saved(lambda: trainer.save_model(run.staging / MODEL_DIR), output, MODEL_DIR)
        summary = _summary(result.metrics, time.perf_counter() - started, output)
        summary["model"] = str(model_dir)
        if args.merge and config.use_peft:
            summary["merged_model"] = str(_saved(
                lambda: trainer.save_merged_model(run.staging / MODEL_DIR, run.staging / MERGED_DIR), output,
                MERGED_DIR))
        run.commit()
    except BaseException as error:
        updates = writer.updates if writer is not None else 0
        kept = run.abandon(updates)
        if kept is not None:
            add_context(error, f"its metrics so far ({updates} update{'s' if updates != 1 else ''}) are in "
                               f"{str(kept)!r}")
        raise
    summary["trainable_parameters"] = {name: count.trainable for name, count in trainer.parameter_counts.items()}
    summary["total_parameters"] = {name: count.total for name, count in trainer.parameter_counts.items()}
    print(json.dumps(summary, indent=2))
    return 0


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
