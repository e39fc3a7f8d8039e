"""The run page and its actions: what each persona sees and may do, the partials, downloads."""

from __future__ import annotations

import html
import html as html_module
import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from orchestrator.engine import dispatch, runs
from orchestrator.models import Attempt, Checkpoint, Event, Run, TaskRun
from tests.conftest import in_another_connection

pytestmark = pytest.mark.django_db

XSS = '<script>alert("x")</script><img src=x onerror="alert(1)">'


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """The personas' passwords are hashed with a fast hasher: these tests are not about passwords."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def brief(make_plan, demo_agents, priced_limit, monkeypatch):
    """A launched fan-out / fan-in run (nothing enqueued: no broker in these tests)."""
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    plan = make_plan(
        {
            "scope": ("researcher", []),
            "a": ("researcher", ["scope"]),
            "b": ("researcher", ["scope"]),
            "write": ("writer", ["a", "b"], {"gate": "after"}),
        },
        goal="Decide about SQLite",
    )
    return runs.launch(plan, cap=2, budget_usd="5")


@pytest.fixture
def login(client):
    def as_(user):
        client.force_login(user)
        return client

    return as_


def url(name, run, *args):
    return reverse(name, args=[run.pk, *args])


def task(run, key) -> TaskRun:
    return run.tasks.get(subtask__key=key)


def finish(t: TaskRun, output: str = "Done.", state: str = TaskRun.State.SUCCEEDED) -> None:
    now = timezone.now()
    Attempt.objects.filter(task_run=t).update(
        state=Attempt.State.SUCCEEDED, worker="host:1", started_at=now, finished_at=now, output_tokens=12
    )
    TaskRun.objects.filter(pk=t.pk).update(
        state=state,
        output=output,
        summary=output[:50],
        progress=100,
        output_tokens=12,
        input_tokens=30,
        cost_usd=Decimal("0.0004"),
        started_at=now,
        finished_at=now,
    )


# --- Who may see the page -----------------------------------------------------------------------


def test_anonymous_is_sent_to_login(client, brief):
    response = client.get(url("run_detail", brief))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_outsider_is_refused_and_audited(login, personas, brief):
    response = login(personas["outsider"]).get(url("run_detail", brief))
    assert response.status_code == 403
    denial = Event.objects.filter(type="access.denied").latest("id")
    assert denial.run_id == brief.pk
    assert "orchestrator.view_run" in denial.message


def test_viewer_sees_every_part_without_controls(login, personas, brief):
    response = login(personas["viewer"]).get(url("run_detail", brief))
    assert response.status_code == 200
    html = response.content.decode()
    for root in (
        "run-header",
        "run-totals",
        "run-checkpoints",
        "agent-lanes",
        "run-gantt",
        "task-table",
        "event-log-rows",
        "run-result",
        "dag-graph",
        "task-panel",
    ):
        assert f'id="{root}"' in html, root
    for t in brief.tasks.all():
        assert f'id="task-{t.pk}"' in html
    assert f'ws-connect="/ws/runs/{brief.pk}/"' in html
    brief.refresh_from_db()
    assert brief.last_event_seq > 0
    assert f'data-seq="{brief.last_event_seq}"' in html
    assert 'data-action="pause"' not in html
    assert 'data-action="cancel"' not in html


def test_the_header_says_who_launched_the_run_on_the_page_and_in_live_frames(login, personas, brief, make_plan):
    """It said "launched by the command line" for every run without a user, whoever launched it."""
    from dashboard import fragments

    from_cli = runs.launch(brief.plan, cap=2, budget_usd="5", actor_name="cli:root")
    from_person = runs.launch(brief.plan, cap=2, budget_usd="5", launched_by=personas["launcher"])
    client = login(personas["viewer"])
    viewer = fragments.Viewer.for_user(personas["viewer"])
    for run, said in (
        (from_cli, "launched by root from the command line"),
        (from_person, "launched by launcher"),
        (brief, "launched by system"),  # neither a person nor the command line
    ):
        assert f"<span data-launched-by>{said}</span>" in client.get(url("run_detail", run)).text
        assert f"<span data-launched-by>{said}</span>" in fragments.render_parts(run, viewer, ["header"])


@pytest.mark.django_db(transaction=True)
def test_the_page_shows_one_moment_of_the_run_though_it_is_cancelled_while_the_page_is_read(
    login, personas, brief, monkeypatch
):
    """Someone cancels the run after the page read its header: its tasks, totals and lanes, read
    after that, must not show the cancellation beside a running header (the live feed brings it)."""
    from dashboard import fragments

    real = fragments.totals_context

    def cancel_then_read(*args, **kwargs):
        in_another_connection(lambda: runs.cancel(Run.objects.get(pk=brief.pk)))
        return real(*args, **kwargs)

    seq = Run.objects.get(pk=brief.pk).last_event_seq
    monkeypatch.setattr(fragments, "totals_context", cancel_then_read)
    html = login(personas["viewer"]).get(url("run_detail", brief)).content.decode()
    assert Run.objects.get(pk=brief.pk).status == Run.Status.CANCELLED
    assert 'data-run-status="running"' in html and f'data-seq="{seq}"' in html
    assert "task-row state-queued" in html and "task-row state-cancelled" not in html


def test_launcher_sees_run_controls(login, personas, brief):
    html = login(personas["launcher"]).get(url("run_detail", brief)).content.decode()
    assert 'data-action="pause"' in html
    assert 'data-action="cancel"' in html


def test_page_has_no_inline_script_or_style(login, personas, brief):
    html = login(personas["viewer"]).get(url("run_detail", brief)).content.decode()
    scripts = re.findall(r"<script\b([^>]*)>", html)
    for attrs in scripts:
        assert "src=" in attrs or 'type="application/json"' in attrs, attrs
    assert " style=" not in html
    assert not re.search(r"\son[a-z]+=", html)
    assert "hx-on" not in html


def test_graph_json_has_every_dependency(login, personas, brief):
    data = login(personas["viewer"]).get(url("run_graph", brief)).json()
    assert len(data["nodes"]) == 4
    pairs = {(e["source"], e["target"]) for e in data["edges"]}
    ids = {n["key"]: n["id"] for n in data["nodes"]}
    assert pairs == {
        (ids["scope"], ids["a"]),
        (ids["scope"], ids["b"]),
        (ids["a"], ids["write"]),
        (ids["b"], ids["write"]),
    }


# --- Untrusted text -----------------------------------------------------------------------------


def test_goal_titles_and_output_are_escaped(login, personas, make_plan, demo_agents, priced_limit, monkeypatch):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    plan = make_plan({"evil": ("writer", [], {"title": "T " + XSS, "instructions": XSS})}, goal="G " + XSS)
    run = runs.launch(plan, budget_usd="5")
    t = task(run, "evil")
    finish(t, output="# Head\n\n" + XSS + "\n\n[link](javascript:alert(1))")
    client = login(personas["viewer"])
    for page, htmx in ((url("run_detail", run) + f"?task={t.pk}", False), (url("run_task_output", run, t.pk), True)):
        html = client.get(page, **({"HTTP_HX_REQUEST": "true"} if htmx else {})).content.decode()
        assert "<script>alert" not in html  # never a live tag: escaped as text, or removed
        assert "<img" not in html
        assert 'href="javascript' not in html
        if not htmx:
            assert "&lt;script&gt;alert" in html  # the goal and the title show it as text
    html = client.get(url("run_task_output", run, t.pk)).content.decode()
    assert "<h1>Head</h1>" in html


def test_a_failed_final_tasks_text_is_headed_once_when_opened(login, personas, make_plan, demo_agents, monkeypatch):
    """Of several final tasks, a failed one's Result says "Partial output of attempt 1 (failed): the
    text it wrote before it ended…"; opening "The text it wrote" repeated the heading under it."""
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", [])}), budget_usd="5")
    finish(task(run, "a"))
    b = task(run, "b")
    finish(b, output="Half of a report", state=TaskRun.State.FAILED)
    Attempt.objects.filter(task_run=b).update(state=Attempt.State.FAILED)
    client = login(personas["viewer"])
    page = client.get(url("run_detail", run)).content.decode()
    final = re.search(rf'<article class="final-output" id="final-{b.pk}">.*?</article>', page, re.S).group()
    opens = re.search(r'<details class="final-full" hx-get="([^"]+)"', final).group(1)
    opened = client.get(html.unescape(opens), HTTP_HX_REQUEST="true").content.decode()
    assert opened == "<p>Half of a report</p>"
    assert (final + opened).count("Partial output of attempt 1 (failed)") == 1
    # Where nothing above heads it (the list of every task's output), the text says what it is.
    alone = client.get(url("run_task_output", run, b.pk), HTTP_HX_REQUEST="true").content.decode()
    assert alone.startswith('<p class="muted">Partial output of attempt 1 (failed):</p>')


