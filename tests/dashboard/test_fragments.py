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
