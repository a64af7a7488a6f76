"""Run by the data-parallel tests under ``accelerate launch``: train, save and exit, either as a user's script would
(the run config given, through ``PPOTrainer``) or as ``ppo-tune`` would (its arguments, through the CLI as a process
of its own); at exit, after everything the trainer registered has run, write this rank's view of the process group
(still initialised? how many times destroyed?) to ``OUT_DIR/rank<R>.json``.

    python -m end_of_launch RUN.yaml OUT_DIR [KEY=VALUE ...]
    python -m end_of_launch --cli OUT_DIR PPO_TUNE_ARGUMENT ...
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch.distributed


def count_destroys(out_dir: str) -> None:
    """Count this rank's ``destroy_process_group`` calls, and write its view of the process group at exit."""
    destroyed: list[int] = []
    destroy = torch.distributed.destroy_process_group

    def counted_destroy(*args: Any, **kwargs: Any) -> None:
        destroyed.append(1)
        destroy(*args, **kwargs)

    torch.distributed.destroy_process_group = counted_destroy

    def report() -> None:  # registered first, so it runs last of the exit handlers
        view = {"initialized": torch.distributed.is_initialized(), "destroyed": len(destroyed)}
        (Path(out_dir) / f"rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(view))

    atexit.register(report)


def main(argv: list[str]) -> int:
    if argv[0] == "--cli":
        count_destroys(argv[1])
        from ppo_tune.cli import entry_point

        sys.argv = ["ppo-tune", *argv[2:]]
        return entry_point()
    config_path, out_dir, *overrides = argv
    count_destroys(out_dir)
    from ppo_core.config.io import load_config
    from ppo_core.run.trainer import PPOTrainer

    trainer = PPOTrainer(load_config(config_path, overrides))
    trainer.train()
    trainer.save_model(Path(out_dir) / "model")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
