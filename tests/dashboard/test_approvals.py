"""The approvals inbox, its header count and the decisions taken from it, with permissions."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator import wording
from orchestrator.engine import runs
from orchestrator.models import Checkpoint, Event, Run, TaskRun

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def gated_run(demo_agents, make_plan, personas):
    """A running run whose task "publish" waits at its gate, and its pending checkpoint."""
    plan = make_plan(
        {
            "draft": ("writer", []),
            "publish": ("writer", ["draft"], {"gate": "before", "instructions": "Publish <b>it</b>"}),
        },
        goal="Write and publish the notes",
    )
    run = runs.launch(plan, launched_by=personas["launcher"])
    publish = run.tasks.get(subtask__key="publish")
    # As the scheduler leaves it once "draft" succeeded: the task waits at its gate.
    run.tasks.filter(subtask__key="draft").update(state=TaskRun.State.SUCCEEDED)
    TaskRun.objects.filter(pk=publish.pk).update(state=TaskRun.State.WAITING_GATE)
    checkpoint = Checkpoint.objects.create(run=run, task_run=publish, kind=Checkpoint.Kind.BEFORE)
    return run, checkpoint


@pytest.fixture
def plan_checkpoint(demo_agents, make_plan, personas):
    """A run launched by the launcher that waits for plan approval."""
    plan = make_plan({"a": ("researcher", [])}, goal="Plan to approve")
    run = runs.launch(plan, launched_by=personas["launcher"], require_plan_approval=True)
    return run, run.checkpoints.get()


def urls(checkpoint_id: int) -> list[tuple[str, str]]:
    return [
        ("get", "/approvals/"),
        ("get", "/approvals/count/"),
        ("post", f"/approvals/{checkpoint_id}/approve/"),
        ("post", f"/approvals/{checkpoint_id}/reject/"),
    ]


# --- Permissions ---------------------------------------------------------------------------------


def test_anonymous_is_sent_to_the_login_page(client, gated_run):
    _, checkpoint = gated_run
    for method, url in urls(checkpoint.pk):
        response = getattr(client, method)(url)
        assert response.status_code == 302, url
        assert response["Location"] == f"/accounts/login/?next={url}"
    checkpoint.refresh_from_db()
    assert checkpoint.status == "pending"


@pytest.mark.parametrize("persona", ["outsider", "viewer", "launcher"])
def test_without_decide_checkpoint_everything_is_403_and_audited(client, personas, gated_run, persona):
    _, checkpoint = gated_run
    client.force_login(personas[persona])
    for method, url in urls(checkpoint.pk):
        assert getattr(client, method)(url, {"comment": "no"}).status_code == 403, url
    checkpoint.refresh_from_db()
    assert checkpoint.status == "pending"
    denials = Event.objects.filter(type="access.denied", actor_user=personas[persona]).order_by("id")
    assert [e.payload["action"] for e in denials] == [f"{m.upper()} {u}" for m, u in urls(checkpoint.pk)]
    assert {e.payload["permission"] for e in denials} == {"orchestrator.decide_checkpoint"}


def test_the_header_shows_the_approvals_link_only_to_approvers(client, personas):
    client.force_login(personas["viewer"])
    assert "/approvals/count/" not in client.get("/runs/").text
    client.force_login(personas["approver"])
    html = client.get("/runs/").text
    assert 'id="approvals-count"' in html and 'hx-get="/approvals/count/"' in html and "every 5s" in html


def test_deciding_needs_a_post(client, personas, gated_run):
    _, checkpoint = gated_run
    client.force_login(personas["approver"])
    assert client.get(f"/approvals/{checkpoint.pk}/approve/").status_code == 405


# --- The inbox ------------------------------------------------------------------------------------


def test_the_inbox_lists_pending_checkpoints_oldest_first_with_what_is_asked(
    client, personas, gated_run, plan_checkpoint
):
    run, gate = gated_run
    plan_run, plan_cp = plan_checkpoint
    Checkpoint.objects.filter(pk=plan_cp.pk).update(created_at=timezone.now() - timedelta(minutes=12))
    finished = runs.launch(plan_run.plan, require_plan_approval=True)  # a pending checkpoint on an ended run
    Run.objects.filter(pk=finished.pk).update(status=Run.Status.CANCELLED)
    client.force_login(personas["approver"])
    response = client.get("/approvals/")
    assert response.status_code == 200
    items = response.context["approvals"]
    assert [item.checkpoint.pk for item in items] == [plan_cp.pk, gate.pk]
    assert items[0].ask == "Approve the plan before anything runs"
    assert items[0].waited.startswith("12 min")
    assert items[1].ask == "Gate: may “Publish” start?"  # as the run page and the command line ask it
    assert items[1].excerpt == "Publish <b>it</b>"
    html = response.text
    assert "<p>Publish <b>it</b></p>" in html  # instructions and output are shown as sanitised Markdown
    assert f'href="/runs/{run.pk}/"' in html
    assert f'id="checkpoint-{gate.pk}"' in html
    assert "Waiting for 12 min" in html


@pytest.mark.django_db(transaction=True)
def test_a_review_asked_again_by_a_rerun_waits_from_its_new_opening(client, personas, gated_run, make_plan, no_broker):
    """The inbox said "Waiting for 13 min" and listed it first, and the run page "waiting since"
    its first opening, though the re-run had asked for it seconds before."""
    from orchestrator.engine import reruns
    from tests.conftest import run_here

    gated, gate = gated_run
    Checkpoint.objects.filter(pk=gate.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    run = run_here(runs.launch(make_plan({"design": ("writer", [], {"gate": "after"})}), budget_usd="5"))
    review = run.checkpoints.get()
    first_opening = timezone.now() - timedelta(minutes=13)
    Checkpoint.objects.filter(pk=review.pk).update(created_at=first_opening)
    runs.decide(review, approve=True, user=personas["approver"])
    reruns.rerun_from(run.tasks.get(), user=personas["launcher"])
    run_here(run)
    asked = Event.objects.filter(run=run, type="checkpoint.created").latest("seq")
    assert asked.payload["reopened"] is True
    client.force_login(personas["approver"])
    html = client.get("/approvals/").text
    waits = re.findall(r'id="checkpoint-(\d+)".*?Waiting for ([^<]+)<', html, re.S)
    asked_again = run.checkpoints.get(status=Checkpoint.Status.PENDING)
    assert asked_again.pk != review.pk  # a new review: the approval stays on record
    assert [(int(pk), "min" in waited) for pk, waited in waits] == [(gate.pk, True), (asked_again.pk, False)]
    assert re.fullmatch(r"[\d.]+ s", waits[1][1].strip())
    page = client.get(f"/runs/{run.pk}/").text
    assert f"waiting since {timezone.localtime(asked.created_at):%H:%M:%S} UTC" in page
    assert f"waiting since {timezone.localtime(first_opening):%H:%M:%S} UTC" not in page
    # The event log keeps both openings; the decision between them is still on record.
    assert Event.objects.filter(run=run, type="checkpoint.created").count() == 2
    review.refresh_from_db()
    assert (review.status, review.decider, review.created_at) == ("approved", "approver", first_opening)
    assert Event.objects.filter(run=run, type="checkpoint.approved").exists()


@pytest.mark.django_db(transaction=True)
def test_a_rejected_review_stays_on_record_and_its_comment_reaches_the_retried_attempt(
    client, personas, demo_agents, make_plan, no_broker
):
    """A reviewer rejected the design with a comment, a person retried the task: the rejection read
    "pending" with no decider in the admin, and the retried attempt's request did not mention it."""
    from tests.conftest import run_here

    run = run_here(runs.launch(make_plan({"design": ("writer", [], {"gate": "after"})}), budget_usd="5"))
    rejected, task = run.checkpoints.get(), run.tasks.get()
    client.force_login(personas["approver"])
    client.post(f"/approvals/{rejected.pk}/reject/", {"comment": "Name the tables and the queue."}, **HTMX)
    client.force_login(personas["launcher"])
    assert client.post(f"/runs/{run.pk}/tasks/{task.pk}/retry/", **HTMX).status_code == 200
    run_here(run)
    client.force_login(personas["approver"])
    attempt_page = client.get(f"/runs/{run.pk}/tasks/{task.pk}/attempts/2/").text
    request = attempt_page.split("Request sent:", 1)[1]
    assert "and the review that rejected an earlier output)</span></h4>" in request
    assert (
        "## Review of your previous output\nYour previous output (attempt 1) was rejected in review by approver.\n"
        "The reviewer&#x27;s comment:\nName the tables and the queue.\n"
    ) in request
    assert "Review of your previous output" not in client.get(f"/runs/{run.pk}/tasks/{task.pk}/attempts/1/").text
    # The rejection keeps its decider and comment beside the review asked again.
    panel = client.get(f"/runs/{run.pk}/tasks/{task.pk}/", **HTMX).text
    assert "Review checkpoint: <strong>rejected</strong> by approver at " in panel
    assert "“Name the tables and the queue.”" in panel
    assert "Review checkpoint: <strong>pending</strong></li>" in panel
    waiting = re.findall(r'id="checkpoint-(\d+)"', client.get("/approvals/").text)
    assert waiting == [str(run.checkpoints.get(status="pending").pk)] and waiting != [str(rejected.pk)]


