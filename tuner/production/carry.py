"""A tuned trial's configuration for the production run: ``--total-episodes N`` and ``--policy-model PATH`` on
``ppo-tune best`` and ``ppo-tune validate``.

The trial ran ``total_episodes`` E; the production run takes N ≥ E. A rule of ``tuner.production.horizon`` carries the
configuration there. Which rule, if any, keeps a winner where it was tuned is a measurement
(``benchmarks.horizon_transfer``): :data:`tuner.production.horizon.PRODUCTION_RULE` names the one that did, and without
it the tuned configuration runs unchanged at the new length, with a notice that says so and how to check it.

On another policy no rule of the length alone holds (``benchmarks.size_transfer``): the configuration is carried
there by ``kl_pilot`` from a pilot run (``tuner.production.pilot``), and until a pilot has run it is printed with the
tuned learning rate and a notice that says how to run one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ppo_core.errors import InputError
from tuner.production.horizon import (
    EVIDENCE,
    EVIDENCE_SCOPE,
    HELD_WITHIN,
    PRODUCTION_RULE,
    RULES,
    Carried,
    rule_parts,
)

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

KL_METRICS = ("eval/kl", "objective/kl")
"""Where a trial's final KL is read, in order: the held-out one, else the training rollouts'."""


def production_episodes(text: str, tuned: int) -> int:
    """``--total-episodes`` as a whole number of episodes at least the trial's own ``tuned``; bad input is one line."""
    try:
        episodes = int(text)
    except ValueError:
        raise InputError(f"--total-episodes: expected a whole number of episodes, got {text!r}") from None
    if episodes < 1:
        raise InputError(f"--total-episodes: must be at least 1, got {episodes}")
    if episodes < tuned:
        raise InputError(f"--total-episodes: {episodes} is below the trial's own {tuned}; the rules carry a tuned "
                         "configuration to a longer run")
    return episodes


def production_policy(text: str) -> str:
    """``--policy-model``: a local directory that is there, or a hub name (``owner/name``), as a run checks its
    ``sft_model_path``; bad input is one line."""
    # Imported here: the dashboard reads validations through this module and loads nothing of ppo_core's config.
    from ppo_core.config.checks import ConfigError
    from ppo_core.models.paths import require_model

    try:
        require_model(text, "--policy-model")
    except ConfigError as error:
        raise InputError(str(error)) from None
    return text


def chosen_rule(rule: str | None) -> str:
    """The rule a command applies: the one asked for, else the measured :data:`PRODUCTION_RULE`, else ``as_tuned``."""
    return rule or PRODUCTION_RULE or "as_tuned"


def final_kl(metrics: Any) -> float:
    """The last value of the first of :data:`KL_METRICS` a trial's metrics frame (``tuner.store.records.
    read_metrics``) holds; NaN when it holds none."""
    for metric in KL_METRICS:
        if metric in metrics:
            values = metrics[metric].dropna()
            if len(values):
                return float(values.iloc[-1])
    return math.nan


def carry(config: Mapping[str, Any], episodes: int, rule: str, kl: float) -> Carried:
    """``config`` carried to ``episodes`` by ``rule``; a rule that cannot apply (``kl_held`` for a trial that ended at
    no KL) is one line of bad input."""
    try:
        return RULES[rule](config, episodes, kl)
    except ValueError as error:
        raise InputError(f"--rule {rule}: {error}") from None


def change_comments(carried: Carried) -> list[str]:
    """One ``#`` line per rule applied, the measurement behind it, and one per setting changed: its new value, its
    tuned value and why."""
    lengthened = any(c.name == "total_episodes" for c in carried.changes)
    # as_tuned's measurement is of a longer run: on another policy at the trial's own length it says nothing.
    lines = [f"# carried to the production run by the rule {rule}: {EVIDENCE[rule]}"
             for rule in rule_parts(carried.rule) if rule != "as_tuned" or lengthened]
    if lines:
        lines.append(f"# (the rule's evidence is {EVIDENCE_SCOPE})")
    lines += [f"# {c.name}={_shown(c.carried)} (tuned {_shown(c.tuned)}): {c.why}" for c in carried.changes]
    return lines


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else "null" if value is None else str(value)


def notice(carried: Carried, name: str, episodes: int) -> str | None:
    """What to tell a user about a configuration carried without a measured rule: None when the rule is the
    measured one."""
    rule = rule_parts(carried.rule)[0]  # the length's rule; a pilot's rescaling comes after it
    if rule == "kl_pilot" or (PRODUCTION_RULE is not None and rule == PRODUCTION_RULE):
        return None
    measured = "no rule is measured to keep a winner where it was tuned" if PRODUCTION_RULE is None else \
        f"the measured rule is {PRODUCTION_RULE}, not {rule}"
    return (f"{measured} at {episodes} episodes (benchmarks/README.md, 'From the short trial to the production "
            f"run'); check it there: ppo-tune validate {name} --total-episodes {episodes}")


