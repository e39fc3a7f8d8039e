"""The run page's timeline."""

from __future__ import annotations

from orchestrator.readmodels.gantt import assign_tracks, gantt

from .conftest import start


def test_assign_tracks_uses_the_fewest_tracks():
    intervals = [(0, 10), (5, 15), (10, 20), (12, None), (30, 40)]
    tracks = assign_tracks(intervals)
    assert tracks == [0, 1, 0, 2, 0]
    # An open interval (still running) keeps its track for good.
    assert assign_tracks([(0, None), (5, 6), (7, 8)]) == [0, 1, 1]
    assert assign_tracks([]) == []


def test_gantt_puts_overlapping_attempts_on_separate_tracks(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", []), "w": ("writer", ["a", "b"])})
    a, b = run.tasks.get(subtask__key="a"), run.tasks.get(subtask__key="b")
    start(a, ago_s=5)
    start(b, ago_s=3)
    timeline = gantt(run)
    lanes = {lane.agent: lane for lane in timeline.lanes}
    assert [len(track) for track in lanes["researcher"].tracks] == [1, 1]
    assert lanes["writer"].tracks == [[]]
    bar = lanes["researcher"].tracks[0][0]
    assert bar.key == "a" and bar.end_ms is None and bar.worker == "w:1"
    assert timeline.bars == 2