# --- Task panel ---------------------------------------------------------------------------------


def test_task_panel_shows_instructions_upstream_summaries_output_and_attempts(login, personas, brief):
    scope = task(brief, "scope")
    finish(scope, output="Scope summary text.")
    a = task(brief, "a")
    client = login(personas["viewer"])
    html = client.get(url("run_task", brief, a.pk), HTTP_HX_REQUEST="true").content.decode()
    assert f'id="task-panel" class="task-panel" data-task="{a.pk}"' in html
    assert "Upstream summaries it received" in html
    assert "Scope summary" in html
    html = client.get(url("run_task", brief, scope.pk), HTTP_HX_REQUEST="true").content.decode()
    assert "host:1" in html  # the attempt's worker
    assert "Done" in html or "Scope summary text." in html


def test_task_panel_says_how_many_attempts_were_lost_with_their_worker(login, personas, brief, settings):
    """A task tried again after its worker died read "Attempts 2", as if it had failed once; its
    `lost_count` was shown nowhere, nor that the loss spent no retry."""
    settings.GLASSBOX_MAX_LOST_ATTEMPTS = 3
    scope = task(brief, "scope")
    Attempt.objects.filter(task_run=scope).update(state=Attempt.State.LOST, worker="vm:4121")
    Attempt.objects.create(task_run=scope, number=2)
    TaskRun.objects.filter(pk=scope.pk).update(attempt_count=2, lost_count=1)
    panel = login(personas["viewer"]).get(url("run_task", brief, scope.pk), HTTP_HX_REQUEST="true").content.decode()
    text = " ".join(re.sub(r"<[^>]+>", " ", html.unescape(panel)).split())
    assert "Attempts 2 · 1 lost" in text
    assert 'title="1 lost when its worker stopped, spending no retry"' in panel
    assert (
        "Attempts 2 attempts · 1 lost when its worker stopped. A lost attempt spends none of the task's retries; "
        "the task fails once 3 are lost (GLASSBOX_MAX_LOST_ATTEMPTS; a retry or a re-run counts again from 0)."
    ) in text
    a = task(brief, "a")  # none lost: the count alone
    panel = login(personas["viewer"]).get(url("run_task", brief, a.pk), HTTP_HX_REQUEST="true").content.decode()
    assert "lost when" not in panel


