"""Gold-labelled preference pairs for the proxy reward model.

The pairs are a finite sample concentrated near the SFT distribution, as human
preference data would be: mostly SFT-like random walks, plus some better walks, a few
shortest paths, and the typical ways a walk goes wrong (stopping early, overshooting the
goal, one illegal move or a jump to the goal over a non-edge, garbage). From this little
data the small reward model learns "short and ends at the goal" well but spots a single
illegal step only weakly, so a policy pushed hard enough towards short walks starts
cutting corners the proxy does not see: real over-optimisation, not a planted bug.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ppo_core.tasks.graph.gold import score_walk
from ppo_core.tasks.graph.graph import Graph, goal_walk, shortest_path
from ppo_core.tasks.graph.params import TaskParams
from ppo_core.tasks.graph.prompts import all_trips
from ppo_core.tasks.graph.text import format_walk, make_prompt

Walk = list[int]


@dataclass(frozen=True)
class PreferencePair:
    """Two responses to one prompt, ``chosen`` having the strictly higher gold score."""

    prompt: str
    chosen: str
    rejected: str
    chosen_family: str
    rejected_family: str


def _sft_like(graph: Graph, s: int, g: int, rng: random.Random, p: TaskParams) -> Walk:
    return goal_walk(graph, s, g, rng, p.greedy_prob, p.max_walk_len)


def _better(graph: Graph, s: int, g: int, rng: random.Random, p: TaskParams) -> Walk:
    # More goal-directed than SFT, and no immediate back-tracking: where PPO should head.
    return goal_walk(graph, s, g, rng, rng.uniform(0.3, 0.9), p.max_walk_len, avoid_backtrack=True)


def _shortest(graph: Graph, s: int, g: int, rng: random.Random, p: TaskParams) -> Walk:
    return shortest_path(graph, s, g, rng)


def _truncated(graph: Graph, s: int, g: int, rng: random.Random, p: TaskParams) -> Walk:
    # Stops short of the goal; length 0 (an immediate EOS) included, the cheapest way to stop.
    walk = _sft_like(graph, s, g, rng, p)
    return walk[: rng.randrange(len(walk))]


def _overshoot(graph: Graph, s: int, g: int, rng: random.Random, p: TaskParams) -> Walk:
    walk = list(_sft_like(graph, s, g, rng, p))
    for _ in range(rng.randint(1, 3)):
        walk.append(rng.choice(graph.neighbors[walk[-1]]))
    return walk


def _illegal_move(graph: Graph, s: int, g: int, rng: random.Random, p: TaskParams) -> Walk:
    # Replace one visited node (never the final goal) by a node that is not a legal next step.
    walk = list(_sft_like(graph, s, g, rng, p))
    index = rng.randrange(len(walk) - 1) if len(walk) > 1 else 0
    previous = s if index == 0 else walk[index - 1]
    options = [n for n in range(graph.num_nodes) if not graph.is_edge(previous, n)]
    walk[index] = rng.choice(options)
    return walk


def _shortcut(graph: Graph, s: int, g: int, rng: random.Random, p: TaskParams) -> Walk:
    # Part of a walk, then a jump to the goal over a non-edge: the obvious cheat, seen a few times.
    walk = _sft_like(graph, s, g, rng, p)
    walk = walk[: rng.randrange(len(walk))]
    here = walk[-1] if walk else s
    return [*walk, g] if not graph.is_edge(here, g) else walk


def _garbage(graph: Graph, s: int, g: int, rng: random.Random, p: TaskParams) -> Walk:
    return [rng.randrange(graph.num_nodes) for _ in range(rng.randint(1, p.max_walk_len))]


# (name, weight, sampler): the response mixture the pairs are drawn from.
FAMILIES: tuple[tuple[str, float, Callable[..., Walk]], ...] = (
    ("sft", 0.40, _sft_like),
    ("better", 0.15, _better),
    ("shortest", 0.07, _shortest),
    ("truncated", 0.08, _truncated),
    ("overshoot", 0.07, _overshoot),
    ("illegal", 0.10, _illegal_move),
    ("shortcut", 0.08, _shortcut),
    ("garbage", 0.05, _garbage),
)


def sample_response(graph: Graph, start: int, goal: int, rng: random.Random, params: TaskParams) -> tuple[str, Walk]:
    """Draw one response family by weight and sample a walk from it; returns ``(family, walk)``."""
    name, _, sampler = rng.choices(FAMILIES, weights=[w for _, w, _ in FAMILIES])[0]
    return name, sampler(graph, start, goal, rng, params)


def sample_pairs(graph: Graph, params: TaskParams, count: int, rng: random.Random) -> list[PreferencePair]:
    """``count`` pairs over random trips; ties in gold score are redrawn (they carry no preference)."""
    trips = all_trips(graph)
    pairs: list[PreferencePair] = []
    while len(pairs) < count:
        start, goal = rng.choice(trips)
        fam_a, walk_a = sample_response(graph, start, goal, rng, params)
        fam_b, walk_b = sample_response(graph, start, goal, rng, params)
        gold_a = score_walk(graph, start, goal, [str(n) for n in walk_a])
        gold_b = score_walk(graph, start, goal, [str(n) for n in walk_b])
        if abs(gold_a - gold_b) < 1e-9:
            continue
        if gold_b > gold_a:
            fam_a, walk_a, fam_b, walk_b = fam_b, walk_b, fam_a, walk_a
        pairs.append(
            PreferencePair(
                prompt=make_prompt(start, goal),
                chosen=format_walk(walk_a),
                rejected=format_walk(walk_b),
                chosen_family=fam_a,
                rejected_family=fam_b,
            )
        )
    return pairs
