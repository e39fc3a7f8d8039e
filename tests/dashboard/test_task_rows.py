"""Task rows rendered once per look (dashboard/task_rows.py) are, byte for byte, the rows
task_row.html renders for each task, and rows that share a look cost one render."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.template.loader import render_to_string

from dashboard import task_rows
from orchestrator.engine import runs
from orchestrator.models import Run, TaskRun
from orchestrator.readmodels.tasks import task_views

pytestmark = pytest.mark.usefixtures("no_broker")

State = TaskRun.State
HELD_BACK = {"state": State.READY, "wait_reason": "held by the run cap"}


@pytest.fixture
def run(make_plan, demo_agents, priced_limit) -> Run:
    """A fan-out caught as its tasks wait for the cap, beside a task in each other kind of look."""
    tasks: dict = {"scope": ("researcher", [])}
    tasks |= {f"probe_{i}": ("researcher", ["scope"]) for i in range(6)}
    tasks["odd_one"] = ("researcher", ["scope"], {"title": "Say \"<b>hi</b>\" & 'bye' 1,000"})
    run = runs.launch(make_plan(tasks), budget_usd="5")
    by_key = {t.subtask.key: t.pk for t in run.tasks.select_related("subtask")}
    changes = {
        "scope": {"state": State.SUCCEEDED, "input_tokens": 1200, "output_tokens": 345, "cost_usd": Decimal("0.0123")},
        "probe_4": {"state": State.RUNNING, "progress": 40, "attempt_count": 1},
        "probe_5": {"state": State.FAILED, "error": "<script>alert(1)</script> " + "x" * 300, "attempt_count": 3},
    }
    for key, pk in by_key.items():
        TaskRun.objects.filter(pk=pk).update(**changes.get(key, HELD_BACK))
    return run


def direct(ctx: dict, views) -> list[str]:
    return [render_to_string(task_rows.TEMPLATE, {**ctx, "view": view}) for view in views]


@pytest.mark.parametrize("oob", [True, False])
def test_rows_by_look_are_the_rows_of_each_task(run, oob):
    views = task_views(run)
    ctx = {"run": run, "oob": oob}
    rows = task_rows.render_rows(ctx, views)
    assert rows == direct(ctx, views)
    odd = next(row for row, view in zip(rows, views, strict=True) if view.key == "odd_one")
    assert "Say &quot;&lt;b&gt;hi&lt;/b&gt;&quot; &amp; &#x27;bye&#x27; 1,000</a> <code>odd_one</code>" in odd
    assert f'id="task-{views[-1].pk}"' in odd and f"/runs/{run.pk}/tasks/{views[-1].pk}/" in odd


def test_rows_that_share_a_look_are_rendered_once(run, monkeypatch):
    renders = []

    def counting(template, ctx):
        renders.append(ctx["view"].key)
        return render_to_string(template, ctx)

    monkeypatch.setattr(task_rows, "render_to_string", counting)
    views = task_views(run)
    rows = task_rows.render_rows({"run": run, "oob": True}, views)
    assert len(rows) == 8
    # The five held-back tasks share one look; the succeeded, running and failed ones have theirs.
    assert sorted(renders) == sorted(["scope", "probe_4", "probe_5", task_rows.STAND_IN_KEY])
    assert sum("held back" in row for row in rows) == 5
