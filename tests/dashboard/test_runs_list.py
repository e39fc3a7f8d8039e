"""The runs page and its polled table: who may see them, and what each row says."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from dashboard.views.runs import format_duration
from orchestrator.engine import runs
from orchestrator.models import Agent, Attempt, Event, Run, TaskRun

pytestmark = pytest.mark.django_db

PAGES = ["/runs/", "/runs/table/"]


@pytest.mark.parametrize("url", PAGES)
def test_anonymous_is_sent_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={url}"


@pytest.mark.parametrize("url", PAGES)
def test_a_user_without_view_run_gets_403_and_the_denial_is_audited(client, personas, url):
    client.force_login(personas["outsider"])
    response = client.get(url)
    assert response.status_code == 403
    denial = Event.objects.get(type="access.denied")
    assert denial.actor_user == personas["outsider"]
    assert denial.payload == {"permission": "orchestrator.view_run", "action": f"GET {url}"}


def test_the_page_is_empty_before_any_run(client, personas):
    client.force_login(personas["viewer"])
    response = client.get("/runs/")
    assert response.status_code == 200
    assert "No runs yet." in response.text
    assert 'hx-trigger="every 2s"' in response.text  # the table refreshes itself


@pytest.fixture
def two_runs(demo_agents, priced_limit, make_plan, personas):
    plan = make_plan(
        {"a": ("researcher", []), "b": ("writer", ["a"]), "c": ("writer", ["a"])}, goal="Compare databases"
    )
    first = runs.launch(plan, cap=2, budget_usd="0.50", launched_by=personas["launcher"])
    started = timezone.now() - timedelta(minutes=3, seconds=5)
    first.tasks.filter(subtask__key="a").update(state=TaskRun.State.SUCCEEDED)
    first.tasks.filter(subtask__key="b").update(state=TaskRun.State.FAILED)
    Run.objects.filter(pk=first.pk).update(started_at=started, cost_usd=Decimal("0.6"), budget_usd=Decimal("0.5"))
    second = runs.launch(plan, require_plan_approval=True, actor_name="cli:alice")
    return first, second


def test_each_row_shows_status_progress_elapsed_cost_and_who_launched(client, personas, two_runs, stopped_clock):
    first, second = two_runs
    # Started 3 min 05 s before a clock that stands still while the pages are read: on a loaded
    # machine the pages read the real clock 5 s after the fixture did, "3 min 10 s".
    Run.objects.filter(pk=first.pk).update(started_at=timezone.now() - timedelta(minutes=3, seconds=5))
    client.force_login(personas["viewer"])
    for url in PAGES:
        response = client.get(url)
        assert response.status_code == 200
        rows = {row.run.pk: row for row in response.context["rows"]}
        assert list(rows) == [second.pk, first.pk]  # newest first
        row = rows[first.pk]
        assert (row.done, row.total, row.failed) == (2, 3, 1)
        assert row.elapsed == "3 min 05 s"
        assert row.launched_by == "launcher"
        assert row.cost_over_budget and row.budget_used_percent == 100
        assert row.url == f"/runs/{first.pk}/"
        waiting = rows[second.pk]
        assert (waiting.done, waiting.total, waiting.elapsed, waiting.launched_by) == (
            0,
            3,
            "not started",
            "alice from the command line",
        )
        assert waiting.pending_checkpoints == 1
        html = response.text
        assert f'id="run-row-{first.pk}"' in html
        assert "1 of 3 tasks succeeded" in html and "1 failed" in html
        assert "$0.6000" in html and "of $0.50" in html
        assert "Awaiting approval" in html
        assert "1 waiting for a decision" in html


def test_who_launched_each_run_is_read_in_one_query(client, personas, two_runs, make_plan):
    """The table is polled every 2 s: its launchers come from the runs' run.created events in one
    read, however many runs it lists (and a run launched by no person is not "command line")."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    third = runs.launch(make_plan({"a": ("researcher", [])}, goal="Third"))
    client.force_login(personas["viewer"])
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/runs/table/")
    launchers = {row.run.pk: row.launched_by for row in response.context["rows"]}
    first, second = two_runs
    assert launchers == {first.pk: "launcher", second.pk: "alice from the command line", third.pk: "system"}
    assert "<td>alice from the command line</td>" in response.text
    event_reads = [q["sql"] for q in queries.captured_queries if '"orchestrator_event"' in q["sql"]]
    assert len(event_reads) == 1, event_reads


def test_the_line_over_the_table_says_which_runs_run_and_which_wait(client, personas, two_runs):
    """It said "2 runs, 2 in progress." of a run awaiting approval and a paused one: neither is in
    progress. Each status that has not ended is named, as its badge in the table names it."""
    first, second = two_runs
    Run.objects.filter(pk=first.pk).update(status=Run.Status.PAUSED)
    client.force_login(personas["viewer"])
    for url in PAGES:
        text = re.sub(r"\s+", " ", client.get(url).text)
        assert "2 runs, 1 paused, 1 awaiting approval." in text
        assert "in progress" not in text


def test_the_table_alone_is_the_partial_the_page_includes(client, personas, two_runs):
    client.force_login(personas["viewer"])
    table = client.get("/runs/table/").text
    assert '<section id="runs-table"' in table
    assert "<html" not in table
    page = client.get("/runs/").text
    assert '<section id="runs-table"' in page and "<html" in page


