"""The parameters that fully determine a built-in task (and therefore its cache key)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from ppo_core.tasks.params import TrainingParams

# Bump whenever the build code changes what a given set of parameters produces, so old
# cache entries are not silently reused.
BUILD_VERSION = 1


@dataclass(frozen=True)
class TaskParams(TrainingParams):
    """Everything a shortest-path task build depends on, beside what every task's build reads
    (:class:`TrainingParams`); the build is a pure function of this."""

    # Graph.
    num_nodes: int
    num_edges: int
    max_degree: int
    # SFT walks: a random walk that takes a goal-directed step with probability greedy_prob.
    greedy_prob: float
    max_walk_len: int
    # Prompts.
    num_eval_prompts: int
    # Build-time evaluation of the SFT policy.
    eval_samples_per_prompt: int
    # The policy's own width where it differs from the reward model's (None: the shared n_embd). The reward model is
    # then trained from an SFT policy of the shared shape, as in the task without it, and the policy is a second
    # SFT run of this width on the same walks: a larger policy for the same task, reward and gold.
    policy_n_embd: int | None = None

    @property
    def policy_width(self) -> int:
        return self.policy_n_embd if self.policy_n_embd is not None else self.n_embd

    @property
    def response_length(self) -> int:
        """Max new tokens for generation: the longest SFT walk, its EOS, and a little slack."""
        return self.max_walk_len + 2

    def cache_key(self) -> str:
        """A 12-hex-digit hash of the parameters and the build version."""
        # A field left at None is left out, so that adding one keeps every existing task's key (and its cache).
        fields = {key: value for key, value in asdict(self).items() if value is not None}
        payload = json.dumps({"build_version": BUILD_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]