def test_an_output_review_shows_the_output_as_sanitised_markdown(client, personas, gated_run):
    run, gate = gated_run
    draft = run.tasks.get(subtask__key="draft")
    TaskRun.objects.filter(pk=draft.pk).update(
        state=TaskRun.State.AWAITING_REVIEW,
        output="## Findings\n\n- **fast** enough\n\n<img src=x onerror=alert(1)> done <script>alert(2)</script>",
    )
    review = Checkpoint.objects.create(run=run, task_run=draft, kind=Checkpoint.Kind.AFTER)
    client.force_login(personas["approver"])
    html = client.get("/approvals/").text
    assert "Review the output of “Draft”" in html
    assert "<h2>Findings</h2>" in html and "<strong>fast</strong>" in html  # Markdown, not raw text
    assert "onerror" not in html and "<img" not in html and "<script>alert(2)" not in html
    assert f'id="checkpoint-{review.pk}"' in html


def test_a_long_output_is_cut_at_a_paragraph_with_a_link_to_all_of_it(client, personas, gated_run):
    run, _ = gated_run
    draft = run.tasks.get(subtask__key="draft")
    paragraphs = "\n\n".join(f"Paragraph {i}: " + "word " * 80 for i in range(40))
    TaskRun.objects.filter(pk=draft.pk).update(state=TaskRun.State.AWAITING_REVIEW, output=paragraphs)
    Checkpoint.objects.create(run=run, task_run=draft, kind=Checkpoint.Kind.AFTER)
    client.force_login(personas["approver"])
    html = client.get("/approvals/").text
    assert "Paragraph 3:" in html and "Paragraph 39:" not in html
    assert "all of it on the run page</a>" in html and f"/runs/{run.pk}/?task={draft.pk}" in html