def test_task_panel_without_htmx_redirects_to_the_page_with_it_open(login, personas, brief):
    a = task(brief, "a")
    response = login(personas["viewer"]).get(url("run_task", brief, a.pk))
    assert response.status_code == 302
    assert response["Location"].endswith(f"?task={a.pk}")


def test_task_of_another_run_is_404(login, personas, brief, make_plan):
    other = runs.launch(make_plan({"x": ("writer", [])}), budget_usd="5")
    response = login(personas["viewer"]).get(url("run_task", brief, other.tasks.get().pk), HTTP_HX_REQUEST="true")
    assert response.status_code == 404


# --- Controls -----------------------------------------------------------------------------------


def test_viewer_cannot_pause(login, personas, brief):
    response = login(personas["viewer"]).post(url("run_pause", brief))
    assert response.status_code == 403
    brief.refresh_from_db()
    assert brief.status == Run.Status.RUNNING
    assert Event.objects.filter(type="access.denied", run=brief).exists()


def test_pause_and_resume_write_events(login, personas, brief):
    client = login(personas["launcher"])
    response = client.post(url("run_pause", brief), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="run-flash"' in html and "paused" in html
    assert 'id="run-header"' in html and 'hx-swap-oob="true"' in html
    brief.refresh_from_db()
    assert brief.status == Run.Status.PAUSED
    assert Event.objects.filter(run=brief, type="run.paused", actor_user=personas["launcher"]).exists()
    response = client.post(url("run_resume", brief))
    assert response.status_code == 302  # a plain form post goes back to the page
    brief.refresh_from_db()
    assert brief.status == Run.Status.RUNNING


def test_refused_action_answers_with_the_reason(login, personas, brief):
    client = login(personas["launcher"])
    response = client.post(url("run_resume", brief), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert response["X-Glassbox-Refused"] == "1"
    html = response.content.decode()
    assert "run-flash-error" in html
    assert f'<span class="run-flash-text">Run {brief.pk} is running: it cannot be resumed</span>' in html
    assert 'id="run-header"' not in html  # nothing changed: no parts
    response = client.post(url("run_resume", brief), follow=True)
    assert "cannot be resumed" in response.content.decode()  # a plain post: the message after the redirect


def stop_over_budget(run: Run) -> Run:
    """End `run` over budget as the scheduler does when the next task does not fit."""
    from orchestrator import events
    from orchestrator.engine import scheduler

    with events.atomic():
        scheduler.stop_over_budget(scheduler.lock_run(run.pk))
    run.refresh_from_db()
    return run


def test_whoever_controls_runs_changes_the_budget_from_the_header(login, personas, brief):
    """No page, API call or command could change a run's budget, while an over-budget run said
    "raise the budget and retry"."""
    assert 'data-action="change-budget"' not in login(personas["viewer"]).get(url("run_detail", brief)).text
    client = login(personas["launcher"])
    page = client.get(url("run_detail", brief)).text
    assert 'name="budget_usd"' in page and 'value="5.00"' in page and 'data-action="change-budget"' in page
    response = client.post(url("run_budget", brief), {"budget_usd": "7.5"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert f'<span class="run-flash-text">Run {brief.pk}&#x27;s budget is now $7.50.</span>' in html
    assert 'id="run-totals"' in html and "of $7.50" in html  # the Cost card says so at once
    brief.refresh_from_db()
    assert brief.budget_usd == Decimal("7.5")
    event = Event.objects.get(run=brief, type="run.budget_changed")
    assert (event.actor_user, event.message) == (personas["launcher"], "budget changed from $5.00 to $7.50 by launcher")

    refused = client.post(url("run_budget", brief), {"budget_usd": "lots"}, HTTP_HX_REQUEST="true")
    assert refused["X-Glassbox-Refused"] == "1"
    assert "Budget must be an amount in USD such as 0.50, got &#x27;lots&#x27;" in refused.content.decode()
    assert login(personas["viewer"]).post(url("run_budget", brief), {"budget_usd": "9"}).status_code == 403


def test_a_run_stopped_over_budget_keeps_its_budget_form_and_its_retry_is_refused_with_the_numbers(
    login, personas, brief
):
    """Retry said "scope will run again." in green, while the run reopened, cancelled the task
    again and ended in the same second."""
    Run.objects.filter(pk=brief.pk).update(cost_usd=Decimal("4.999"), reserved_usd=0)
    Attempt.objects.filter(task_run__run=brief).update(reserved_usd=0)
    TaskRun.objects.filter(pk=task(brief, "scope").pk).update(state=TaskRun.State.FAILED, finished_at=timezone.now())
    run = stop_over_budget(brief)
    client = login(personas["launcher"])
    page = client.get(url("run_detail", run)).text
    assert "raise the budget on the run&#x27;s page, then retry a cancelled task" in page
    assert 'data-action="change-budget"' in page and 'data-action="cancel"' not in page
    scope = task(run, "scope")
    response = client.post(url("run_task_retry", run, scope.pk), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response["X-Glassbox-Refused"] == "1" and "will run again" not in html
    assert "Task scope may cost up to $0.0" in html and "raise the budget to at least $5.02 first" in html
    run.refresh_from_db()
    assert run.status == Run.Status.OVER_BUDGET and not Event.objects.filter(run=run, type="run.reopened").exists()

    client.post(url("run_budget", run), {"budget_usd": "5.02"}, HTTP_HX_REQUEST="true")
    assert "scope will run again." in client.post(url("run_task_retry", run, scope.pk), HTTP_HX_REQUEST="true").text
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert task(run, "a").state == TaskRun.State.PENDING  # the work the stop cancelled waits again


def test_get_on_an_action_is_not_allowed(login, personas, brief):
    assert login(personas["launcher"]).get(url("run_cancel", brief)).status_code == 405


def test_cancel(login, personas, brief):
    login(personas["launcher"]).post(url("run_cancel", brief), HTTP_HX_REQUEST="true")
    brief.refresh_from_db()
    assert brief.status == Run.Status.CANCELLED


def test_a_cancelled_runs_task_panel_says_why_it_offers_no_control(login, personas, brief):
    """It showed no Retry and no word why; the command line answered "launch it again instead"."""
    scope = task(brief, "scope")
    panel = login(personas["launcher"]).get(url("run_task", brief, scope.pk), HTTP_HX_REQUEST="true").text
    assert "task-no-actions" not in panel  # a running run's task: its controls, no excuse
    runs.cancel(brief)
    panel = login(personas["launcher"]).get(url("run_task", brief, scope.pk), HTTP_HX_REQUEST="true").text
    assert 'data-action="retry"' not in panel and 'data-action="rerun"' not in panel
    assert "The run was cancelled: its tasks can no longer be retried or re-run." in panel
    viewer = login(personas["viewer"]).get(url("run_task", brief, scope.pk), HTTP_HX_REQUEST="true").text
    assert "task-no-actions" not in viewer  # one who may not control the run is told nothing of controls


def test_retry_and_skip_a_task(login, personas, brief):
    client = login(personas["launcher"])
    scope = task(brief, "scope")
    TaskRun.objects.filter(pk=scope.pk).update(state=TaskRun.State.FAILED, error="boom", finished_at=timezone.now())
    response = client.post(url("run_task_retry", brief, scope.pk), HTTP_HX_REQUEST="true")
    assert response.status_code == 200, response.content
    assert f'id="task-{scope.pk}"' in response.content.decode()
    assert Event.objects.filter(run=brief, type="task.retried", task_run=scope).exists()
    a = task(brief, "a")
    response = client.post(url("run_task_skip", brief, a.pk), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert task(brief, "a").state == TaskRun.State.SKIPPED
    assert Event.objects.filter(run=brief, type="task.skipped", task_run=a, actor_user=personas["launcher"]).exists()


def test_a_refusal_and_a_missing_output_say_the_tasks_state_as_its_badge_does(login, personas, brief):
    """They read "Task scope is succeeded: only …" and "No output: the task is waiting gate.": the
    state's code after "is". They say it in the words of the task's badge."""
    client = login(personas["launcher"])
    scope, write = task(brief, "scope"), task(brief, "write")
    TaskRun.objects.filter(pk=scope.pk).update(state=TaskRun.State.SUCCEEDED, finished_at=timezone.now())
    TaskRun.objects.filter(pk=write.pk).update(state=TaskRun.State.WAITING_GATE)
    response = client.post(url("run_task_retry", brief, scope.pk), HTTP_HX_REQUEST="true")
    assert response["X-Glassbox-Refused"] == "1"
    refusal = "Task scope has succeeded: only a failed, cancelled or skipped task can be retried"
    assert f'<span class="run-flash-text">{refusal}</span>' in response.content.decode()
    output = client.get(url("run_task_output", brief, write.pk)).content.decode()
    assert output == '<p class="muted">No output: the task needs approval.</p>'


def test_skipping_a_task_says_what_its_skip_came_to_below_it(login, personas, brief):
    """a and b failed; write, below both, was skipped for a. Skipping a said "tasks below it go on
    without it" while write stayed skipped for b; skipping b then lets write go on, and says so."""
    from tests.orchestrator.engine.steps import finish

    client = login(personas["launcher"])
    finish(brief, "scope")
    finish(brief, "a", TaskRun.State.FAILED, error="boom")
    finish(brief, "b", TaskRun.State.FAILED, error="bang")

    def skip(key):
        response = client.post(url("run_task_skip", brief, task(brief, key).pk), HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())

    assert "a skipped; write stays skipped: upstream b did not succeed." in skip("a")
    assert "b skipped: tasks below it go on without it." in skip("b")
    assert task(brief, "write").state == TaskRun.State.QUEUED
    assert "write skipped." in skip("write")  # a final task: nothing below it to go on


def test_approver_cannot_control_and_launcher_cannot_decide(login, personas, brief):
    assert login(personas["approver"]).post(url("run_cancel", brief)).status_code == 403
    cp = Checkpoint.objects.create(run=brief, task_run=task(brief, "write"), kind=Checkpoint.Kind.AFTER)
    response = login(personas["launcher"]).post(url("run_checkpoint_decide", brief, cp.pk), {"decision": "approve"})
    assert response.status_code == 403
    cp.refresh_from_db()
    assert cp.status == Checkpoint.Status.PENDING


# --- Checkpoints --------------------------------------------------------------------------------


@pytest.fixture
def review(brief):
    """`write` finished and waits for the review of its output."""
    for key in ("scope", "a", "b"):
        finish(task(brief, key))
    write = task(brief, "write")
    finish(write, output="Final **brief**.", state=TaskRun.State.AWAITING_REVIEW)
    TaskRun.objects.filter(pk=write.pk).update(finished_at=None)
    return Checkpoint.objects.create(run=brief, task_run=write, kind=Checkpoint.Kind.AFTER)


def test_pending_review_is_shown_with_approve_and_reject(login, personas, brief, review):
    html = login(personas["approver"]).get(url("run_detail", brief)).content.decode()
    assert f'id="checkpoint-{review.pk}"' in html
    assert 'value="approve"' in html and 'value="reject"' in html
    assert "<strong>brief</strong>" in html  # the output under review, as sanitised Markdown


def asks(html: str) -> dict[str, str]:
    """Each checkpoint card's question as a person reads it, by checkpoint id."""
    from html import unescape

    from django.utils.html import strip_tags

    cards = re.findall(r'id="checkpoint-(\d+)".*?<p class="ask">(.*?)</p>', html, re.S)
    return {pk: unescape(strip_tags(ask)) for pk, ask in cards}


def test_a_review_and_a_gate_ask_in_the_engines_words_with_the_task_linked(login, personas, brief, review, make_plan):
    """The card's question is engine/checkpoint_questions' (the inbox's and the command line's
    too), the task's title a link to its panel."""
    from orchestrator.engine.checkpoint_questions import question

    html = login(personas["approver"]).get(url("run_detail", brief)).content.decode()
    write = review.task_run
    assert asks(html)[str(review.pk)] == "Review the output of Write"
    assert question(review).text() == "Review the output of “Write”"
    link = f'<a href="{url("run_task", brief, write.pk)}" class="task-link" data-task="{write.pk}">Write</a>'
    assert f'<p class="ask">Review the output of {link}</p>' in html

    gated = runs.launch(make_plan({"ship": ("writer", [], {"gate": "before"})}), cap=1, budget_usd="5")
    gate = gated.checkpoints.get()
    html = login(personas["approver"]).get(url("run_detail", gated)).content.decode()
    assert asks(html)[str(gate.pk)] == "Gate: may Ship start?" and question(gate).text() == "Gate: may “Ship” start?"


def test_reject_needs_a_comment(login, personas, brief, review):
    client = login(personas["approver"])
    response = client.post(
        url("run_checkpoint_decide", brief, review.pk), {"decision": "reject", "comment": " "}, HTTP_HX_REQUEST="true"
    )
    assert response["X-Glassbox-Refused"] == "1"
    assert "comment is required" in response.content.decode()
    review.refresh_from_db()
    assert review.status == Checkpoint.Status.PENDING
    response = client.post(
        url("run_checkpoint_decide", brief, review.pk),
        {"decision": "reject", "comment": "too vague"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    review.refresh_from_db()
    assert review.status == Checkpoint.Status.REJECTED
    assert review.comment == "too vague"
    assert Event.objects.filter(run=brief, type="checkpoint.rejected", actor_user=personas["approver"]).exists()


def test_approve(login, personas, brief, review):
    response = login(personas["approver"]).post(
        url("run_checkpoint_decide", brief, review.pk), {"decision": "approve"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert task(brief, "write").state == TaskRun.State.SUCCEEDED
    brief.refresh_from_db()
    assert brief.status == Run.Status.SUCCEEDED


def test_unknown_decision_is_refused(login, personas, brief, review):
    response = login(personas["approver"]).post(
        url("run_checkpoint_decide", brief, review.pk), {"decision": "maybe"}, HTTP_HX_REQUEST="true"
    )
    assert response["X-Glassbox-Refused"] == "1"
    review.refresh_from_db()
    assert review.status == Checkpoint.Status.PENDING


def answer_message(response) -> str:
    """The flash message of an htmx answer (the text of its run-flash part)."""
    found = re.search(r'id="run-flash"[^>]*>(.*?)</', response.content.decode(), re.S)
    assert found, response.content.decode()[:500]
    return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split())


@pytest.mark.parametrize(
    ("kind", "decision", "message"),
    [
        ("plan", "approve", "The plan was approved."),
        ("plan", "reject", "The plan was rejected."),
        ("before", "approve", "The gate before write was approved."),
        ("before", "reject", "The gate before write was rejected."),
        ("after", "approve", "The output of write was approved."),
        ("after", "reject", "The output of write was rejected."),
        ("tool", "approve", "The call to workspace:write_file by writer (task write) was approved."),
        ("tool", "reject", "The call to workspace:write_file by writer (task write) was rejected."),
    ],
)
def test_a_decision_is_confirmed_in_words(login, personas, brief, awaiting, kind, decision, message):
    """Every kind and decision has its sentence: never "rejectd", and a tool call's decision answers too."""
    write = task(brief, "write")
    if kind == "plan":
        run, cp = awaiting, awaiting.checkpoints.get()
    else:
        run, details = brief, {"agent": "writer", "server": "workspace", "tool": "write_file"}
        if kind == "after":
            TaskRun.objects.filter(pk=write.pk).update(state=TaskRun.State.AWAITING_REVIEW)
        cp = Checkpoint.objects.create(run=brief, kind=kind, task_run=write, details=details if kind == "tool" else {})
    response = login(personas["approver"]).post(
        url("run_checkpoint_decide", run, cp.pk),
        {"decision": decision, "comment": "Not this way." if decision == "reject" else ""},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200 and "X-Glassbox-Refused" not in response
    assert answer_message(response) == message


# --- Plan approval with edits --------------------------------------------------------------------


@pytest.fixture
def awaiting(make_plan, demo_agents, priced_limit, personas):
    plan = make_plan(
        {"scope": ("researcher", []), "a": ("researcher", ["scope"]), "write": ("writer", ["a"])},
        goal="Plan to approve",
    )
    return runs.launch(plan, budget_usd="5", require_plan_approval=True, launched_by=personas["launcher"])


def test_plan_checkpoint_shows_the_plan_with_edit_and_remove(login, personas, awaiting):
    cp = awaiting.checkpoints.get()
    html = login(personas["approver"]).get(url("run_detail", awaiting)).content.decode()
    assert "Approve the plan" in html
    assert reverse("run_plan_edit", args=[awaiting.pk, cp.pk, "a"]) in html
    assert reverse("run_plan_remove", args=[awaiting.pk, cp.pk, "a"]) in html


def test_edit_and_remove_through_the_views(login, personas, awaiting):
    cp = awaiting.checkpoints.get()
    client = login(personas["approver"])
    response = client.post(
        reverse("run_plan_edit", args=[awaiting.pk, cp.pk, "a"]),
        {"instructions": "Look deeper."},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    awaiting.refresh_from_db()
    assert awaiting.plan.subtasks.get(key="a").instructions == "Look deeper."
    response = client.post(reverse("run_plan_remove", args=[awaiting.pk, cp.pk, "a"]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert "write no longer waits for it" in html
    assert 'id="dag-graph"' in html and 'id="task-table"' in html
    assert not awaiting.tasks.filter(subtask__key="a").exists()
    response = client.post(
        reverse("run_checkpoint_decide", args=[awaiting.pk, cp.pk]), {"decision": "approve"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    awaiting.refresh_from_db()
    assert awaiting.status == Run.Status.RUNNING


def test_viewer_cannot_edit_the_plan(login, personas, awaiting):
    cp = awaiting.checkpoints.get()
    response = login(personas["viewer"]).post(reverse("run_plan_remove", args=[awaiting.pk, cp.pk, "a"]))
    assert response.status_code == 403
    assert awaiting.tasks.filter(subtask__key="a").exists()


# --- Event log and downloads --------------------------------------------------------------------


def test_event_log_filters_by_task_and_type(login, personas, brief):
    client = login(personas["viewer"])
    scope = task(brief, "scope")
    html = client.get(url("run_events", brief), {"task": scope.pk}).content.decode()
    seqs = [int(s) for s in re.findall(r'id="event-(\d+)"', html)]
    expected = list(Event.objects.filter(run=brief, task_run=scope).order_by("-seq").values_list("seq", flat=True))
    assert seqs == expected and seqs
    html = client.get(url("run_events", brief), {"type": "run"}).content.decode()
    types = re.findall(r'data-type="([^"]+)"', html)
    assert types and all(t.startswith("run.") for t in types)
    html = client.get(url("run_events", brief), {"type": "task.queued"}).content.decode()
    assert set(re.findall(r'data-type="([^"]+)"', html)) == {"task.queued"}


def test_downloads(login, personas, brief):
    for key in ("scope", "a", "b"):
        finish(task(brief, key), output=f"Output of {key}.")
    finish(task(brief, "write"), output="# The brief\n\nAll done.")
    client = login(personas["viewer"])
    response = client.get(url("run_download_md", brief))
    assert response["Content-Type"].startswith("text/markdown")
    assert "attachment" in response["Content-Disposition"]
    text = response.content.decode()
    assert text.index("# The brief") < text.index("Output of scope.")
    response = client.get(url("run_download_json", brief))
    data = json.loads(response.content)
    assert data["run"]["id"] == brief.pk
    assert data["final_tasks"] == ["write"]
    assert {t["key"] for t in data["tasks"]} == {"scope", "a", "b", "write"}
    assert data["plan"]["dependencies"]


# --- The plan approval is bound to the version on the page ----------------------------------------


def test_the_page_sends_the_plan_version_it_showed_and_an_edit_since_refuses_the_approval(
    login, personas, make_plan, demo_agents
):
    from orchestrator.engine import plan_edits

    run = runs.launch(
        make_plan({"a": ("researcher", [])}), launched_by=personas["launcher"], require_plan_approval=True
    )
    checkpoint = run.checkpoints.get()
    client = login(personas["approver"])
    page = client.get(reverse("run_detail", args=[run.pk])).content.decode()
    shown = f'<input type="hidden" name="plan_version" value="{checkpoint.plan_version}">'
    assert shown in page
    plan_edits.edit_instructions(checkpoint, "a", "Edited while the approver was reading.")
    response = client.post(
        url("run_checkpoint_decide", run, checkpoint.pk),
        {"decision": "approve", "plan_version": checkpoint.plan_version},
        HTTP_HX_REQUEST="true",
    )
    assert response["X-Glassbox-Refused"] == "1"
    assert '<span class="run-flash-text">The plan was edited after you opened it' in response.content.decode()
    checkpoint.refresh_from_db()
    assert checkpoint.status == "pending"


def test_a_lost_attempt_says_how_long_it_ran_until_last_heard_and_when_it_was_declared_lost(login, personas, brief):
    """The attempts table and the attempt's page said "took 23 s" of an attempt whose worker was
    heard for 8.3 s and then lay silent until the reaper declared it lost."""
    scope = task(brief, "scope")
    now = timezone.now()
    heard, lost = now - timedelta(seconds=15), now
    Attempt.objects.filter(task_run=scope).update(
        state=Attempt.State.LOST,
        worker="vm:4121",
        started_at=heard - timedelta(seconds=8.3),
        heartbeat_at=heard,
        finished_at=lost,
        error="lease expired: worker vm:4121 stopped responding",
    )
    said = f"ran 8.3 s until last heard from at {heard:%H:%M:%S} UTC; declared lost at {lost:%H:%M:%S} UTC"
    client = login(personas["viewer"])
    panel = client.get(url("run_task", brief, scope.pk), HTTP_HX_REQUEST="true").content.decode()
    attempts = panel[panel.index('id="task-attempts-') :]
    assert f'<td class="num" title="{said}">8.3 s</td>' in attempts
    assert f"lease expired: worker vm:4121 stopped responding — {said}" in attempts
    assert "23 s" not in attempts
    page = client.get(url("run_attempt", brief, scope.pk, 1)).content.decode()
    assert f"started {(heard - timedelta(seconds=8.3)):%H:%M:%S} UTC · {said} ·" in page
    assert "took" not in page


def test_an_attempts_page_names_the_model_it_ran_with(login, personas, brief):
    """The page named the agent's model now: after the researcher moved to another model, its
    earlier attempts read as if they had run on it."""
    scope = task(brief, "scope")
    finish(scope)
    Attempt.objects.filter(task_run=scope).update(request={"provider": "simulated", "model": "sim-old", "prompt": "p"})
    page = login(personas["viewer"]).get(url("run_attempt", brief, scope.pk, 1)).content.decode()
    assert '<p class="subtitle">researcher (simulated:sim-old) ·' in page
    assert "simulated:sim-1" not in page  # the researcher's model now


def flash_of(page: str) -> tuple[str, str]:
    """The run page's message line: its level ("success", "error"; "" when it is empty) and words."""
    found = re.search(r'<div id="run-flash" class="run-flash(?: run-flash-(\w+))?"[^>]*>(.*?)</div>', page, re.S)
    assert found, "no message line"
    return found.group(1) or "", html_module.unescape(re.sub(r"<[^>]+>", "", found.group(2))).replace("×", "").strip()


def test_the_messages_a_redirect_leaves_are_said_once_in_the_run_pages_message_line(login, personas, brief):
    """ "Run #7 launched." was a list above the page that stayed there while the run ran and ended
    (only a reload took it away); the message line is where the page's successes fade
    (run/flash.js), and where its errors wait to be dismissed."""
    client = login(personas["launcher"])
    runs.cancel(brief, user=personas["launcher"])
    response = client.post(url("run_launch_again", brief), follow=True)
    again = Run.objects.latest("pk")
    assert response.redirect_chain == [(url("run_detail", again), 302)]
    page = response.content.decode()
    assert flash_of(page) == (
        "success",
        f"Run #{again.pk} launched: plan {brief.plan_id} again, with run #{brief.pk}'s settings.",
    )
    assert 'class="messages"' not in page
    assert flash_of(client.get(url("run_detail", again)).text) == ("", "")  # said once

    refused = client.post(url("run_budget", again), {"budget_usd": "lots"}, follow=True).content.decode()
    level, words = flash_of(refused)
    assert level == "error" and "Budget must be an amount in USD such as 0.50" in words
