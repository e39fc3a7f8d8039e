"""The pre-flight's wide steps folded (engine/preflight_groups.py)."""

from __future__ import annotations

from orchestrator.engine.preflight import NodePreview
from orchestrator.engine.preflight_groups import fold


def node(key: str, agent: str = "writer", *, after: tuple[str, ...] = ("scope",), critical=False, s=10.0):
    return NodePreview(
        key=key, title=f"Write {key}", agent=agent, gate="", depends_on=after, duration_s=s, on_critical_path=critical
    )


def test_a_narrow_step_keeps_a_card_per_subtask():
    layer = [node(f"s{i}") for i in range(8)]
    assert fold(layer) == layer


def test_a_wide_steps_like_subtasks_fold_into_one_card_and_the_others_keep_theirs():
    sections = [node(f"section-{i:03}", s=8.0 + i % 7) for i in range(1, 101)]
    critical = node("section-000", critical=True)
    odd = [node("index", "researcher"), node("glossary", "researcher")]  # too few alike to fold
    other_upstream = [node(f"extra-{i}", after=("outline",)) for i in range(3)]
    cards = fold([critical, *sections, *odd, *other_upstream])
    assert cards[0] is critical  # the critical path's subtask keeps its card
    group = cards[1]
    assert group.is_group and group.count == 100 and group.agent == "writer" and group.depends_on == ("scope",)
    assert group.keys_text == "section-001 … section-100"
    assert group.duration_range_s == (8.0, 14.0)
    assert cards[2:4] == odd
    assert cards[4].is_group and cards[4].count == 3 and cards[4].depends_on == ("outline",)
    assert len(cards) == 5