def test_the_count_counts_pending_checkpoints_of_unfinished_runs(client, personas, gated_run, plan_checkpoint):
    client.force_login(personas["approver"])
    response = client.get("/approvals/count/")
    assert response.status_code == 200
    assert response.context["count"] == 2
    assert ">2</span>" in response.text and 'hx-trigger="every 5s"' in response.text
    assert "hx-swap-oob" not in response.text
    run, _ = plan_checkpoint
    runs.cancel(run)  # cancelling rejects its pending checkpoint
    assert client.get("/approvals/count/").context["count"] == 1


def test_an_empty_inbox_says_so(client, personas):
    client.force_login(personas["approver"])
    assert "Nothing is waiting for your decision." in client.get("/approvals/").text
    response = client.get("/approvals/count/")
    assert response.context["count"] == 0
    # No badge at all (an empty count is hidden), not a grey "0" beside "Approvals".
    assert re.search(r'<span id="approvals-count" class="count"[^>]*></span>', response.text), response.text
    assert "title=" not in response.text


# --- Deciding --------------------------------------------------------------------------------------


def test_approve_without_javascript_redirects_with_a_message(client, personas, gated_run):
    run, gate = gated_run
    client.force_login(personas["approver"])
    response = client.post(f"/approvals/{gate.pk}/approve/", {"comment": ""}, follow=True)
    assert response.redirect_chain == [("/approvals/", 302)]
    assert f"Checkpoint {gate.pk} on run #{run.pk} approved." in response.text
    gate.refresh_from_db()
    assert (gate.status, gate.decided_by) == ("approved", personas["approver"])
    assert run.tasks.get(subtask__key="publish").state in (TaskRun.State.READY, TaskRun.State.QUEUED)
    assert Event.objects.filter(type="checkpoint.approved", actor_user=personas["approver"], run=run).exists()


