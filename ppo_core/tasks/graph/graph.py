"""The fixed random graph of the shortest-path task, its distances, and walks on it.

Pure python (no torch) so the gold scorer stays cheap and trivially deterministic: every
random choice goes through an explicit ``random.Random``.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Graph:
    """An undirected, connected graph on nodes ``0 .. num_nodes - 1`` with all-pairs distances."""

    num_nodes: int
    neighbors: tuple[tuple[int, ...], ...]  # sorted adjacency lists
    distances: tuple[tuple[int, ...], ...]  # distances[a][b] = number of edges on a shortest a-b path

    @classmethod
    def from_edges(cls, num_nodes: int, edges: list[tuple[int, int]]) -> Graph:
        """Build a graph from an undirected edge list; raises ``ValueError`` if not connected."""
        adjacency: list[set[int]] = [set() for _ in range(num_nodes)]
        for a, b in edges:
            if a == b:
                raise ValueError(f"self-loop at node {a}")
            adjacency[a].add(b)
            adjacency[b].add(a)
        neighbors = tuple(tuple(sorted(nbrs)) for nbrs in adjacency)
        distances = tuple(_bfs_distances(neighbors, source) for source in range(num_nodes))
        if any(d < 0 for row in distances for d in row):
            raise ValueError("graph is not connected")
        return cls(num_nodes=num_nodes, neighbors=neighbors, distances=distances)

    def edges(self) -> list[tuple[int, int]]:
        """Return each undirected edge once, as ``(small, large)``, sorted."""
        return [(a, b) for a in range(self.num_nodes) for b in self.neighbors[a] if a < b]

    def is_edge(self, a: int, b: int) -> bool:
        """Whether one step from ``a`` to ``b`` is a legal move."""
        return b in self.neighbors[a]

    def diameter(self) -> int:
        """The largest shortest-path distance between two nodes."""
        return max(max(row) for row in self.distances)


def _bfs_distances(neighbors: tuple[tuple[int, ...], ...], source: int) -> tuple[int, ...]:
    """Breadth-first distances from ``source`` (-1 for unreachable nodes)."""
    dist = [-1] * len(neighbors)
    dist[source] = 0
    queue = deque([source])
    while queue:
        node = queue.popleft()
        for nxt in neighbors[node]:
            if dist[nxt] < 0:
                dist[nxt] = dist[node] + 1
                queue.append(nxt)
    return tuple(dist)


def random_connected_graph(num_nodes: int, num_edges: int, max_degree: int, rng: random.Random) -> Graph:
    """Sample a connected graph: a random tree plus random extra edges.

    Each new tree node attaches to one of the few most recently added nodes, which makes
    the tree long and thin; the extra edges then add cycles (so there are many valid but
    wasteful walks) without collapsing the diameter. ``max_degree`` keeps hubs from
    turning every pair into a two-step trip.
    """
    if num_edges < num_nodes - 1:
        raise ValueError("a connected graph needs at least num_nodes - 1 edges")
    order = list(range(num_nodes))
    rng.shuffle(order)
    degree = [0] * num_nodes
    edges: set[tuple[int, int]] = set()

    def add(a: int, b: int) -> None:
        edges.add((min(a, b), max(a, b)))
        degree[a] += 1
        degree[b] += 1

    for i in range(1, num_nodes):
        recent = [n for n in order[max(0, i - 3) : i] if degree[n] < max_degree] or order[:i]
        add(order[i], rng.choice(recent))
    # Bounded retries: a dense request on a small graph may be unsatisfiable under max_degree.
    for _ in range(100 * num_edges):
        if len(edges) >= num_edges:
            break
        a, b = rng.sample(range(num_nodes), 2)
        if (min(a, b), max(a, b)) not in edges and degree[a] < max_degree and degree[b] < max_degree:
            add(a, b)
    return Graph.from_edges(num_nodes, sorted(edges))


def shortest_path(graph: Graph, start: int, goal: int, rng: random.Random) -> list[int]:
    """A uniformly-chosen-at-each-step shortest path, as the nodes visited after ``start``."""
    path: list[int] = []
    node = start
    while node != goal:
        closer = [n for n in graph.neighbors[node] if graph.distances[n][goal] < graph.distances[node][goal]]
        node = rng.choice(closer)
        path.append(node)
    return path


def biased_walk(
    graph: Graph,
    start: int,
    goal: int,
    rng: random.Random,
    greedy_prob: float,
    max_len: int,
    avoid_backtrack: bool = False,
) -> list[int] | None:
    """A random walk from ``start`` that stops on reaching ``goal``; ``None`` past ``max_len`` steps.

    Each step is, with probability ``greedy_prob``, a step that gets closer to the goal,
    otherwise a uniform step to a neighbour (with ``avoid_backtrack``, not straight back
    where it came from unless it must: a cheap way to get better-than-SFT walks).
    """
    walk: list[int] = []
    node, previous = start, -1
    while len(walk) < max_len:
        neighbors = graph.neighbors[node]
        if rng.random() < greedy_prob:
            choices = [n for n in neighbors if graph.distances[n][goal] < graph.distances[node][goal]]
        elif avoid_backtrack:
            choices = [n for n in neighbors if n != previous] or list(neighbors)
        else:
            choices = list(neighbors)
        previous, node = node, rng.choice(choices)
        walk.append(node)
        if node == goal:
            return walk
    return None


def goal_walk(
    graph: Graph,
    start: int,
    goal: int,
    rng: random.Random,
    greedy_prob: float,
    max_len: int,
    avoid_backtrack: bool = False,
) -> list[int]:
    """A :func:`biased_walk` that reaches the goal within ``max_len`` (resampled until it does).

    Falls back to a shortest path after many misses so it always terminates, even for a
    tiny ``greedy_prob``.
    """
    for _ in range(200):
        walk = biased_walk(graph, start, goal, rng, greedy_prob, max_len, avoid_backtrack)
        if walk is not None:
            return walk
    return shortest_path(graph, start, goal, rng)
