"""Running tasks' live progress and streamed output as the broadcaster knows them: pieces placed
at their offsets, the saved rows, and a percentage that steps back only for a new attempt."""

from __future__ import annotations

from django.utils import timezone

from dashboard import frames
from dashboard.live_outputs import LiveOutputs


def test_a_percentage_goes_back_only_for_a_new_attempt():
    live = LiveOutputs()
    now = timezone.now()
    live.add_pieces([[1, 60, 0, "abc", 1]], watched=set())
    assert live.take(set()) == ({1: 60}, {})
    live.add_saved(frames.SavedProgress({1: 40}, {}, now, {1: 1}))  # saved before the last piece
    assert live.take(set()) == ({1: 60}, {})  # its row is redrawn: 60% goes on top again
    live.add_saved(frames.SavedProgress({1: 5}, {}, now, {1: 2}))  # the retry's first save
    assert live.take(set()) == ({1: 5}, {})
    live.add_pieces([[1, 70, 3, "def", 1]], watched=set())  # the first attempt's, arriving late
    assert live.take(set()) == ({}, {})
    live.add_pieces([[1, 8, 0, "ghi", 2]], watched=set())
    assert live.take(set()) == ({1: 8}, {})
    # An event frame redraws its row from the saved progress: the higher percentage of the same
    # attempt goes back on top; a saved one of another attempt is left alone.
    assert live.over_saved({1: (2, 3)}) == {1: 8}
    assert live.over_saved({1: (2, 9)}) == {}
    assert live.over_saved({1: (3, 0)}) == {}
    assert live.over_saved({}) == {} and live.shown == {}  # it no longer runs: forgotten


def test_live_outputs_place_pieces_at_their_offsets_and_catch_up_from_the_saved_output():
    live = LiveOutputs()
    live.add_pieces([[1, 10, 0, "abc"], [2, 5, 0, "not watched"]], watched={1})
    live.add_pieces([[1, 20, 3, "def"]], watched={1})
    assert live.take({1}) == ({1: 20, 2: 5}, {1: "abcdef"})
    live.add_pieces([[1, 30, 9, "jkl"]], watched={1})  # a piece was lost (at-most-once): it waits
    assert live.take({1}) == ({1: 30}, {})
    saved = frames.SavedProgress(progress={1: 25}, outputs={1: "abcdefghi"}, latest=timezone.now())
    live.add_saved(saved)  # the host saved what the lost piece carried
    live.add_pieces([[1, 40, 9, "jkl"]], watched={1})
    assert live.take({1}) == ({1: 40}, {1: "abcdefghijkl"})
    live.add_pieces([[1, 50, 12, "mno"]], watched={1})
    assert live.take(set()) == ({1: 50}, {})  # nobody watches any more: its text is forgotten
    assert live.text == {}
