"""Synthetic DAGs for the scheduler benchmark, and their lower bounds. Pure: no Django, no I/O.

Every duration is a deterministic function of (DAG seed, node key, median, sigma) — a
lognormal draw from a generator seeded with a SHA-256 of those values — so the engine's workers,
the reference strategies and the lower bound all see the same duration for the same node,
in every process and on every machine.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from dataclasses import dataclass, field

# Durations are clipped to [median / CLIP, median * CLIP]: a lognormal with sigma 0.6 reaches
# past 6x its median about once in a thousand draws; the clip keeps one freak node from
# dominating a run, and the lower bound uses the clipped value, so nothing is hidden.
CLIP = 8.0


def seeded_random(*parts: object) -> random.Random:
    """A generator with the same draws for the same ``parts`` in every process."""
    digest = hashlib.sha256("\x1f".join(str(part) for part in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def duration_s(seed: int, key: str, median_s: float, sigma: float) -> float:
    """The duration of node ``key`` in the DAG built from ``seed``: lognormal(median, sigma), clipped."""
    if median_s <= 0:
        raise ValueError(f"median_s must be positive, got {median_s}")
    draw = seeded_random("duration", seed, key).lognormvariate(math.log(median_s), sigma)
    return round(min(median_s * CLIP, max(median_s / CLIP, draw)), 4)


@dataclass(frozen=True)
class Dag:
    """Nodes in a topological order, edges (upstream, downstream), and how durations are drawn."""

    name: str
    kind: str
    seed: int
    keys: list[str]
    edges: list[tuple[str, str]]
    median_s: float
    sigma: float
    durations: dict[str, float] = field(default_factory=dict)

    @classmethod
    def build(cls, name: str, kind: str, seed: int, keys, edges, median_s: float, sigma: float) -> Dag:
        durations = {key: duration_s(seed, key, median_s, sigma) for key in keys}
        return cls(name, kind, seed, list(keys), list(edges), median_s, sigma, durations)

    @property
    def upstreams(self) -> dict[str, list[str]]:
        ups: dict[str, list[str]] = {key: [] for key in self.keys}
        for up, down in self.edges:
            ups[down].append(up)
        return ups

    @property
    def downstreams(self) -> dict[str, list[str]]:
        downs: dict[str, list[str]] = {key: [] for key in self.keys}
        for up, down in self.edges:
            downs[up].append(down)
        return downs

    @property
    def total_work_s(self) -> float:
        return sum(self.durations.values())

    @property
    def critical_path_s(self) -> float:
        """The heaviest path through the DAG, node durations summed (keys are topological)."""
        ups = self.upstreams
        finish: dict[str, float] = {}
        for key in self.keys:
            finish[key] = self.durations[key] + max((finish[u] for u in ups[key]), default=0.0)
        return max(finish.values(), default=0.0)

    def lower_bound_s(self, cap: int | None) -> float:
        """max(critical path, total work / cap): no schedule with ``cap`` slots can beat it."""
        if cap is None:
            return self.critical_path_s
        return max(self.critical_path_s, self.total_work_s / cap)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "seed": self.seed,
            "nodes": len(self.keys),
            "edges": len(self.edges),
            "median_s": self.median_s,
            "sigma": self.sigma,
            "total_work_s": round(self.total_work_s, 3),
            "critical_path_s": round(self.critical_path_s, 3),
        }


def _key(index: int, width: int = 3) -> str:
    return f"n{index:0{width}d}"


def layered(width: int = 10, depth: int = 20, *, seed: int = 1, median_s: float = 0.5, sigma: float = 0.6) -> Dag:
    """``depth`` layers of ``width`` nodes; each node below the first depends on 1–3 nodes of the layer above."""
    rng = seeded_random("layered", seed, width, depth)
    keys = [f"l{layer:02d}_{i:02d}" for layer in range(depth) for i in range(width)]
    edges = []
    for layer in range(1, depth):
        above = [f"l{layer - 1:02d}_{i:02d}" for i in range(width)]
        for i in range(width):
            for up in sorted(rng.sample(above, rng.randint(1, min(3, width)))):
                edges.append((up, f"l{layer:02d}_{i:02d}"))
    return Dag.build(f"layered {width}x{depth}", "layered", seed, keys, edges, median_s, sigma)


def fan(width: int = 100, *, seed: int = 2, median_s: float = 0.5, sigma: float = 0.6) -> Dag:
    """One node, ``width`` nodes that depend on it, one node that depends on all of them."""
    middle = [f"m{i:03d}" for i in range(width)]
    keys = ["source", *middle, "sink"]
    edges = [("source", m) for m in middle] + [(m, "sink") for m in middle]
    return Dag.build(f"fan 1-{width}-1", "fan", seed, keys, edges, median_s, sigma)


def chain(length: int = 50, *, seed: int = 3, median_s: float = 0.5, sigma: float = 0.6) -> Dag:
    keys = [_key(i) for i in range(length)]
    edges = list(itertools.pairwise(keys))
    return Dag.build(f"chain {length}", "chain", seed, keys, edges, median_s, sigma)


def random_dag(
    nodes: int = 300, *, seed: int = 4, median_s: float = 0.5, sigma: float = 0.6, max_parents: int = 3
) -> Dag:
    """Node i depends on 0..max_parents nodes drawn uniformly among nodes 0..i-1 (so it is acyclic)."""
    rng = seeded_random("random", seed, nodes, max_parents)
    keys = [_key(i) for i in range(nodes)]
    edges = []
    for i in range(1, nodes):
        for j in sorted(rng.sample(range(i), min(i, rng.randint(0, max_parents)))):
            edges.append((keys[j], keys[i]))
    return Dag.build(f"random {nodes}", "random", seed, keys, edges, median_s, sigma)


def independent(count: int = 22, *, seed: int = 5, median_s: float = 1.0, sigma: float = 0.3) -> Dag:
    """``count`` tasks with no dependencies (the rate-limit storm)."""
    keys = [f"t{i:02d}" for i in range(count)]
    return Dag.build(f"{count} independent", "independent", seed, keys, [], median_s, sigma)


def hops_to_end(dag: Dag) -> dict[str, int]:
    """Nodes on the longest path from each node to a sink, itself included.

    The engine ranks ready tasks by their remaining path weighted by *estimated* durations; a
    benchmark agent's estimate is the same for every node (its latency median), so the engine's
    rank is this hop count times a constant.
    """
    downs = dag.downstreams
    hops: dict[str, int] = {}
    for key in reversed(dag.keys):
        hops[key] = 1 + max((hops[d] for d in downs[key]), default=0)
    return hops


def policy_schedule_s(dag: Dag, cap: int) -> float:
    """Makespan of the engine's admission policy executed with zero overhead.

    List scheduling with ``cap`` slots: whenever a slot is free, the ready node with the longest
    remaining path (in hops, see hops_to_end) starts, then the earliest ready, then key order —
    the engine's order (rank, priority, ready_at, pk). Not a lower bound: it shows how much of
    the gap to the lower bound is the policy's (it does not know the durations) and how much is
    overhead.
    """
    import heapq

    ups, downs, hops = dag.upstreams, dag.downstreams, hops_to_end(dag)
    order = {key: i for i, key in enumerate(dag.keys)}
    waiting = {key: len(ups[key]) for key in dag.keys}
    ready = [(-hops[k], 0.0, order[k], k) for k in dag.keys if waiting[k] == 0]
    heapq.heapify(ready)
    running: list[tuple[float, str]] = []
    now = 0.0
    while ready or running:
        while ready and len(running) < cap:
            _, _, _, key = heapq.heappop(ready)
            heapq.heappush(running, (now + dag.durations[key], key))
        now, key = heapq.heappop(running)
        for down in downs[key]:
            waiting[down] -= 1
            if waiting[down] == 0:
                heapq.heappush(ready, (-hops[down], now, order[down], down))
    return now
