"""The run page's checkpoints."""

from __future__ import annotations

from orchestrator.engine import scheduler
from orchestrator.models import Event
from orchestrator.readmodels.checkpoints import pending_checkpoints
from orchestrator.readmodels.graph import upstream_tasks

from .conftest import succeed


def test_pending_checkpoints_and_upstreams(launched):
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"], {"gate": "before"})})
    succeed(run.tasks.get(subtask__key="a"))
    scheduler.advance(run.pk)
    pending = pending_checkpoints(run)
    assert [(c.kind, c.task_run.subtask.key) for c in pending] == [("before", "b")]
    b = run.tasks.get(subtask__key="b")
    assert [t.subtask.key for t in upstream_tasks(b)] == ["a"]
    assert Event.objects.filter(run=run, type="checkpoint.created").exists()
