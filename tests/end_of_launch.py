"""Run by the data-parallel tests under ``accelerate launch``: train the run config given, save, and exit as a user's
script would; at exit, after everything the trainer registered has run, write this rank's view of the process group
(still initialised? how many times destroyed?) to ``OUT_DIR/rank<R>.json``.

    python -m end_of_launch RUN.yaml OUT_DIR [KEY=VALUE ...]
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch.distributed


def main(argv: list[str]) -> None:
    config_path, out_dir, *overrides = argv
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
    from ppo_core.config.io import load_config
    from ppo_core.run.trainer import PPOTrainer

    trainer = PPOTrainer(load_config(config_path, overrides))
    trainer.train()
    trainer.save_model(Path(out_dir) / "model")


if __name__ == "__main__":
    main(sys.argv[1:])
