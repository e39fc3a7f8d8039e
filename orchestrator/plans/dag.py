"""Statistics of a plan's DAG: cycles, layers, remaining paths and the critical path.

Pure functions on subtask keys and `(upstream_key, downstream_key)` edges; no database.
`build_graph` and `layers` take any hashable nodes (the run page's DAG layers task ids).
Every result that is a list of keys follows the order of `keys` wherever the graph leaves a
choice, so the same plan always gives the same answer.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import networkx as nx

Edge = tuple[str, str]
Node = TypeVar("Node", bound=Hashable)


class CycleError(ValueError):
    """The graph is not a DAG: an operation that needs a topological order cannot proceed."""


@dataclass(frozen=True)
class DagSummary:
    subtasks: int
    edges: int
    depth: int  # number of layers (topological generations)
    widest_layer: int  # size of the largest layer
    critical_path: list[str] = field(default_factory=list)
    critical_path_s: float = 0.0


def build_graph(keys: Iterable[Node], edges: Iterable[tuple[Node, Node]]) -> nx.DiGraph:
    """A DiGraph of `keys`; an edge naming a key that is not in `keys` is a ValueError."""
    graph = nx.DiGraph()
    graph.add_nodes_from(keys)
    for upstream, downstream in edges:
        for key in (upstream, downstream):
            if key not in graph:
                raise ValueError(f"edge {upstream!r} → {downstream!r} names unknown key {key!r}")
        graph.add_edge(upstream, downstream)
    return graph


def find_cycles(keys: Sequence[str], edges: Iterable[Edge]) -> list[list[str]]:
    """One cycle per tangle of mutually dependent keys, each cycle listing every key on it.

    A cycle `a → b → c → a` comes back as `["a", "b", "c"]`, starting at the key that comes
    first in `keys`. Self-loops are ignored (the plan validator reports them as "depends on
    itself"). Listing every elementary cycle can take exponential time, so each strongly
    connected component yields one cycle: enough to show the problem; once it is fixed the
    next validation shows any cycle left.
    """
    graph = build_graph(keys, edges)
    graph.remove_edges_from(list(nx.selfloop_edges(graph)))
    order = _order_index(keys)
    cycles = []
    for component in nx.strongly_connected_components(graph):
        if len(component) < 2:
            continue
        start = min(component, key=order.__getitem__)
        cycle_edges = nx.find_cycle(graph.subgraph(component), source=start)
        cycle = [upstream for upstream, _ in cycle_edges]
        cycles.append(_rotate_to_first(cycle, order))
    cycles.sort(key=lambda cycle: order[cycle[0]])
    return cycles


def layers(keys: Sequence[Node], edges: Iterable[tuple[Node, Node]]) -> list[list[Node]]:
    """Topological generations: layer 0 has no upstream, layer n depends only on layers < n."""
    graph = _acyclic_graph(keys, edges)
    order = _order_index(keys)
    return [sorted(generation, key=order.__getitem__) for generation in nx.topological_generations(graph)]


def remaining_path_lengths(keys: Sequence[str], edges: Iterable[Edge], weight: Mapping[str, float]) -> dict[str, float]:
    """For each key: the heaviest path from it (its own weight included) to any sink.

    The scheduler ranks ready tasks by this number (critical path first). A key missing from
    `weight` weighs 0.
    """
    return SinksFirst.of(keys, edges).remaining_path_lengths(weight)


@dataclass(frozen=True)
class SinksFirst:
    """A DAG in reverse topological order with each key's successors: what remaining path lengths
    need, prepared once for a graph whose weights change (the run page's ETA at every frame)."""

    keys: tuple[str, ...]
    order: tuple[str, ...]  # every key after all of its successors
    successors: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, keys: Sequence[str], edges: Iterable[Edge]) -> SinksFirst:
        graph = _acyclic_graph(keys, edges)
        order = tuple(reversed(list(nx.topological_sort(graph))))
        return cls(tuple(keys), order, {key: tuple(graph.successors(key)) for key in order})

    def remaining_path_lengths(self, weight: Mapping[str, float]) -> dict[str, float]:
        """As the module's `remaining_path_lengths`, without building a graph."""
        remaining: dict[str, float] = {}
        for key in self.order:
            downstream = max((remaining[successor] for successor in self.successors[key]), default=0.0)
            remaining[key] = float(weight.get(key, 0.0)) + downstream
        return {key: remaining[key] for key in self.keys}


def critical_path(keys: Sequence[str], edges: Iterable[Edge], weight: Mapping[str, float]) -> tuple[list[str], float]:
    """The heaviest source-to-sink path and its total weight (ties go to the earlier key)."""
    edges = list(edges)
    if not keys:
        return [], 0.0
    graph = _acyclic_graph(keys, edges)
    remaining = remaining_path_lengths(keys, edges, weight)
    order = _order_index(keys)

    def heaviest(candidates: Iterable[str]) -> str:
        return min(candidates, key=lambda key: (-remaining[key], order[key]))

    path = [heaviest(keys)]
    while successors := list(graph.successors(path[-1])):
        path.append(heaviest(successors))
    return path, remaining[path[0]]


def summarize(keys: Sequence[str], edges: Iterable[Edge], weight: Mapping[str, float]) -> DagSummary:
    edges = list(edges)
    generations = layers(keys, edges)
    path, length = critical_path(keys, edges, weight)
    return DagSummary(
        subtasks=len(keys),
        edges=len(set(edges)),
        depth=len(generations),
        widest_layer=max((len(generation) for generation in generations), default=0),
        critical_path=path,
        critical_path_s=length,
    )


def _acyclic_graph(keys: Sequence[Node], edges: Iterable[tuple[Node, Node]]) -> nx.DiGraph:
    graph = build_graph(keys, edges)
    if not nx.is_directed_acyclic_graph(graph):
        cycle = [upstream for upstream, _ in nx.find_cycle(graph)]
        raise CycleError("the graph has a cycle: " + " → ".join([*cycle, cycle[0]]))
    return graph


def _order_index(keys: Sequence[Node]) -> dict[Node, int]:
    index: dict[Node, int] = {}
    for position, key in enumerate(keys):
        index.setdefault(key, position)
    return index


def _rotate_to_first(cycle: list[str], order: Mapping[str, int]) -> list[str]:
    first = min(range(len(cycle)), key=lambda i: order[cycle[i]])
    return cycle[first:] + cycle[:first]
