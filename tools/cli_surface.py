"""What a user sees of ppo-tune without running a trial: every command's ``--help`` and the exports of the shipped
studies, as text files, so that a change meant to leave the tool alone can be checked against a snapshot.

Each shipped study contributes three points of its search space (drawn by Optuna's RandomSampler with seeds 0-2,
through the tuner's own ``suggest_params``), and each point is exported in every format ``ppo-tune best --format``
offers, with the lines on which the target is not exact; a shipped run config (``ppo-tune train``) is exported
as it stands. ``--help`` is formatted at 80 columns, whatever the
terminal.

    python -m tools.cli_surface --write tests/golden/cli_surface   # after a change that means to alter them
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

HELP_COLUMNS = "80"
SAMPLER_SEEDS = (0, 1, 2)
STUDIES = Path(__file__).resolve().parents[1] / "studies"


def help_texts() -> dict[str, str]:
    """``ppo-tune --help`` and each command's ``--help``, by file name."""
    os.environ["COLUMNS"] = HELP_COLUMNS  # argparse wraps at the terminal's width
    from ppo_tune.cli import build_parser

    parser = build_parser()
    texts = {"help.txt": parser.format_help()}
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        texts[f"help_{name}.txt"] = command.format_help()
    return texts


def export_texts() -> dict[str, str]:
    """Every export format of three search-space points of each shipped study, by file name."""
    import optuna
    import yaml

    from tuner.exports import FORMATS, exported
    from tuner.search.space import suggest_params
    from tuner.study.study_file import load_study_spec

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    texts = {}
    for path in sorted(STUDIES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if "search_space" not in data:  # a run's config (ppo-tune train), exported as it stands
            points = {"config": data}
        else:
            spec = load_study_spec(path)
            points = {}
            for seed in SAMPLER_SEEDS:
                trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()
                points[str(seed)] = {**spec.base, **suggest_params(trial, spec.search_space, spec.base)}
        for point, config in points.items():
            for format_name, target in sorted(FORMATS.items()):
                export = exported(format_name, config)
                differences = "".join(f"# not exact: {line}\n" for line in export.differences)
                texts[f"export_{path.stem}_{point}_{format_name}.txt"] = export.render(target.layout) + differences
    return texts


def surface() -> dict[str, str]:
    """Both, by file name."""
    return {**help_texts(), **export_texts()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.cli_surface", description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, required=True, metavar="DIR", help="Directory to write the files to.")
    args = parser.parse_args(argv)
    args.write.mkdir(parents=True, exist_ok=True)
    for name, text in surface().items():
        (args.write / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