def test_approve_with_htmx_answers_the_fragment_and_the_new_count(client, personas, gated_run):
    run, gate = gated_run
    client.force_login(personas["approver"])
    response = client.post(f"/approvals/{gate.pk}/approve/", {"comment": "Go ahead"}, **HTMX)
    assert response.status_code == 200
    html = response.text
    assert f'<article class="approval approval-done" id="checkpoint-{gate.pk}"' in html
    assert "Approved" in html and "“Go ahead”" in html
    # Nothing waits now: the badge is emptied (and so hidden), not a grey "0".
    assert re.search(r'<span id="approvals-count"[^>]*hx-swap-oob="true"[^>]*></span>', html)
    gate.refresh_from_db()
    assert (gate.status, gate.comment) == ("approved", "Go ahead")


def test_a_decision_on_the_run_page_also_brings_the_headers_count(client, personas, gated_run):
    run, gate = gated_run
    client.force_login(personas["approver"])
    url = f"/runs/{run.pk}/checkpoints/{gate.pk}/decide/"
    response = client.post(url, {"decision": "approve"}, **HTMX)
    assert response.status_code == 200 and "was approved" in response.text
    count = response.text[response.text.index('<span id="approvals-count"') :]
    assert 'hx-swap-oob="true"' in count.split(">", 1)[0] and count.split(">", 1)[1].startswith("</span>")


def test_reject_needs_a_comment(client, personas, gated_run):
    _, gate = gated_run
    client.force_login(personas["approver"])
    response = client.post(f"/approvals/{gate.pk}/reject/", {"comment": "  "}, **HTMX)
    assert response.status_code == 200
    assert '<div class="alert" role="alert">A comment is required to reject: say what is wrong</div>' in response.text
    assert f'id="checkpoint-{gate.pk}"' in response.text and "Approve</button>" in response.text
    gate.refresh_from_db()
    assert gate.status == "pending"
    response = client.post(f"/approvals/{gate.pk}/reject/", {"comment": ""}, follow=True)
    assert f"Could not reject checkpoint {gate.pk}. A comment is required to reject: say what is wrong" in response.text


def test_reject_with_a_comment_skips_the_gated_task(client, personas, gated_run):
    run, gate = gated_run
    client.force_login(personas["approver"])
    response = client.post(f"/approvals/{gate.pk}/reject/", {"comment": "Not ready to publish"}, **HTMX)
    assert "Rejected" in response.text and "“Not ready to publish”" in response.text
    gate.refresh_from_db()
    assert (gate.status, gate.comment, gate.decided_by) == ("rejected", "Not ready to publish", personas["approver"])
    assert run.tasks.get(subtask__key="publish").state == TaskRun.State.SKIPPED


def test_a_checkpoint_decided_already_shows_the_engines_message(client, personas, gated_run):
    _, gate = gated_run
    runs.decide(gate, approve=True, user=personas["agent_admin"])
    client.force_login(personas["approver"])
    response = client.post(f"/approvals/{gate.pk}/reject/", {"comment": "too late"}, **HTMX)
    assert f'role="alert">Checkpoint {gate.pk} was already approved by agent_admin</div>' in response.text
    assert "Already approved by agent_admin." in response.text
    assert "Approve</button>" not in response.text


def test_separation_of_duties_the_launcher_may_reject_but_not_approve_its_plan(client, personas, plan_checkpoint):
    run, checkpoint = plan_checkpoint
    launcher = personas["launcher"]
    launcher.groups.add(personas["approver"].groups.get())
    client.force_login(launcher)
    (item,) = client.get("/approvals/").context["for_another"]
    assert item.approve_blocked
    response = client.post(f"/approvals/{checkpoint.pk}/approve/", {"comment": ""}, **HTMX)
    assert 'role="alert">Separation of duties: launcher launched run' in response.text
    checkpoint.refresh_from_db()
    assert checkpoint.status == "pending"
    client.post(f"/approvals/{checkpoint.pk}/reject/", {"comment": "Wrong plan"})
    checkpoint.refresh_from_db()
    assert checkpoint.status == "rejected"


