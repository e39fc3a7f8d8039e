"""Launching a run (engine/run_launch.py): when it starts."""

from __future__ import annotations

from orchestrator.engine import runs
from orchestrator.models import Run
from orchestrator.readmodels.records import RunRecord


def test_a_run_launched_at_once_starts_as_it_is_created_never_before(make_agent, make_plan):
    """`started_at` was taken before the ORM took `created_at`: the API gave a run that started
    microseconds before it was created."""
    make_agent("researcher")
    run = Run.objects.get(pk=runs.launch(make_plan({"a": ("researcher", [])})).pk)
    assert run.started_at == run.created_at
    record = RunRecord.of(run)
    assert record.started_at == record.created_at
