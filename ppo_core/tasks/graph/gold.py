"""The gold scorer: how close a response walk is to a shortest path, in [0, 1].

This is the "true" objective PPO is evaluated on; the policy only ever sees the proxy
reward model. Rules, for the walk given by the response's words (the start node is
implied by the prompt and is not repeated in the response):

- Any word that is not a node name, or any step that is not an edge (this includes
  standing still), makes the walk invalid: score 0.0, the minimum. Garbage and empty
  responses score 0.0 too.
- A valid walk of L steps that visits the goal scores ``d / L``, with ``d`` the
  start-goal distance: exactly 1.0 for a shortest path. The walk is judged up to its end,
  so steps taken after reaching the goal count in L (wasteful, so they lower the score).
- A valid walk that never visits the goal gets partial credit below ``PARTIAL_MAX``:
  ``PARTIAL_MAX * (1 + progress) / (1 + d + wasted)`` where ``progress`` is how much
  closer to the goal it ends (never negative) and ``wasted = L - progress``. It grows
  with progress, shrinks with wasted steps, and is always positive, so every valid walk
  beats every invalid one.
"""

from __future__ import annotations

from ppo_core.tasks.graph.graph import Graph
from ppo_core.tasks.graph.text import parse_prompt, split_response

PARTIAL_MAX = 0.2


def score_walk(graph: Graph, start: int, goal: int, words: list[str]) -> float:
    """Gold score of the walk spelled by ``words`` for the trip ``start`` -> ``goal``."""
    if not words:
        return 0.0
    node_of = {str(n): n for n in range(graph.num_nodes)}
    node, reached = start, False
    for word in words:
        nxt = node_of.get(word)
        if nxt is None or not graph.is_edge(node, nxt):
            return 0.0
        node = nxt
        reached = reached or node == goal
    steps = len(words)
    start_dist = graph.distances[start][goal]
    if reached:
        return start_dist / steps
    progress = max(0, start_dist - graph.distances[node][goal])
    return PARTIAL_MAX * (1 + progress) / (1 + start_dist + steps - progress)


class GoldScorer:
    """Callable ``(prompts, responses) -> scores`` bound to one graph.

    A small class rather than a closure so a task object can be pickled into tuner
    worker processes.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def __call__(self, prompts: list[str], responses: list[str]) -> list[float]:
        """Score each response against its prompt; raises ``ValueError`` on a malformed prompt."""
        if len(prompts) != len(responses):
            raise ValueError(f"got {len(prompts)} prompts but {len(responses)} responses")
        scores = []
        for prompt, response in zip(prompts, responses, strict=True):
            start, goal = parse_prompt(prompt)
            scores.append(score_walk(self.graph, start, goal, split_response(response)))
        return scores
