"""Live progress from a host: each attempt's new text since the last message, with its offset."""

from __future__ import annotations

from types import SimpleNamespace

from orchestrator.engine import live
from orchestrator.engine.agent_runner import AttemptRun
from orchestrator.providers.base import TextDelta


def attempt(task_id: int, run_id: int, number: int = 1) -> AttemptRun:
    claim = SimpleNamespace(task=SimpleNamespace(pk=task_id, run_id=run_id), attempt=SimpleNamespace(number=number))
    return AttemptRun(claim, expected_output=100)  # type: ignore[arg-type]


def test_each_message_carries_the_new_text_at_its_offset_and_only_what_changed():
    first, second, other_run = attempt(1, 7), attempt(2, 7), attempt(3, 8)
    first.add_text(TextDelta("Hello ", output_tokens=10))
    other_run.add_text(TextDelta("Elsewhere", output_tokens=5))
    assert live.changes([first, second, other_run]) == {7: [[1, 10, 0, "Hello ", 1]], 8: [[3, 5, 0, "Elsewhere", 1]]}
    first.add_text(TextDelta("world", output_tokens=20))
    assert live.changes([first, second, other_run]) == {7: [[1, 20, 6, "world", 1]]}
    assert live.changes([first, second, other_run]) == {}  # nothing new
    second.add_text(TextDelta("", output_tokens=50))  # progress without text
    assert live.changes([first, second]) == {7: [[2, 50, 0, "", 1]]}
    third = attempt(1, 7, number=2)  # a retry: its pieces say which attempt they are of
    third.add_text(TextDelta("Again", output_tokens=3))
    assert live.changes([third]) == {7: [[1, 3, 0, "Again", 2]]}