def pilot_notice(trial: int, policy: str, name: str, episodes: int | None, why: str) -> str:
    """What to tell a user about a configuration carried to another policy without a pilot there: that its
    learning rate is the tuned one, what that cost where it was measured, and the command that runs the pilot."""
    length = "" if episodes is None else f" --total-episodes {episodes}"
    return (f"trial {trial} on {policy}: {why}, so the learning rate is not carried to this policy; "
            f"{EVIDENCE['kl_pilot']} ({EVIDENCE_SCOPE}). Run the pilot and validate there: "
            f"ppo-tune validate {name} --policy-model {policy}{length}")


def uncarried(settings: list[tuple[str, Any, str]], comments: list[tuple[str, str]], carried: Carried) -> list[str]:
    """The settings the rule changed that an export does not carry: no setting of the target comes from the field
    (settings: key, value, source field), or the export comments on the field (comments: field, line), which it
    does where the target lacks it or counts it otherwise (verl and OpenRLHF steer a per-token KL target)."""
    exported = {source for _, _, source in settings}
    commented = {name for name, _ in comments}
    return [c.name for c in carried.changes if c.name not in exported or c.name in commented]


def held(at_length: float, own: float, maximize: bool) -> bool:
    """Whether a validated mean at a production length stayed within :data:`HELD_WITHIN` of the value at the
    trial's own length: (at - own) / |own| ≥ -HELD_WITHIN when maximizing, ≤ +HELD_WITHIN when minimizing."""
    change = (at_length - own) / abs(own) if own else 0.0 if at_length == own else math.copysign(math.inf,
                                                                                                 at_length - own)
    return change >= -HELD_WITHIN if maximize else change <= HELD_WITHIN


@dataclass(frozen=True)
class AtLength:
    """A configuration validated at a production length or on another policy, against its value at its own."""

    trial: int
    total_episodes: int
    rule: str
    mean: float
    ci_low: float
    ci_high: float
    n: int
    own_episodes: int | None
    own_value: float
    own_what: str
    """"its validated mean" at its own length and policy where it was validated there, else "its tuning value"."""
    held: bool
    policy_model: str | None = None
    """The policy the runs started from where it is not the tuned trial's (``validate --policy-model``)."""

    @property
    def change(self) -> float:
        return (self.mean - self.own_value) / abs(self.own_value) if self.own_value else math.nan

    def line(self) -> str:
        on = "" if self.policy_model is None else f" on {self.policy_model}"
        return (f"at {self.total_episodes} episodes{on} (rule {self.rule}): validated {self.mean:.4f} "
                f"[{self.ci_low:.4f}, {self.ci_high:.4f}] over {self.n} seeds, {self.change:+.1%} against "
                f"{self.own_what} {self.own_value:.4f} at its own {self.own_episodes}: "
                f"{'held' if self.held else 'did not hold'} (within {HELD_WITHIN:.0%})")


def lengths_validated(study: optuna.Study, validation: optuna.Study | None) -> list[AtLength]:
    """Every (configuration, production length, policy) ``validate --total-episodes`` / ``--policy-model`` ran
    with a completed run, by trial, then length, then policy: its validated mean there against its validated mean at
    its own length on its own policy (else its tuning value), and whether it held."""
    from optuna.study import StudyDirection

    from tuner.production.validation import is_pilot, run_episodes, run_policy, validation_results

    if validation is None:
        return []
    maximize = study.directions[0] == StudyDirection.MAXIMIZE
    own = {r.trial: r for r in validation_results(study, validation) if r.n > 0}
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    where = sorted({(length, run_policy(t)) for t in validation.get_trials(deepcopy=False)
                    if (length := run_episodes(t)) is not None and not is_pilot(t)},
                   key=lambda at: (at[0], at[1] or ""))
    found = []
    for length, policy in where:
        for result in validation_results(study, validation, length, policy):
            tuned = trials.get(result.trial)
            if result.n == 0 or tuned is None or not tuned.values or \
                    (run_episodes(tuned), run_policy(tuned)) == (length, policy):
                continue
            base, what = (own[result.trial].interval[0], "its validated mean") if result.trial in own \
                else (tuned.values[0], "its tuning value")
            mean, low, high = result.interval
            found.append(AtLength(result.trial, length, result.rule or "as_tuned", mean, low, high, result.n,
                                  run_episodes(tuned), base, what, held(mean, base, maximize), result.policy_model))
    return sorted(found, key=lambda at: (at.trial, at.total_episodes, at.policy_model or ""))


def held_at_lengths(study: optuna.Study, validation: optuna.Study | None, trial: FrozenTrial) -> list[str]:
    """One line per production length and policy ``trial`` was validated at (:func:`lengths_validated`)."""
    return [at.line() for at in lengths_validated(study, validation) if at.trial == trial.number]
