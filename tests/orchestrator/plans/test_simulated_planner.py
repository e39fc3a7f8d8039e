"""The simulated planner's templates: which shape a goal gets."""

from __future__ import annotations

from orchestrator.plans import simulated_planner


def test_choose_shape_reads_the_goals_words():
    assert simulated_planner.choose_shape("Compare Postgres and SQLite") == "research"
    assert simulated_planner.choose_shape("Implement the export feature") == "build"
    assert simulated_planner.choose_shape("Draft the quarterly report") == "write"
    assert simulated_planner.choose_shape("Something else entirely") == "research"