def test_the_badge_counts_what_the_inbox_lists_for_the_person_to_decide(
    client, personas, gated_run, plan_checkpoint, settings
):
    """The badge counted every pending checkpoint: the launcher of a run waiting for its plan's
    approval read "Approvals 2" with one checkpoint they could approve. Their own plan waits for
    another approver: listed apart, with who may approve and where to edit or reject it, uncounted."""
    _, gate = gated_run
    run, plan_cp = plan_checkpoint
    launcher = personas["launcher"]
    launcher.groups.add(personas["approver"].groups.get())
    client.force_login(launcher)
    response = client.get("/approvals/")
    assert [item.checkpoint.pk for item in response.context["approvals"]] == [gate.pk]
    assert [item.checkpoint.pk for item in response.context["for_another"]] == [plan_cp.pk]
    assert client.get("/approvals/count/").context["count"] == 1
    html = response.text
    own = html[html.index('id="approvals-for-another"') :]
    assert "Your runs' plans, waiting for another approver" in own
    assert f"launcher launched run {run.pk}, so another approver must approve its plan" in own
    assert (
        f'you may still edit or reject it <a href="/runs/{run.pk}/#checkpoint-{plan_cp.pk}">on its run page</a>.' in own
    )
    assert "<form" not in own and "Approve</button>" not in own  # nothing to decide here
    assert "<form" in html[: html.index('id="approvals-for-another"')]  # the gate's decision

    # The approver, who launched neither, has both to decide and counts both.
    client.force_login(personas["approver"])
    response = client.get("/approvals/")
    assert [item.checkpoint.pk for item in response.context["approvals"]] == [gate.pk, plan_cp.pk]
    assert response.context["for_another"] == [] and 'id="approvals-for-another"' not in response.text
    assert client.get("/approvals/count/").context["count"] == 2

    # Without separation of duties the launcher may approve their plan: it is theirs to decide.
    settings.GLASSBOX_SEPARATION_OF_DUTIES = False
    client.force_login(launcher)
    assert client.get("/approvals/count/").context["count"] == 2
    assert len(client.get("/approvals/").context["approvals"]) == 2


def test_an_unknown_checkpoint_is_404(client, personas):
    client.force_login(personas["approver"])
    assert client.post("/approvals/999999/approve/").status_code == 404


def test_an_overlong_comment_is_refused_with_the_reason(client, personas, gated_run):
    _, gate = gated_run
    client.force_login(personas["approver"])
    response = client.post(f"/approvals/{gate.pk}/reject/", {"comment": "x" * 5001}, **HTMX)
    assert "Ensure this value has at most 5000 characters" in response.text
    gate.refresh_from_db()
    assert gate.status == "pending"


def test_the_inbox_and_the_run_page_agree_on_who_may_approve_a_plan(client, personas, plan_checkpoint):
    """The launcher sees no Approve button in the inbox, the run page marks its Approve for the
    page's script to hide, and both say why and who may approve instead."""
    run, checkpoint = plan_checkpoint
    launcher = personas["launcher"]
    launcher.groups.add(personas["approver"].groups.get())
    Run.objects.filter(pk=run.pk).update(launched_by=launcher)
    client.force_login(launcher)
    inbox = client.get("/approvals/").text
    item = inbox[inbox.index(f'id="checkpoint-{checkpoint.pk}"') :]
    assert "Approve</button>" not in item.split("</article>")[0]
    assert "launcher launched run" in inbox and "who may approve: approver" in inbox
    page = client.get(f"/runs/{run.pk}/").text
    assert f'data-launcher="{launcher.pk}">Approve</button>' in page
    assert "Separation of duties: launcher launched this run" in page and "who may approve: approver" in page
    assert f'data-user="{launcher.pk}"' in page  # what the page's script compares


def test_a_viewer_is_told_who_may_decide(client, personas, gated_run):
    run, _ = gated_run
    client.force_login(personas["viewer"])
    page = client.get(f"/runs/{run.pk}/").text
    assert "deciding it needs the Approver role" in page and "who may approve: approver" in page


