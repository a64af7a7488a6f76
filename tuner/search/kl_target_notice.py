"""Whether a study's adaptive KL controller can steer at all: one line for ``ppo-tune run`` when it cannot.

The controller moves its coefficient by a bounded factor per episode (``ppo_core.algorithm.kl_reach.adaptive_reach``). A
study whose runs are short against its ``kl_horizon`` searches a ``kl_target`` that barely changes anything: on the
curve tables (runs of 1,536 episodes, horizon 512, reach x1.83) the final KL's Spearman with the target was 0.20-0.23
(``python -m benchmarks.kl_control``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ppo_core.algorithm.kl_reach import adaptive_reach
from tuner.search.kl_model import rollout_episodes
from tuner.search.space import ParamSpec

STEERS = 2.0
"""A controller that cannot at least double or halve its coefficient over a run is said not to steer."""


def adaptive_in_use(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> bool:
    """True when some trial of the study can run the adaptive controller: kl_target searched (the study-file check
    refuses a searched kl_target that kl_control never chooses), or set in the base."""
    return "kl_target" in space or base.get("kl_target") is not None


def study_reach(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> tuple[float, int, int] | None:
    """(reach, episodes, horizon) of the study's runs at their largest rollout batch (where the reach is largest),
    or None when the adaptive controller is not in use or the run's length is searched or unknown."""
    episodes = base.get("total_episodes")
    if not adaptive_in_use(space, base) or "total_episodes" in space or "kl_horizon" in space or episodes is None:
        return None
    from ppo_core.config.ppo_config import settable_fields

    horizon = int(base.get("kl_horizon", settable_fields()["kl_horizon"].default))
    rollouts = space["rollout_batch_size"].choices if "rollout_batch_size" in space else (None,)
    batch = max(rollout_episodes({} if rollout is None else {"rollout_batch_size": rollout}, base)
                for rollout in rollouts)
    return adaptive_reach(int(episodes), batch, horizon), int(episodes), horizon


def reach_notice(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> str | None:
    """One line when the study's adaptive controller cannot move its coefficient by ``STEERS`` over a run."""
    found = study_reach(space, base)
    if found is None or found[0] >= STEERS:
        return None
    reach, episodes, horizon = found
    return (f"kl_target barely steers in this study: over {episodes} episodes with kl_horizon {horizon} the adaptive "
            f"KL controller can move its coefficient by at most x{reach:.2f}, so the target changes little but the "
            f"starting coefficient; a kl_horizon near {max(1, episodes // 10)} episodes lets it steer, or search a "
            "fixed kl_coef")
