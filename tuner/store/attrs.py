"""What the tuner records on studies and trials, and the KL guard's defaults, defined once for writers and readers.

Importing this module imports nothing else, so a reader (the dashboard) can name the attributes without
loading the trainer (and torch) behind ``tuner.trial.trial_function`` and ``tuner.trial.kl_guard``.
"""

from __future__ import annotations

# Trial user attributes.
KL_HISTORY_ATTR = "kl_history"
BUDGET_ATTR = "budget_updates"
NON_FINITE_ATTR = "non_finite_metric"
PRUNE_REASON_ATTR = "prune_reason"
PRUNED_AT_ATTR = "pruned_at_update"
FAIL_REASON_ATTR = "fail_reason"
CONFIG_ATTR = "config"
RETRY_OF_ATTR = "retry_of"
# Which ``enqueue`` entry of the study file queued the trial: trl_defaults, seed_guidance or enqueue[i].
WARM_START_ATTR = "warm_start"
# A validation run's source trial (its number in the tuned study) and the fresh seed it runs on.
VALIDATES_ATTR = "validates_trial"
SEED_ATTR = "seed"
# A racing re-run's configuration (the number of the trial that first ran it); its seed is SEED_ATTR.
RACE_OF_ATTR = "race_of"
# A validation run at another length than its source trial's (``validate --total-episodes``): the rule that carried
# the trial's config there (``tuner.production.horizon``); the length itself is the run's config's total_episodes.
CARRIED_BY_ATTR = "carried_by"
# A validation run that is a pilot (``validate --policy-model``): the configuration carried to another policy and run
# once there, its KL read to rescale the learning rate before the runs that validate it (``tuner.production.pilot``).
# Not a validation of anything itself.
PILOT_ATTR = "pilot"
# torch's thread count in a trial that trained on the CPU, where it changes the numbers: another order of the sums
# can flip a sampled token, and the run goes elsewhere from there.
CPU_THREADS_ATTR = "cpu_threads"
# The trainer that ran a trial of a TRL study, with its release ("TRL 1.16.0 GRPOTrainer"): a ppo_core trial has none.
TRAINED_BY_ATTR = "trained_by"
# Where a TRL trial's seconds went: "train" (TRL's loop, all of the rest included), and within it "evaluation",
# "samples" and "callbacks" (storing each update, pruning, the KL guard): the tuner's share of the trial.
TRL_SECONDS_ATTR = "trl_seconds"

# A population study's segment (tuner.population.segments): which member, generation and updates the trial trains,
# and the segment it continues or copies.
POPULATION_ATTR = "population"
# A population segment queued twice (two workers saw its generation end at once): the trial it repeats. It stopped at
# its start and counts for nothing.
DUPLICATE_OF_ATTR = "duplicate_of"

# What a failed trial's retry must keep: the attributes that say what to run (a validation run's fixed config and
# its source). The rest (KL history, reasons) describes the failed attempt and stays with it.
RETRY_CARRIES = (CONFIG_ATTR, VALIDATES_ATTR, SEED_ATTR, WARM_START_ATTR, RACE_OF_ATTR, CARRIED_BY_ATTR,
                 PILOT_ATTR, POPULATION_ATTR)
STALE_REASON = "worker stopped sending heartbeats"

# Trial system attribute (Optuna's internal kind, kept out of the user attributes readers list): how the trial's own
# process says it ended, for the worker to read when that process exits (see tuner.trial.protocol).
OUTCOME_SYSTEM_ATTR = "ppo_tune:outcome"


def retry_user_attrs(user_attrs: dict[str, object], number: int) -> dict[str, object]:
    """The user attributes of the trial that retries trial ``number``, which had ``user_attrs``."""
    return {**{key: user_attrs[key] for key in RETRY_CARRIES if key in user_attrs}, RETRY_OF_ATTR: number}


# Study user attributes that studies made before their specs were stored recorded their KL guard and objectives
# in; read for those studies only (tuner.study.stored_spec), and no longer written.
KL_GUARD_ATTR = "kl_guard"
OBJECTIVES_ATTR = "objectives"
# Study user attribute of a validation study (tuner.production.validation): the name of the study whose configurations
# it reruns.
VALIDATION_OF_ATTR = "validation_of"
# Study user attribute: the study spec's mapping (the study file as read) when the study was created, or last changed
# with --allow-changes (tuner.study.spec_record). The key keeps "definition", the spec's name when the first studies
# were stored: every study already in a database carries it, and under a new key they would read as storing no spec
# (validate could not rebuild them, and a resume would not check the file against them).
SPEC_ATTR = "definition"

# The seed guidance reads KL above 10-15, or 15-20, nats as divergence; the guard stops trials at the top of it.
DEFAULT_KL_THRESHOLD = 20.0
DEFAULT_KL_METRIC = "objective/kl"