# --- Tool calls awaiting approval ------------------------------------------------------------------


@pytest.fixture
def tool_checkpoint(demo_agents, make_plan, personas):
    """The coder's running task asks to call workspace:write_file (as engine/tool_approvals opens it)."""
    from orchestrator.engine import execution, tool_approvals

    run = runs.launch(make_plan({"build": ("coder", [])}, goal="Build it"), launched_by=personas["launcher"])
    claim = execution.claim_attempt(run.tasks.get().attempts.get().pk, "worker:1")
    asked = tool_approvals.Asked(
        "toolu_7", "write_file", "workspace", "write_file", {"path": "notes/a.md", "text": "<b>hi</b>"}
    )
    return run, Checkpoint.objects.get(pk=tool_approvals.open_checkpoint(claim, asked))


def test_a_tool_call_is_shown_with_its_tool_and_arguments(client, personas, tool_checkpoint):
    run, checkpoint = tool_checkpoint
    client.force_login(personas["approver"])
    inbox = client.get("/approvals/").text
    assert "coder wants to call workspace:write_file — may it?" in inbox
    assert "notes/a.md" in inbox and "<b>hi</b>" not in inbox  # shown as text, never as HTML
    assert "tool call awaiting approval" in inbox
    page = client.get(f"/runs/{run.pk}/").text
    assert "coder wants to call workspace:write_file" in page and "&lt;b&gt;hi&lt;/b&gt;" in page
    assert "waits for a person to approve a call of workspace:write_file" in page  # the task says why


def test_a_tool_call_in_the_inbox_says_what_else_waits_as_the_run_page_does(client, personas, tool_checkpoint):
    """The inbox did not say that the run was paused: approving there looked as if work would go on."""
    run, _ = tool_checkpoint
    client.force_login(personas["approver"])
    inbox = " ".join(re.sub(r"<[^>]+>", " ", client.get("/approvals/").text).split())
    assert "Task build (coder): it waits; no other task of the run is left" in inbox
    runs.pause(run)
    inbox = " ".join(re.sub(r"<[^>]+>", " ", client.get("/approvals/").text).split())
    assert "Task build (coder): it waits; the run is paused: nothing new starts until it is resumed" in inbox


def inbox_text(client) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", client.get("/approvals/").text).split())


def test_a_gate_in_the_inbox_says_what_else_waits_and_that_its_run_is_paused(client, personas, gated_run):
    """Seen with examples/feature_pipeline.yaml: its run paused, the inbox showed the review as if
    nothing else were going on; approving it there started nothing, and nothing had said why."""
    run, _ = gated_run
    client.force_login(personas["approver"])
    assert "Task publish (writer): it waits; no other task of the run is left" in inbox_text(client)
    runs.pause(run)
    inbox = inbox_text(client)
    assert "Task publish (writer): it waits; the run is paused: nothing new starts until it is resumed" in inbox


def test_a_review_in_the_inbox_says_which_tasks_wait_for_it(client, personas, demo_agents, make_plan):
    plan = make_plan(
        {
            "design": ("architect", [], {"gate": "after"}),
            "build": ("coder", ["design"]),
            "check": ("tester", ["design"]),
        },
        goal="Design then build",
    )
    run = runs.launch(plan, launched_by=personas["launcher"])
    design = run.tasks.get(subtask__key="design")
    TaskRun.objects.filter(pk=design.pk).update(state=TaskRun.State.AWAITING_REVIEW)
    Checkpoint.objects.create(run=run, task_run=design, kind=Checkpoint.Kind.AFTER)
    client.force_login(personas["approver"])
    assert "Task design (architect): it waits; 2 tasks after it wait for it" in inbox_text(client)


def test_a_plan_in_the_inbox_says_how_many_tasks_it_starts_at_what_cost_and_cap(
    client, personas, demo_agents, make_plan, priced_limit
):
    """The inbox showed a plan's goal alone: a 300-task run asked for approval as a 5-task one did."""
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"]), "c": ("writer", ["a"])}, goal="Three")
    run = runs.launch(plan, launched_by=personas["launcher"], require_plan_approval=True, cap=2, budget_usd="3")
    assert run.estimate_usd is not None
    client.force_login(personas["approver"])
    terms = f"3 tasks · estimated {wording.usd(run.estimate_usd)} of a $3.00 budget · cap 2"
    assert run.estimate_usd > 0 and terms in inbox_text(client)
    assert "No price is known" not in inbox_text(client)