def test_only_launchers_see_the_new_run_button(client, personas):
    client.force_login(personas["viewer"])
    assert "/runs/new/" not in client.get("/runs/").text
    client.force_login(personas["launcher"])
    assert "/runs/new/" in client.get("/runs/").text


def test_goals_are_escaped(client, personas, demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", [])}, goal="<script>alert(1)</script>")
    runs.launch(plan)
    client.force_login(personas["viewer"])
    html = client.get("/runs/table/").text
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (0.84, "0.8 s"),
        (42, "42 s"),
        (185, "3 min 05 s"),
        (7440, "2 h 04 min"),
        (3 * 86400 + 7200, "3 d 2 h"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_the_strip_calls_held_back_what_the_run_page_calls_held_back(client, personas, demo_agents, make_plan):
    """A ready task that the run's cap holds back is "held back" on the run page (its Tasks card,
    its graph); the runs list's strip, in the same colour and words, must not call it "ready"."""
    plan = make_plan({"a": ("researcher", []), "b": ("writer", []), "c": ("coder", [])}, goal="Three at once")
    run = runs.launch(plan, cap=1)
    run.tasks.filter(subtask__key="a").update(state=TaskRun.State.RUNNING)
    run.tasks.filter(subtask__key="b").update(
        state=TaskRun.State.READY, wait_reason="run cap reached (1 queued or running)"
    )
    run.tasks.filter(subtask__key="c").update(state=TaskRun.State.READY, wait_reason="")
    client.force_login(personas["viewer"])
    strip = client.get("/runs/table/").text
    run_page = client.get(f"/runs/{run.pk}/").text
    assert "1 held back" in run_page
    assert '<rect class="state-waiting"' in strip and "<title>1 held back</title>" in strip
    assert "<title>1 ready</title>" in strip  # the one no cap holds back is still ready
    assert "<title>2 ready</title>" not in strip


def test_a_rows_cost_says_what_it_leaves_out_on_a_model_with_no_price(client, personas, two_runs, demo_agents):
    """A run on a model with no price read "$0.00 of $10.00" in the list, as if free."""
    first, second = two_runs
    Agent.objects.filter(name="researcher").update(model="sim-unpriced")
    task = first.tasks.get(subtask__key="a")
    tokens = {"input_tokens": 1_000, "output_tokens": 212}  # an ended attempt's, settled on its task
    Attempt.objects.update_or_create(task_run=task, number=1, defaults={"state": Attempt.State.SUCCEEDED, **tokens})
    TaskRun.objects.filter(pk=task.pk).update(**tokens)
    client.force_login(personas["viewer"])
    for url in [*PAGES, f"/plans/{first.plan_id}/"]:
        html = client.get(url).text
        row = re.search(rf'<tr id="(?:run-row|plan-run)-{first.pk}">(.*?)</tr>', html, re.S).group(1)
        note = re.search(r'<div class="cost-unpriced" title="([^"]*)">([^<]*)</div>', row)
        assert note is not None, url
        assert note.group(2) == "+ 1,212 tokens with no price"
        assert note.group(1).startswith("simulated:sim-unpriced has no price: its 1,212 tokens are not in the cost")
        other = re.search(rf'<tr id="(?:run-row|plan-run)-{second.pk}">(.*?)</tr>', html, re.S).group(1)
        assert "cost-unpriced" not in other  # nothing used


def test_a_run_whose_plan_was_rejected_says_so_not_cancelled(client, personas, demo_agents, make_plan):
    """Runs whose plan was rejected looked identical to runs cancelled by a person, in the runs list
    and the plan page's "Runs of this plan"; the stored status (and the API's) stays `cancelled`."""
    plan = make_plan({"a": ("researcher", [])})
    rejected = runs.launch(plan, require_plan_approval=True, actor_name="cli:alice")
    runs.decide(rejected.checkpoints.get(), approve=False, user=personas["approver"], comment="wrong goal")
    cancelled = runs.cancel(runs.launch(plan, actor_name="cli:alice"), user=personas["launcher"])
    client.force_login(personas["viewer"])
    for url in ["/runs/table/", f"/plans/{plan.pk}/"]:
        html = client.get(url).text
        badges = dict(re.findall(r'href="/runs/(\d+)/".*?<span class="badge status-\w+">([^<]*)</span>', html, re.S))
        assert badges == {str(rejected.pk): "Plan rejected", str(cancelled.pk): "Cancelled"}, url


def test_a_run_stopped_over_budget_says_it_stopped_short_of_its_budget(client, personas, two_runs):
    """The badge "Over budget" sat beside "$0.83 of $1.00" and its meter at 83 %, as if the budget
    had been spent and more: the row says why it stopped, as the run page's Cost card does."""
    first, second = two_runs
    Run.objects.filter(pk=first.pk).update(status=Run.Status.OVER_BUDGET)
    client.force_login(personas["viewer"])
    for url in [*PAGES, f"/plans/{first.plan_id}/"]:
        html = client.get(url).text
        row = re.search(rf'<tr id="(?:run-row|plan-run)-{first.pk}">(.*?)</tr>', html, re.S).group(1)
        assert "Over budget</span>" in row, url
        assert '<div class="small over">stopped: the next task would exceed the budget</div>' in row, url
        other = re.search(rf'<tr id="(?:run-row|plan-run)-{second.pk}">(.*?)</tr>', html, re.S)
        assert other is None or "would exceed the budget" not in other.group(1)
