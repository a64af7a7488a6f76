"""What ``ppo-tune run`` checks of a TRL study before it creates anything: that the installed TRL is a release the
trials are tested with, and that TRL's own config class takes every configuration the study can draw.

Both are refused in one line (StudySpecError: exit 2). The config check builds TRL's GRPOConfig or RLOOConfig for
each point the study's other checks read (each searched value at both ends, each warm start), so a value TRL refuses
(a generation batch that the responses per prompt do not divide, say) stops the study, not its first trial.
"""

from __future__ import annotations

import importlib.metadata
import tempfile
import warnings

from ppo_core.config.io import build_config
from ppo_core.config.ppo_config import ConfigError
from ppo_core.errors import first_line
from tuner.exports import TRL_VERSION
from tuner.exports._common import optimizer_steps_per_update
from tuner.study.sections import PPO_CORE
from tuner.study.spec import StudySpec
from tuner.study.target import study_points
from tuner.study.values import fail
from tuner.trl_trial.arguments import TRL_TRAINERS, trial_arguments

TRL_INSTALL = "pip install 'ppo-tune[trl]'"


def release_line(version: str) -> str:
    """'1.16.0' -> '1.16' (major.minor)."""
    return ".".join(version.split(".")[:2])


TESTED = release_line(TRL_VERSION)  # "1.16": the release line the trials and exports are tested with


def check_trainer(spec: StudySpec) -> None:
    """Refuse, with StudySpecError, a TRL study that this machine cannot run as tested: TRL missing, TRL of another
    release line than the tested one, or a configuration TRL's config class refuses. Nothing for a ppo_core study."""
    if spec.trainer == PPO_CORE:
        return
    try:
        installed = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        raise fail(f"trainer: {spec.trainer} runs TRL {TESTED}.x, which is not installed: {TRL_INSTALL}") from None
    if release_line(installed) != TESTED:
        raise fail(f"trainer: {spec.trainer} is tested with TRL {TESTED}.x, and TRL {installed} is installed: "
                   f"{TRL_INSTALL}")
    _check_configs(spec)


def _check_configs(spec: StudySpec) -> None:
    import torch

    from tuner.trl_trial.run import trainer_config  # imports TRL: only for a TRL study about to run

    class_name = TRL_TRAINERS[spec.trainer][0]
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing.*")  # TRL's, as in run
    with tempfile.TemporaryDirectory(prefix="ppo-tune-check-") as output_dir:
        for where, values in study_points(spec.search_space, spec.base, spec.enqueue):
            try:
                config = build_config(values)
            except ConfigError:
                continue  # the study's own checks name what cannot build
            try:
                arguments = trial_arguments(spec.trainer, config)
            except ConfigError as error:  # a field TRL cannot run: named by the field, the place after it
                raise fail(f"{error}; at {where}") from None
            try:
                trainer_config(arguments, torch.device("cpu"), output_dir, updates=1,
                               steps_per_update=optimizer_steps_per_update(config))
            except (ValueError, TypeError) as error:
                raise fail(f"trainer: at {where}, TRL's {class_name} refuses the trial's arguments "
                           f"({first_line(error)})") from None
