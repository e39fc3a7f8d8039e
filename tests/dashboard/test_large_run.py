"""A finished 293-task run stays readable and light: its page is under 300 KB, the Result shows
the final tasks' summaries with each full output one click away (and whole in the downloads),
and the event log loads older events on demand."""

from __future__ import annotations

import json
import re

import pytest

from tests.large_run import finished_large_run

pytestmark = pytest.mark.django_db

MAX_PAGE_BYTES = 300 * 1024


@pytest.fixture
def large(client, personas):
    client.force_login(personas["launcher"])
    return finished_large_run(launched_by=personas["launcher"])


def test_the_finished_293_task_run_page_is_under_300_kb(client, large):
    assert large.tasks.count() == 293 and large.status == "succeeded"
    response = client.get(f"/runs/{large.pk}/")
    assert response.status_code == 200
    size = len(response.content)
    assert size < MAX_PAGE_BYTES, f"the page weighs {size / 1024:.0f} KB"
    html = response.content.decode()
    # ... and still carries every task: a row each, a node each in the graph
    assert len(re.findall(r'<div id="task-\d+" class="grid-row task-row', html)) == 293
    graph = json.loads(re.search(r"data-graph='([^']*)'", html).group(1))
    assert len(graph["nodes"]) == 293 and len(graph["edges"]) == 12 + 240 + 240 + 12 + 30 + 12


def test_the_result_shows_summaries_with_each_full_output_one_click_away(client, large):
    html = client.get(f"/runs/{large.pk}/").content.decode()
    result = html[html.index('id="run-result"') :]
    finals = re.findall(r'<article class="final-output" id="final-(\d+)">', result)
    assert len(finals) == 16  # the 15 cross-checks and the report
    report = large.tasks.get(subtask__key="report")
    assert report.output not in result  # not the whole output ...
    assert f'hx-get="/runs/{large.pk}/tasks/{report.pk}/output/"' in result  # ... one click away
    assert "tester worked on &quot;Cross-check 0&quot;" in result  # the summary, as plain text
    assert "The outputs of the other 277 tasks" in result
    full = client.get(f"/runs/{large.pk}/tasks/{report.pk}/output/").content.decode()
    assert "<h2>writer: Write the migration report</h2>" in full
    download = client.get(f"/runs/{large.pk}/download.md").content.decode()
    assert download.count("_[simulated output from") == 293  # every output, whole


def test_the_event_log_shows_the_newest_and_loads_older_events_on_demand(client, large):
    html = client.get(f"/runs/{large.pk}/").content.decode()
    shown = [int(s) for s in re.findall(r'<div id="event-(\d+)" class="grid-row event-row"', html)]
    assert len(shown) == 30 and shown[0] == large.last_event_seq
    oldest = shown[-1]
    assert f'hx-get="/runs/{large.pk}/events/?before={oldest}"' in html
    older = client.get(f"/runs/{large.pk}/events/?before={oldest}").content.decode()
    page = [int(s) for s in re.findall(r'<div id="event-(\d+)" class="grid-row event-row"', older)]
    assert page == list(range(oldest - 1, oldest - 31, -1))
    assert f"?before={page[-1]}" in older and 'hx-swap-oob="true"' in older  # the next "older" button
    options = client.get(f"/runs/{large.pk}/events/tasks/").content.decode()
    assert options.count("<option") == 293 and ">probe_3_7</option>" in options
