"""The advantage estimators and their traits, registered once, torch-free.

Everything that depends on which estimator a config names reads this table at the time it asks: the config's
accepted names and its null defaults (``ppo_core.config.ppo_config``), the metrics a run reports
(``ppo_core.metric_names``, which the dashboard reads without torch), the search space's conditions
(``tuner.search.space``) and the exports' notes on unused settings (``tuner.exports``). The estimator's function is
registered under the same name in ``ppo_core.algorithm.estimators``; a name in one and not the other is refused when
that module is imported.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EstimatorTraits:
    """What the rest of the code needs to know of an advantage estimator without running it."""

    critic: bool
    """Trains a value network (GAE's V); the critic-free estimators build none."""
    groups: bool
    """Compares the responses to one prompt (a group baseline): needs num_generations >= 2."""
    kl_in_loss: bool
    """Where the KL penalty goes when kl_in_reward is null: a loss term (GRPO's, Shao et al. 2024), else the reward
    (PPO's; RLOO, Ahmadian et al. 2024, and REINFORCE++, Hu 2025, penalise the reward too)."""
    reads: frozenset[str]
    """The config fields it reads that not every estimator reads (every estimator reads the rest)."""
    summary: str = ""
    """What it computes, in a few words: the config's help for advantage_estimator lists these."""


CRITIC_READS = frozenset({"lam", "value_learning_rate", "vf_coef", "cliprange_value", "value_model_path",
                          "value_use_peft", "whiten_advantages", "whiten_rewards"})
"""What only a value network, and GAE's use of it, reads."""

ESTIMATORS: dict[str, EstimatorTraits] = {
    "gae": EstimatorTraits(critic=True, groups=False, kl_in_loss=False, reads=CRITIC_READS | {"gamma"},
                           summary="PPO's generalized advantage estimation over the token rewards and a value network"),
    "grpo": EstimatorTraits(critic=False, groups=True, kl_in_loss=True,
                            reads=frozenset({"num_generations", "scale_rewards", "scale_rewards_epsilon"}),
                            summary="group-normalised scores on every token of the response"),
    "rloo": EstimatorTraits(critic=False, groups=True, kl_in_loss=False, reads=frozenset({"num_generations"}),
                            summary="the leave-one-out mean of the other responses to the prompt as the baseline"),
    "reinforce_pp": EstimatorTraits(critic=False, groups=False, kl_in_loss=False, reads=frozenset({"gamma"}),
                                    summary="REINFORCE++: discounted returns of the token rewards, whitened over the "
                                            "batch"),
    "reinforce_pp_baseline": EstimatorTraits(critic=False, groups=True, kl_in_loss=False,
                                             reads=frozenset({"gamma", "num_generations"}),
                                             summary="as reinforce_pp, each score first reduced by its group's mean"),
}
"""Every advantage estimator by the name ``advantage_estimator`` takes, in the order the documentation lists them."""


def estimator_names() -> tuple[str, ...]:
    return tuple(ESTIMATORS)


def critic_estimators() -> tuple[str, ...]:
    """The estimators that train a value network."""
    return tuple(name for name, traits in ESTIMATORS.items() if traits.critic)


def critic_only_fields() -> tuple[str, ...]:
    """The fields only the estimators with a value network read (its knobs and GAE's use of it)."""
    critics = set(critic_estimators())
    return tuple(name for name in estimator_fields() if set(readers(name) or ()) <= critics)


def group_estimators() -> tuple[str, ...]:
    """The estimators that need several responses per prompt."""
    return tuple(name for name, traits in ESTIMATORS.items() if traits.groups)


def readers(field_name: str) -> tuple[str, ...] | None:
    """The estimators that read ``field_name``; None when every estimator reads it."""
    found = tuple(name for name, traits in ESTIMATORS.items() if field_name in traits.reads)
    return found or None


def estimator_fields() -> tuple[str, ...]:
    """Every field that some estimators read and others do not, in a stable order."""
    return tuple(sorted(set().union(*(traits.reads for traits in ESTIMATORS.values()))))


def names_where(wanted: bool, trait: str) -> str:
    """The estimators whose ``trait`` is ``wanted``, as prose: "grpo, rloo and reinforce_pp_baseline"."""
    names = [name for name, traits in ESTIMATORS.items() if getattr(traits, trait) == wanted]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def estimators_help() -> str:
    """Each estimator and what it computes, for the config's help and reference: read from the table, so that the
    prose cannot drift from it; the critic-free ones are marked."""
    return "; ".join(f"{name}: {traits.summary}" + ("" if traits.critic else " (no value network)")
                     for name, traits in ESTIMATORS.items()) + "."


# Responses per prompt when num_generations is null and the estimator needs a group. TRL's GRPOConfig says 8, which
# at the default rollout batch of 8 would leave one prompt per update; 4 keeps two.
DEFAULT_GROUP_GENERATIONS = 4


def default_generations(estimator: str) -> int:
    """What ``num_generations: null`` means for ``estimator``: a group for the group estimators, else one."""
    return DEFAULT_GROUP_GENERATIONS if ESTIMATORS[estimator].groups else 1


def default_kl_in_reward(estimator: str) -> bool:
    """What ``kl_in_reward: null`` means for ``estimator``: in the loss for GRPO, in the reward otherwise
    (the table above)."""
    return not ESTIMATORS[estimator].kl_in_loss