def test_a_plan_whose_models_have_no_price_is_not_shown_as_free(client, personas, demo_agents, make_plan):
    """Its agents' model had no price: the inbox said "estimated $0.00", which reads as free. It
    says there is no estimate, and which model has no price, as the pre-flight does."""
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"])}, goal="Two")
    run = runs.launch(plan, launched_by=personas["launcher"], require_plan_approval=True, cap=2, budget_usd="3")
    assert run.estimate_usd == 0
    client.force_login(personas["approver"])
    text = inbox_text(client)
    assert "estimated $0.00" not in text
    assert "2 tasks · no estimate: no price was known for its models · a $3.00 budget · cap 2" in text
    assert (
        "No price is known for simulated:sim-1: counted as $0 (set prices in the admin under provider limits)." in text
    )


def test_a_tool_call_rejected_from_the_inbox_keeps_the_task_running_and_names_who(client, personas, tool_checkpoint):
    run, checkpoint = tool_checkpoint
    client.force_login(personas["approver"])
    assert client.post(f"/approvals/{checkpoint.pk}/reject/", {"comment": ""}, **HTMX).status_code == 200
    checkpoint.refresh_from_db()
    assert checkpoint.status == "pending"  # a rejection needs a comment
    client.post(f"/approvals/{checkpoint.pk}/reject/", {"comment": "not in notes/"}, **HTMX)
    checkpoint.refresh_from_db()
    assert (checkpoint.status, checkpoint.comment) == ("rejected", "not in notes/")
    task = run.tasks.get()
    assert task.state == TaskRun.State.RUNNING and task.wait_code == ""
    event = Event.objects.get(run=run, type="checkpoint.rejected")
    assert event.actor_name == "approver" and event.payload["tool"] == "workspace:write_file"
    assert "coder wants to call workspace:write_file" in event.message


def test_each_item_shows_its_runs_goal_once(client, personas, gated_run, plan_checkpoint):
    """A plan's item showed its run's goal twice: beside the run's number and again as the "Goal"
    to approve. The plan's shows it once, as what is approved; a gate's beside its run's number."""
    _, gate = gated_run
    _, plan_cp = plan_checkpoint
    client.force_login(personas["approver"])
    html = client.get("/approvals/").text
    item = {cp.pk: html[html.index(f'id="checkpoint-{cp.pk}"') :].split("</article>")[0] for cp in (gate, plan_cp)}
    assert item[plan_cp.pk].count("Plan to approve") == 1
    assert '<div class="excerpt markdown" aria-label="Goal"><p>Plan to approve</p>' in item[plan_cp.pk]
    assert item[gate.pk].count("Write and publish the notes") == 1
    assert "· Write and publish the notes" in item[gate.pk]


def test_a_plan_in_the_inbox_lists_the_subtasks_approving_starts_read_only(client, personas, demo_agents, make_plan):
    """The inbox let an approver approve a plan whose subtasks it never showed (its goal, count and
    cost only): it lists them as the run page's plan review does, without that page's edit forms."""
    plan = make_plan(
        {"scope": ("researcher", []), "draft": ("writer", ["scope"], {"instructions": "Two pages at most."})},
        goal="Write it up",
    )
    run = runs.launch(plan, launched_by=personas["launcher"], require_plan_approval=True)
    client.force_login(personas["approver"])
    html = client.get("/approvals/").text
    text = inbox_text(client)
    assert "The plan: 2 subtasks" in text
    assert re.search(r"draft\s*</code>", html) and "Two pages at most." in text
    row = re.search(r'<tr id="plan-subtask-draft".*?</tr>', html, re.S)
    assert row is not None
    row_text = " ".join(re.sub(r"<[^>]+>", " ", row.group(0)).split())
    assert "writer" in row_text and "scope" in row_text  # its agent and what it depends on
    assert "<textarea" not in row.group(0) and "Remove" not in row.group(0)  # read-only here
    assert f'href="/runs/{run.pk}/#checkpoint-{run.checkpoints.get().pk}"' in html  # edit it there
