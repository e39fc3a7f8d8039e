"""The pre-flight's wide steps folded: a fan-out of like subtasks shown as one card.

A step of a 122-subtask plan stacked its 112 cards (7,925 px) while the next step sat off-screen
to the right. The run page's graph groups a fan-out; the pre-flight now does alike: in a step of
more than `FOLD_FROM` subtasks, those that share their agent, their gate and their upstream
subtasks are one card ("100 subtasks · writer · ≈ 8–14 s each · after scope"), their keys and
titles one click away. A subtask on the critical path keeps a card of its own (the path is drawn
through it), and so do groups too small to be worth folding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.engine.preflight import NodePreview

# A step with more subtasks than this folds its like ones; a group needs this many to fold.
FOLD_FROM = 8
GROUP_FROM = 3


@dataclass(frozen=True)
class NodeGroup:
    """Subtasks of one step with the same agent, gate and upstream subtasks."""

    members: tuple[NodePreview, ...]

    is_group = True

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def first(self) -> NodePreview:
        return self.members[0]

    @property
    def agent(self) -> str:
        return self.first.agent

    @property
    def gate(self) -> str:
        return self.first.gate

    @property
    def depends_on(self) -> tuple[str, ...]:
        return self.first.depends_on

    @property
    def keys_text(self) -> str:
        """The first and last keys, as the plan orders them: "section-001 … section-100"."""
        return f"{self.first.key} … {self.members[-1].key}"

    @property
    def duration_range_s(self) -> tuple[float, float]:
        durations = [member.duration_s for member in self.members]
        return min(durations), max(durations)


def fold(layer: Sequence[NodePreview]) -> list[NodePreview | NodeGroup]:
    """The step's cards: the layer as it is up to `FOLD_FROM` subtasks; beyond, like subtasks
    (`NodeGroup`) folded where at least `GROUP_FROM` share agent, gate and upstreams, each card at
    the place of its first member."""
    if len(layer) <= FOLD_FROM:
        return list(layer)
    alike: dict[tuple, list[NodePreview]] = {}
    for node in layer:
        if not node.on_critical_path:
            alike.setdefault((node.agent, node.gate, frozenset(node.depends_on)), []).append(node)
    folded = {id(node): members for members in alike.values() if len(members) >= GROUP_FROM for node in members}
    cards: list[NodePreview | NodeGroup] = []
    for node in layer:
        members = folded.get(id(node))
        if members is None:
            cards.append(node)
        elif members[0] is node:
            cards.append(NodeGroup(tuple(members)))
    return cards
