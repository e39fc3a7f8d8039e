"""The run page's parts as dashboard/fragments.py renders them (the page and the live frames)."""

from __future__ import annotations

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard import fragments
from orchestrator.engine import runs
from orchestrator.models import Run


def test_the_totals_and_the_lanes_of_a_frame_share_one_read_of_the_run_and_its_agents(
    make_plan, demo_agents, priced_limit, no_broker
):
    """A live frame reads the run, then renders its totals and lanes from the same reads. The totals
    read the run again and both read the agents: 13 statements a frame of a running 200-task run,
    now 11 (the broadcaster renders several frames a second)."""
    plan = make_plan({"scope": ("researcher", []), "a": ("researcher", ["scope"]), "write": ("writer", ["a"])})
    run = Run.objects.get(pk=runs.launch(plan, cap=2, budget_usd="5").pk)
    viewer = fragments.Viewer(False, False)
    fragments.render_parts(run, viewer, {"totals", "lanes"})  # the first frame reads the approved plan, once
    with CaptureQueriesContext(connection) as queries:
        html = fragments.render_parts(run, viewer, {"totals", "lanes"})
    read = [re.search(r'FROM "(\w+)"', q["sql"]).group(1) for q in queries.captured_queries if "FROM" in q["sql"]]
    assert read.count("orchestrator_agent") == 1
    assert "orchestrator_run" not in read
    assert 'id="run-totals"' in html and 'id="agent-lanes"' in html
    assert "researcher" in html and "writer" in html  # both agents' lanes


def test_the_tickers_event_for_a_silent_worker_redraws_its_tasks_row_panel_and_lane(
    make_plan, demo_agents, no_broker, settings
):
    """A silent worker sends no events, and the page redraws a task on its events: the ticker's
    `attempt.silent` brings the frame that says it on the row, the panel's head and the lane."""
    from datetime import timedelta

    from django.utils import timezone

    from dashboard import frames
    from orchestrator.engine import execution, silences
    from orchestrator.models import Attempt, TaskRun

    settings.GLASSBOX_LEASE_S = 15.0
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "vm:4121")
    before = Run.objects.get(pk=run.pk).last_event_seq
    TaskRun.objects.filter(pk=claim.task.pk).update(lease_expires_at=timezone.now() + timedelta(seconds=3))
    assert silences.announce()["silent"] == 1
    viewer = fragments.Viewer(False, False)
    batch = frames.render_batch(run.pk, before, viewer, watched_task=claim.task.pk)
    assert batch is not None and claim.task.pk in batch.task_ids
    row = re.search(rf'<div id="task-{claim.task.pk}".*?</div></div>', batch.html, re.S).group(0)
    assert '<div class="wait-reason silent">no word from worker vm:4121 since ' in row
    assert 'data-activity="no word since ' in row  # the DAG's node says it too, short enough for a node
    assert '<span class="wait-reason silent">no word from worker vm:4121 since ' in batch.html  # the panel's head
    assert '<span class="lane-silent" title="no word from worker vm:4121' in batch.html  # the agent's lane
