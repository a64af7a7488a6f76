"""The tuner's subcommands: ``run`` a study, ``validate`` its winners, ``list`` studies, ``show`` a study's trials,
print its ``best`` config. The parser is here; the commands are in :mod:`.study_commands` (run, list, show) and
:mod:`.winner_commands` (validate, best), and what they share in :mod:`.common`."""

from __future__ import annotations

from typing import Any

from tuner.cli.common import add_launcher_flags, add_production_flags, storage_errors_as_input
from tuner.cli.study_commands import command_list, command_run, command_show
from tuner.cli.winner_commands import command_best, command_validate
from tuner.store.default_storage import DEFAULT_STUDIES_DIR


def add_study_commands(commands: Any) -> None:
    """Add ``run``, ``list``, ``show`` and ``best`` to an argparse subparsers object; each sets ``handler``."""
    run = commands.add_parser("run", help="Create or resume a study and run its trials.")
    run.add_argument("study", help="Study file, e.g. studies/quickstart.yaml")
    run.add_argument("--n-trials", type=int, default=None, help="Finished trials to reach (overrides the file).")
    run.add_argument("--timeout", type=float, default=None, help="Seconds after which no new trial starts.")
    run.add_argument("--storage", default=None, help="Optuna storage URL (overrides the file).")
    run.add_argument("--workers", type=int, default=None,
                     help="Worker processes on this machine (default: one per GPU, else 1).")
    run.add_argument("--allow-changes", action="store_true",
                     help="Resume the study even though the file changed its objectives, base, search space, "
                          "sampler, pruner, KL guard, constraints or warm starts (the new study spec is kept).")
    add_launcher_flags(run)
    run.set_defaults(handler=storage_errors_as_input(command_run))

    from tuner.production.horizon import PILOT_SEEDS

    validate = commands.add_parser(
        "validate", help="Rerun a study's best configurations on seeds it never used; mean and 95%% CI of each.")
    validate.add_argument("name", help="Study name.")
    validate.add_argument("--top-k", type=int, default=3, help="Configurations to rerun, best first (default 3).")
    validate.add_argument("--trials", type=int, nargs="+", default=None, metavar="N",
                          help="Rerun these trials' configurations instead of the best: what another choice (the "
                               "proxy's pick, a runner-up) would have given.")
    validate.add_argument("--seeds", type=int, default=5, help="Fresh seeds per configuration (default 5).")
    validate.add_argument("--storage", default=None,
                          help=f"Storage URL (default: every {DEFAULT_STUDIES_DIR}/*.db).")
    validate.add_argument("--workers", type=int, default=None,
                          help="Worker processes on this machine (default: one per GPU, else 1).")
    validate.add_argument("--format", choices=("table", "json"), default="table")
    validate.add_argument("--eval-samples", type=int, default=None, metavar="N",
                          help="Each new run's held-out evaluations draw N responses per prompt (default: the "
                               "study's num_eval_samples): the same prompts, so the same expected score, with less "
                               "noise, for a few generation passes; runs already done count alike.")
    add_production_flags(validate, "Validate the configurations in a production run of N episodes",
                          f"Validate the configurations on this policy: first {PILOT_SEEDS} pilot runs each there, "
                          "whose KL rescales the learning rate (kl_pilot), then the rescaled configuration on the "
                          "fresh seeds.")
    add_launcher_flags(validate)
    validate.set_defaults(handler=storage_errors_as_input(command_validate))

    handlers = {"list": command_list, "show": command_show, "best": command_best}
    for name, help_text in (("list", "List studies with trial counts and best values."),
                            ("show", "Print a study's trial table."),
                            ("best", "Print the best trial's full config.")):
        sub = commands.add_parser(name, help=help_text)
        if name != "list":
            sub.add_argument("name", help="Study name.")
        sub.add_argument("--storage", default=None,
                         help=f"Storage URL (default: every {DEFAULT_STUDIES_DIR}/*.db).")
        if name == "best":
            from tuner.exports import EXPORT_FORMATS  # light: the tables and ppo_core.config.ppo_config (no torch)

            sub.add_argument("--format", choices=("yaml", "json", *EXPORT_FORMATS), default="yaml",
                             help="yaml or json: the config as ppo-tune reads it; the others: arguments for another "
                                  "trainer, with what it lacks as # comments (trl-args is trl-ppo's old name).")
            add_production_flags(sub, "Print the configuration for a production run of N episodes",
                                  "Print the configuration for a production run on this policy, its learning rate "
                                  "rescaled from the pilot that ppo-tune validate --policy-model ran there.")
        sub.set_defaults(handler=storage_errors_as_input(handlers[name]))
