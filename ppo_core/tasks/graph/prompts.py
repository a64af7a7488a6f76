"""Which (start, goal) trips become PPO training prompts and which are held out for evaluation."""

from __future__ import annotations

import random

from ppo_core.tasks.graph.graph import Graph
from ppo_core.tasks.graph.text import make_prompt


def all_trips(graph: Graph) -> list[tuple[int, int]]:
    """Every ordered pair of distinct nodes, in a fixed order."""
    n = graph.num_nodes
    return [(a, b) for a in range(n) for b in range(n) if a != b]


def split_prompts(graph: Graph, num_eval: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """Return ``(train_prompts, eval_prompts)``, disjoint, covering every trip once.

    Eval trips are drawn from those at distance >= 2 (when there are enough), since a
    one-step trip says little about whether the policy plans; they are sorted by distance
    so sample tables read from easy to hard.
    """
    trips = all_trips(graph)
    far = [t for t in trips if graph.distances[t[0]][t[1]] >= 2]
    pool = far if len(far) >= num_eval else trips
    eval_trips = sorted(rng.sample(pool, num_eval), key=lambda t: (graph.distances[t[0]][t[1]], t))
    held_out = set(eval_trips)
    train_trips = [t for t in trips if t not in held_out]
    rng.shuffle(train_trips)
    return [make_prompt(*t) for t in train_trips], [make_prompt(*t) for t in eval_trips]
