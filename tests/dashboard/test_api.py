"""The JSON API: launching from documents and saved plans, run controls, checkpoints, events,
agents, errors in one shape, token and session authentication."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from orchestrator.engine import reruns, runs
from orchestrator.governance import tokens
from orchestrator.models import Agent, Attempt, Checkpoint, Event, Plan, Run, TaskRun
from orchestrator.readmodels.records import RunRecord
from orchestrator.readmodels.totals import totals as totals_of

DOCUMENT = """\
goal: Write a brief
subtasks:
  - key: research
    agent: researcher
    title: Research
  - key: write
    agent: writer
    title: Write
    depends_on: [research]
"""


class Api:
    """A test client speaking to /api/ with a persona's token."""

    def __init__(self, user):
        self.client = Client()
        self.headers = {}
        if user is not None:
            _, raw = tokens.issue(user, "test")
            self.headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}

    def get(self, path, **params):
        return self.client.get(f"/api{path}", params, **self.headers)

    def post(self, path, body=None, raw: str | None = None):
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(f"/api{path}", data, content_type="application/json", **self.headers)

    def patch(self, path, body):
        return self.client.patch(f"/api{path}", json.dumps(body), content_type="application/json", **self.headers)


@pytest.fixture
def team(demo_agents, priced_limit):
    return demo_agents


@pytest.fixture
def api(personas, team):
    return {name: Api(user) for name, user in personas.items()}


def error(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]


# --- Launch --------------------------------------------------------------------------------------


def test_launch_from_a_document(api, personas):
    response = api["launcher"].post(
        "/runs", {"document": DOCUMENT, "filename": "brief.yaml", "cap": 2, "budget_usd": "1.5"}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["run"]["status"] == "running" and body["run"]["launched_by"] == "launcher"
    assert (body["run"]["cap"], body["run"]["budget_usd"]) == (2, "1.5000")
    assert [t["key"] for t in body["tasks"]] == ["research", "write"]
    assert body["totals"]["total"] == 2 and body["totals"]["cost_usd"] == "0.000000"
    plan = Plan.objects.get()
    assert (plan.created_by, plan.source_name, plan.document) == (personas["launcher"], "brief.yaml", DOCUMENT)


def test_launch_a_saved_plan_with_plan_approval(api, make_plan):
    plan = make_plan({"a": ("researcher", [])})
    response = api["launcher"].post(
        "/runs", {"plan_id": plan.pk, "require_plan_approval": True, "failure_policy": "fail_fast"}
    )
    assert response.status_code == 201
    body = response.json()
    assert body["run"]["status"] == "awaiting_approval" and body["run"]["failure_policy"] == "fail_fast"
    assert [(c["kind"], c["status"]) for c in body["checkpoints"]] == [("plan", "pending")]


def test_an_invalid_plan_lists_every_problem_and_saves_nothing(api):
    document = "goal: g\nsubtasks:\n  - key: a\n    agent: nobody\n    title: A\n  - key: b\n    agent: writer\n    depends_on: [zzz]\n"
    response = api["launcher"].post("/runs", {"document": document})
    assert response.status_code == 422
    body = error(response)
    assert body["code"] == "invalid_plan" and body["message"] == "The plan has 3 problems; nothing was saved."
    assert body["details"] == [
        {"where": 'subtasks[0] (key "a")', "field": "agent", "message": 'no agent named "nobody"'},
        {"where": 'subtasks[1] (key "b")', "field": "title", "message": "is required: a short human-readable title"},
        {"where": 'subtasks[1] (key "b")', "field": "depends_on", "message": 'unknown subtask "zzz"'},
    ]
    assert not Plan.objects.exists() and not Run.objects.exists()


def test_a_syntax_error_names_line_and_column(api):
    body = error(api["launcher"].post("/runs", {"document": "goal: [unclosed\n"}))
    assert body["code"] == "invalid_plan"
    assert body["details"][0]["where"] == "YAML syntax" and "line 2" in body["details"][0]["message"]


def test_over_budget_is_refused_with_both_numbers_and_nothing_is_saved(api):
    response = api["launcher"].post("/runs", {"document": DOCUMENT, "budget_usd": "0.0001"})
    assert response.status_code == 422
    body = error(response)
    assert body["code"] == "launch_refused"
    assert "over the budget of $0.0001" in body["message"] and "estimated cost $" in body["message"]
    assert not Plan.objects.exists() and not Run.objects.exists()


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "give exactly one of plan_id"),
        ({"plan_id": 1, "document": DOCUMENT}, "give exactly one of plan_id"),
        ({"document": DOCUMENT, "cap": 0}, "body.cap: must be a whole number from 1 to 1000, got 0"),
        ({"document": DOCUMENT, "cap": 1001}, "body.cap: must be a whole number from 1 to 1000, got 1001"),
        ({"document": DOCUMENT, "budget_usd": "-1"}, "must be from $0.0001 to $99,999,999.9999, got -$1.00"),
        ({"document": DOCUMENT, "budget_usd": "0.12345"}, "must have at most 4 decimal places"),
        ({"document": DOCUMENT, "failure_policy": "sometimes"}, "'continue' or 'fail_fast'"),
        ({"document": "goal: g\x00"}, "must not contain NUL characters"),
        (
            {"document": DOCUMENT, "require_plan_approval": 0},
            "body.require_plan_approval: Input should be a valid boolean",
        ),
        ({"document": DOCUMENT, "require_plan_approval": "yes"}, "Input should be a valid boolean"),
        ({"document": DOCUMENT, "cap": "2"}, "body.cap: must be a whole number"),
        ({"document": DOCUMENT, "budget_usd": 1.5}, "body.budget_usd: Input should be a valid string"),
        ({"document": DOCUMENT, "budget_usd": "1e2"}, "must be an amount in USD such as 0.50, got '1e2'"),
    ],
)
def test_invalid_launch_requests_say_which_field(api, body, message):
    response = api["launcher"].post("/runs", body)
    assert response.status_code == 422
    detail = error(response)
    assert detail["code"] == "invalid_request" and message in detail["message"]
    assert detail["details"] and all(d["where"] == "body" for d in detail["details"])


def test_an_unknown_saved_plan_is_404(api):
    body = error(api["launcher"].post("/runs", {"plan_id": 4242}))
    assert body == {"code": "not_found", "message": "No plan with id 4242.", "details": []}


def test_malformed_json_is_400_naming_the_place(api):
    response = api["launcher"].post("/runs", raw='{"document": ')
    assert response.status_code == 400
    body = error(response)
    assert body["code"] == "invalid_json" and "line 1, column 14" in body["message"]


def test_a_document_over_5_mb_is_refused_in_words(api):
    document = "goal: g\n# " + "x" * (5 * 1024 * 1024) + "\n"
    body = error(api["launcher"].post("/runs", {"document": document}))
    assert body["code"] == "invalid_plan"
    assert body["details"][0]["where"] == "size" and "at most 5,242,880 bytes (5 MB)" in body["details"][0]["message"]


def test_a_body_over_the_upload_limit_is_413_json(api, settings):
    response = api["launcher"].post(
        "/runs", raw=json.dumps({"document": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)})
    )
    assert response.status_code == 413
    body = error(response)
    assert body["code"] == "request_too_large" and "5,242,880" in body["message"]
    assert not Plan.objects.exists()


# --- Runs ----------------------------------------------------------------------------------------


@pytest.fixture
def two_runs(make_plan, personas, team):
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"])})
    first = runs.launch(plan, launched_by=personas["launcher"])
    second = runs.launch(plan, launched_by=personas["approver"], require_plan_approval=True)
    return first, second


def test_list_runs_newest_first_with_filters_and_pages(api, two_runs):
    first, second = two_runs
    viewer = api["viewer"]
    body = viewer.get("/runs").json()
    assert body["count"] == 2 and [r["id"] for r in body["items"]] == [second.pk, first.pk]
    assert [r["id"] for r in viewer.get("/runs", status="awaiting_approval").json()["items"]] == [second.pk]
    assert [r["id"] for r in viewer.get("/runs", launched_by="launcher").json()["items"]] == [first.pk]
    page = viewer.get("/runs", limit=1, offset=1).json()
    assert (page["count"], page["limit"], page["offset"], [r["id"] for r in page["items"]]) == (2, 1, 1, [first.pk])


def test_a_run_says_who_launched_it_in_words_from_the_command_line_too(api, two_runs, make_plan):
    first, second = two_runs
    from_cli = runs.launch(make_plan({"a": ("researcher", [])}), actor_name="cli:root")
    viewer = api["viewer"]
    listed = {r["id"]: (r["launched_by"], r["launcher"]) for r in viewer.get("/runs").json()["items"]}
    assert listed == {
        first.pk: ("launcher", "launcher"),
        second.pk: ("approver", "approver"),
        from_cli.pk: (None, "root from the command line"),
    }
    one = viewer.get(f"/runs/{from_cli.pk}").json()["run"]
    assert (one["launched_by"], one["launcher"]) == (None, "root from the command line")
    with CaptureQueriesContext(connection) as one_run:
        viewer.get("/runs", limit=1)
    with CaptureQueriesContext(connection) as three_runs:
        viewer.get("/runs", limit=3)
    assert len(three_runs.captured_queries) == len(one_run.captured_queries)  # no read per run
    assert error(viewer.get("/runs", status="bogus"))["code"] == "invalid_request"


def test_a_run_says_what_its_cost_leaves_out_on_a_model_with_no_price(api, two_runs):
    """The API's runs gave cost_usd "0" for a run on a model with no price, as if free."""
    first, second = two_runs
    Agent.objects.filter(name="researcher").update(model="sim-unpriced")
    task = first.tasks.get(subtask__key="a")
    tokens = {"input_tokens": 1_000, "output_tokens": 212}  # an ended attempt's, settled on its task
    Attempt.objects.update_or_create(task_run=task, number=1, defaults={"state": Attempt.State.SUCCEEDED, **tokens})
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.SUCCEEDED, **tokens)
    viewer = api["viewer"]
    listed = {r["id"]: r for r in viewer.get("/runs").json()["items"]}
    one = viewer.get(f"/runs/{first.pk}").json()["run"]
    for record in (listed[first.pk], one):
        assert record["unpriced_tokens"] == {"simulated:sim-unpriced": 1_212}
        assert record["unpriced_note"] == totals_of(first).unpriced_note  # as the Cost card says it
        assert record["unpriced_note"].startswith("simulated:sim-unpriced has no price: its 1,212 tokens")
    assert (listed[second.pk]["unpriced_tokens"], listed[second.pk]["unpriced_note"]) == ({}, "")


def test_get_a_run_with_tasks_totals_and_checkpoints(api, two_runs):
    first, _ = two_runs
    body = api["viewer"].get(f"/runs/{first.pk}").json()
    assert body["run"] == RunRecord.of(Run.objects.get(pk=first.pk)).model_dump(mode="json")
    assert [t["key"] for t in body["tasks"]] == ["a", "b"]
    assert body["tasks"][0]["attempts"][0]["number"] == 1
    assert body["totals"]["total"] == 2 and body["totals"]["queued"] == 1 and body["totals"]["pending"] == 1


def test_an_unknown_run_is_404_in_the_error_shape(api, two_runs):
    response = api["viewer"].get("/runs/999999")
    assert response.status_code == 404
    assert error(response) == {"code": "not_found", "message": "No run with id 999999.", "details": []}


def test_pause_resume_cancel(api, two_runs):
    first, _ = two_runs
    launcher = api["launcher"]
    assert launcher.post(f"/runs/{first.pk}/pause").json()["run"]["status"] == "paused"
    conflict = launcher.post(f"/runs/{first.pk}/pause")
    assert conflict.status_code == 409
    assert error(conflict) == {
        "code": "action_refused",
        "message": f"Run {first.pk} is paused: it cannot be paused",
        "details": [],
    }
    assert launcher.post(f"/runs/{first.pk}/resume").json()["run"]["status"] == "running"
    assert launcher.post(f"/runs/{first.pk}/cancel").json()["run"]["status"] == "cancelled"
    actors = set(Event.objects.filter(type__in=["run.paused", "run.resumed"]).values_list("actor_name", flat=True))
    assert actors == {"launcher"}


def test_a_runs_budget_is_changed_by_whoever_controls_runs_with_the_launchs_checks(api, two_runs):
    first, _ = two_runs
    changed = api["launcher"].post(f"/runs/{first.pk}/budget", {"budget_usd": "7.25"})
    assert changed.status_code == 200 and changed.json()["run"]["budget_usd"] == "7.2500"
    event = Event.objects.get(run=first, type="run.budget_changed")
    assert (event.actor_name, event.message) == ("launcher", "budget changed from $0.50 to $7.25 by launcher")

    invalid = api["launcher"].post(f"/runs/{first.pk}/budget", {"budget_usd": "0.123456"})
    assert invalid.status_code == 422
    assert error(invalid)["details"] == [
        {"where": "body", "field": "budget_usd", "message": "must have at most 4 decimal places, got $0.123456"}
    ]
    same = api["launcher"].post(f"/runs/{first.pk}/budget", {"budget_usd": "7.25"})
    assert same.status_code == 409 and error(same)["message"] == f"Run {first.pk}'s budget is already $7.25"
    denied = api["viewer"].post(f"/runs/{first.pk}/budget", {"budget_usd": "9"})
    assert denied.status_code == 403 and error(denied)["code"] == "permission_denied"
    first.refresh_from_db()
    assert first.budget_usd == Decimal("7.25")


def test_a_retry_the_budget_cannot_cover_is_refused_with_the_numbers_until_the_budget_is_raised(api, two_runs):
    first, _ = two_runs
    a = first.tasks.get(subtask__key="a")
    TaskRun.objects.filter(pk=a.pk).update(state=TaskRun.State.FAILED, finished_at=timezone.now())
    Run.objects.filter(pk=first.pk).update(cost_usd=Decimal("0.49"), reserved_usd=0)
    refused = api["launcher"].post(f"/tasks/{a.pk}/retry")
    assert refused.status_code == 409
    said = re.fullmatch(
        rf"Task a may cost up to \$0\.0\d+ and run {first.pk} has \$0\.0100 of its budget of \$0\.50 left "
        r"\(\$0\.4900 spent\): raise the budget to at least \$(0\.5\d+) first",
        error(refused)["message"],
    )
    assert said, error(refused)["message"]
    assert api["launcher"].post(f"/runs/{first.pk}/budget", {"budget_usd": said.group(1)}).status_code == 200
    assert api["launcher"].post(f"/tasks/{a.pk}/retry").json()["state"] in ("ready", "queued")


def test_retry_and_skip_tasks(api, two_runs):
    first, _ = two_runs
    task = first.tasks.get(subtask__key="a")
    skipped = api["launcher"].post(f"/tasks/{task.pk}/skip", {"reason": "not needed"})
    assert (
        skipped.status_code == 200 and skipped.json()["state"] == "skipped" and skipped.json()["error"] == "not needed"
    )
    retried = api["launcher"].post(f"/tasks/{task.pk}/retry")
    assert retried.status_code == 200 and retried.json()["state"] in ("ready", "queued")
    again = api["launcher"].post(f"/tasks/{task.pk}/retry")
    assert (
        again.status_code == 409
        and "only a failed, cancelled or skipped task can be retried" in error(again)["message"]
    )
    assert error(api["launcher"].post("/tasks/999999/retry"))["message"] == "No task with id 999999."


# --- Checkpoints ---------------------------------------------------------------------------------


def test_list_pending_checkpoints(api, two_runs):
    _, second = two_runs
    body = api["viewer"].get("/checkpoints").json()
    assert body["count"] == 1
    assert body["items"][0]["run"] == second.pk and body["items"][0]["kind"] == "plan"
    assert api["viewer"].get("/checkpoints", status="approved").json()["count"] == 0
    assert api["viewer"].get("/checkpoints", run=second.pk + 1000).json()["count"] == 0


def test_checkpoints_are_listed_the_longest_waiting_first_as_the_docs_say(api, personas, make_plan):
    """The docs said "oldest first", but a checkpoint asked again (its task retried) waits from its
    new opening and is listed after those opened before it: the docs say the order it has."""
    first = runs.launch(make_plan({"a": ("researcher", [], {"gate": "before"})}))
    second = runs.launch(make_plan({"b": ("researcher", [], {"gate": "before"})}))
    rejected = first.checkpoints.get()
    runs.decide(rejected, approve=False, comment="not yet", user=personas["approver"])
    reruns.rerun_from(first.tasks.get())  # its gate asks again, now, with a new checkpoint
    asked_again = first.checkpoints.get(status="pending")
    listed = api["viewer"].get("/checkpoints").json()["items"]
    assert [item["id"] for item in listed] == [second.checkpoints.get().pk, asked_again.pk]
    # The rejection is listed as it was decided, not reset to pending.
    [decided] = api["viewer"].get("/checkpoints?status=rejected").json()["items"]
    assert (decided["id"], decided["decided_by"], decided["comment"]) == (rejected.pk, "approver", "not yet")
    client = Client()
    client.force_login(personas["viewer"])
    said = client.get("/api/openapi.json").json()["paths"]["/api/checkpoints"]["get"]["description"]
    assert "the longest waiting first" in said and "oldest" not in said
    client.force_login(personas["approver"])
    inbox = client.get("/approvals/").text
    assert "the longest waiting first" in inbox and "oldest" not in inbox


def test_approve_a_plan_launched_by_someone_else(api, personas, make_plan):
    run = runs.launch(
        make_plan({"a": ("researcher", [])}), launched_by=personas["launcher"], require_plan_approval=True
    )
    checkpoint = run.checkpoints.get()
    response = api["approver"].post(f"/checkpoints/{checkpoint.pk}/approve", {"comment": "fine"})
    assert response.status_code == 200
    assert response.json()["status"] == "approved" and response.json()["decided_by"] == "approver"
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING


def test_separation_of_duties_refuses_approving_your_own_run(api, two_runs):
    _, second = two_runs  # launched by the approver
    checkpoint = second.checkpoints.get()
    response = api["approver"].post(f"/checkpoints/{checkpoint.pk}/approve")
    assert response.status_code == 409
    message = error(response)["message"]
    assert message.startswith(
        f"Separation of duties: approver launched run {second.pk}, so another approver must approve its plan ("
    )
    assert "nobody else holds the Approver role yet" in message  # and says how to give it to someone
    checkpoint.refresh_from_db()
    assert checkpoint.status == Checkpoint.Status.PENDING


def test_separation_of_duties_can_be_turned_off(api, two_runs, settings):
    settings.GLASSBOX_SEPARATION_OF_DUTIES = False
    _, second = two_runs
    response = api["approver"].post(f"/checkpoints/{second.checkpoints.get().pk}/approve")
    assert response.status_code == 200 and response.json()["status"] == "approved"


def test_the_launcher_may_still_reject_their_own_plan(api, personas, make_plan):
    both = User.objects.create_user("both")
    both.groups.add(*personas["launcher"].groups.all(), *personas["approver"].groups.all())
    run = runs.launch(make_plan({"a": ("researcher", [])}), launched_by=both, require_plan_approval=True)
    response = Api(both).post(f"/checkpoints/{run.checkpoints.get().pk}/reject", {"comment": "wrong goal"})
    assert response.status_code == 200 and response.json()["status"] == "rejected"


@pytest.mark.parametrize("body", [{}, {"comment": ""}, {"comment": "   "}])
def test_reject_needs_a_comment(api, two_runs, body):
    _, second = two_runs
    response = api["approver"].post(f"/checkpoints/{second.checkpoints.get().pk}/reject", body)
    assert response.status_code == 422
    assert error(response)["details"][0]["field"] == "comment"


def test_deciding_twice_is_a_conflict(api, personas, make_plan):
    run = runs.launch(
        make_plan({"a": ("researcher", [])}), launched_by=personas["launcher"], require_plan_approval=True
    )
    checkpoint = run.checkpoints.get()
    api["approver"].post(f"/checkpoints/{checkpoint.pk}/reject", {"comment": "no"})
    again = api["approver"].post(f"/checkpoints/{checkpoint.pk}/approve")
    assert again.status_code == 409 and error(again)["message"] == (
        f"Checkpoint {checkpoint.pk} was already rejected by approver"
    )


# --- Events and agents ---------------------------------------------------------------------------


def test_events_after_a_sequence_number_in_pages(api, two_runs):
    first, _ = two_runs
    all_seqs = list(first.events.order_by("seq").values_list("seq", flat=True))
    assert len(all_seqs) >= 3
    page = api["viewer"].get(f"/runs/{first.pk}/events", after=0, limit=2).json()
    assert [e["seq"] for e in page["items"]] == all_seqs[:2] and page["has_more"] is True
    rest = api["viewer"].get(f"/runs/{first.pk}/events", after=page["next_after"], limit=100).json()
    assert [e["seq"] for e in rest["items"]] == all_seqs[2:] and rest["has_more"] is False
    assert rest["next_after"] == all_seqs[-1]
    empty = api["viewer"].get(f"/runs/{first.pk}/events", after=all_seqs[-1]).json()
    assert empty == {"items": [], "next_after": all_seqs[-1], "has_more": False}


def test_agents_list_with_filters(api, team):
    from orchestrator.governance import registry

    registry.set_status(team["writer"], "retired")
    body = api["viewer"].get("/agents").json()
    assert body["count"] == 6 and [a["name"] for a in body["items"]][:2] == ["architect", "coder"]
    assert [a["name"] for a in api["viewer"].get("/agents", status="retired").json()["items"]] == ["writer"]
    assert api["viewer"].get("/agents", provider="anthropic").json()["count"] == 0


# --- Authentication ------------------------------------------------------------------------------


def test_no_credentials_is_401_and_audited(api):
    response = api["anonymous"].get("/runs")
    assert response.status_code == 401 and error(response)["code"] == "not_authenticated"
    denial = Event.objects.get(type="access.denied")
    assert denial.actor_name == "anonymous" and denial.payload == {
        "permission": "authentication",
        "action": "GET /api/runs",
    }


def test_a_revoked_token_is_401_and_audited_by_its_prefix(personas, team):
    token, raw = tokens.issue(personas["viewer"], "ci")
    tokens.revoke(token)
    response = Client().get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 401
    denial = Event.objects.filter(type="access.denied").latest("id")
    assert denial.actor_name == f"API token {token.prefix}… (revoked, of viewer)"
    assert (
        denial.message
        == f"API token {token.prefix}… (revoked, of viewer) was denied GET /api/runs (needs authentication)"
    )
    assert raw.split("_", 2)[2] not in denial.message  # the secret part is never written


def test_an_unknown_token_is_audited_by_the_prefix_it_claims(team):
    response = Client().get("/api/runs", HTTP_AUTHORIZATION="Bearer gbx_deadbeef_not-a-real-secret")
    assert response.status_code == 401
    assert Event.objects.filter(type="access.denied").latest("id").actor_name == "API token deadbeef… (unknown)"


def test_session_auth_reads_freely_and_needs_csrf_to_write(personas, two_runs):
    first, _ = two_runs
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(personas["launcher"])
    assert browser.get("/api/runs").status_code == 200
    refused = browser.post(f"/api/runs/{first.pk}/pause", "{}", content_type="application/json")
    assert refused.status_code == 403 and error(refused)["code"] == "csrf_failed"
    assert Event.objects.filter(type="access.denied", payload__permission="csrf").exists()
    first.refresh_from_db()
    assert first.status == Run.Status.RUNNING
    browser.get("/api/docs")  # sets the csrftoken cookie
    token = browser.cookies["csrftoken"].value
    allowed = browser.post(f"/api/runs/{first.pk}/pause", "{}", content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert allowed.status_code == 200 and allowed.json()["run"]["status"] == "paused"


def test_a_token_needs_no_csrf(personas, two_runs):
    first, _ = two_runs
    _, raw = tokens.issue(personas["launcher"], "ci")
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        f"/api/runs/{first.pk}/pause", "{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.status_code == 200


# --- Schema and docs -----------------------------------------------------------------------------


def test_openapi_schema_and_docs_need_a_login(personas, team):
    anonymous = Client()
    schema = anonymous.get("/api/openapi.json")
    assert schema.status_code == 401 and error(schema)["code"] == "not_authenticated"
    docs = anonymous.get("/api/docs")
    assert docs.status_code == 302 and docs.url.startswith("/accounts/login/")
    _, raw = tokens.issue(personas["outsider"], "ci")
    assert anonymous.get("/api/openapi.json", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200


def test_the_schema_documents_every_operation_and_error(personas, team):
    client = Client()
    client.force_login(personas["viewer"])
    schema = client.get("/api/openapi.json").json()
    operations = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    assert operations == {
        ("GET", "/api/runs"),
        ("POST", "/api/runs"),
        ("GET", "/api/runs/{run_id}"),
        ("POST", "/api/runs/{run_id}/pause"),
        ("POST", "/api/runs/{run_id}/resume"),
        ("POST", "/api/runs/{run_id}/cancel"),
        ("POST", "/api/runs/{run_id}/budget"),
        ("GET", "/api/runs/{run_id}/events"),
        ("POST", "/api/tasks/{task_id}/retry"),
        ("POST", "/api/tasks/{task_id}/skip"),
        ("GET", "/api/checkpoints"),
        ("POST", "/api/checkpoints/{checkpoint_id}/approve"),
        ("POST", "/api/checkpoints/{checkpoint_id}/reject"),
        ("GET", "/api/agents"),
        ("POST", "/api/agents"),
        ("PATCH", "/api/agents/{name}"),
    }
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            assert {"401", "403", "422"} <= set(operation["responses"]), (method, path)
            assert operation.get("security"), (method, path)


def test_docs_load_swagger_ui_from_our_own_origin(personas, team):
    import re

    client = Client()
    client.force_login(personas["viewer"])
    page = client.get("/api/docs").content.decode()
    sources = re.findall(r'<script[^>]*\bsrc="([^"]+)"', page)
    styles = re.findall(r'<link[^>]*\bhref="([^"]+)"', page)
    assert sources == ["/static/ninja/swagger-ui-bundle.js", "/static/ninja/swagger-ui-init.js"]
    assert all(url.startswith("/static/") for url in styles)
    # No address of another origin anywhere (the page's random CSRF token may spell "cdn" by chance).
    assert not re.search(r"(https?:)?//[a-z0-9.-]*(cdn|unpkg)", page.lower())


def test_the_audit_log_cannot_be_changed_through_the_api(api, two_runs):
    first, _ = two_runs
    before = list(Event.objects.order_by("id").values())
    viewer = api["viewer"]
    for method in ("put", "patch", "delete"):
        response = getattr(viewer.client, method)(f"/api/runs/{first.pk}/events", **viewer.headers)
        assert response.status_code == 405
    assert viewer.post(f"/runs/{first.pk}/events", {"type": "forged"}).status_code == 405
    after = list(Event.objects.exclude(type="access.denied").order_by("id").values())
    assert after == before


# --- Schemas ---------------------------------------------------------------------------------------


def test_run_totals_are_the_engines_progress_counts(api, two_runs):
    first, _ = two_runs
    totals = api["viewer"].get(f"/runs/{first.pk}").json()["totals"]
    progress = runs.progress(first)
    expected = progress.model_dump(
        mode="json",
        exclude={
            "run_id",
            "status",
            "summary",
            "pending_checkpoints",
            "needs_approval",
            "in_review",
            "held_back",
            "retrying",
            "awaiting_tool_approval",
        },
    )
    assert {k: v for k, v in totals.items() if k != "elapsed_s"} == {
        k: v for k, v in expected.items() if k != "elapsed_s"
    }
    assert isinstance(totals["cost_usd"], str)


def test_after_a_cancel_the_totals_say_an_attempt_is_still_stopping_until_it_stops(api, two_runs):
    """A client polling "is everything stopped?" after a cancel saw status "cancelled" while an
    attempt still ran to its next beat, and no count of it (the totals left attempts_stopping out)."""
    from orchestrator.engine import attempt_ends, execution
    from orchestrator.models import Attempt
    from orchestrator.providers.base import Usage

    first, _ = two_runs
    launcher = api["launcher"]
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=first).pk, "host:1")
    running = launcher.get(f"/runs/{first.pk}").json()["totals"]
    assert (running["running"], running["attempts_stopping"]) == (1, 0)  # a running run's attempt is not stopping

    assert launcher.post(f"/runs/{first.pk}/cancel").json()["run"]["status"] == "cancelled"
    body = launcher.get(f"/runs/{first.pk}").json()
    assert body["run"]["status"] == "cancelled" and body["totals"]["attempts_stopping"] == 1
    assert body["totals"]["input_tokens"] == 0  # what it used is not counted yet

    attempt_ends.cancel_attempt(claim, Usage(input_tokens=300, output_tokens=100))  # its next beat
    totals = launcher.get(f"/runs/{first.pk}").json()["totals"]
    assert totals["attempts_stopping"] == 0 and (totals["input_tokens"], totals["output_tokens"]) == (300, 100)


def streaming_first_attempt(run):
    """The claim of the run's one queued attempt (its first task's), streaming: its host has saved
    the input its provider reported at the stream's start (1,027 tokens) and 8 tokens of output."""
    from orchestrator.engine import execution
    from orchestrator.models import Attempt
    from orchestrator.providers.base import Usage

    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "host:1")
    assert claim is not None
    execution.save_progress([(claim, execution.Progress("Hel", 5, Usage(input_tokens=1_027, output_tokens=8)))])
    return claim


def test_a_running_attempts_tokens_count_in_the_totals_as_on_the_run_page(api, two_runs):
    """The API's totals said 0 input tokens while the run page's Tokens card said "1,027 in · 0 out ·
    8 streaming" and run_status "1,027 in / 0 out / 8 streaming": a running attempt's input counts
    from its stream's start, its streamed output apart, and both once it settles."""
    from orchestrator.engine import attempt_ends
    from orchestrator.providers.base import Usage

    first, _ = two_runs
    viewer = api["viewer"]
    claim = streaming_first_attempt(first)

    def tokens():
        totals = viewer.get(f"/runs/{first.pk}").json()["totals"]
        return {k: totals[k] for k in ("input_tokens_so_far", "output_tokens", "streaming_tokens", "input_tokens")}

    page = totals_of(first)
    assert tokens() == {
        "input_tokens_so_far": page.input_tokens_so_far,
        "output_tokens": page.output_tokens,
        "streaming_tokens": page.streaming_tokens,
        "input_tokens": 0,  # settled only, as cost_usd
    }
    assert (page.input_tokens_so_far, page.output_tokens, page.streaming_tokens) == (1_027, 0, 8)

    attempt_ends.complete(claim, "Hello", Usage(input_tokens=1_027, output_tokens=40), advance=False)
    assert tokens() == {"input_tokens_so_far": 1_027, "output_tokens": 40, "streaming_tokens": 0, "input_tokens": 1_027}
    page = totals_of(first)
    assert (page.input_tokens_so_far, page.output_tokens, page.streaming_tokens) == (1_027, 40, 0)


def test_a_running_attempts_tokens_count_in_its_tasks_record_as_in_the_task_panel(api, two_runs):
    """The run's totals said "1,027 in" while its running task's record said 0 input and 0 output:
    the task's record counted only ended attempts. Its so-far numbers are the task panel's ("1,027
    in, 0 out, 8 streaming"), and once the attempt ends they are counted once, settled."""
    from orchestrator.engine import attempt_ends
    from orchestrator.providers.base import Usage
    from orchestrator.readmodels.tasks import task_views

    first, _ = two_runs
    viewer = api["viewer"]
    claim = streaming_first_attempt(first)

    def tokens():
        detail = viewer.get(f"/runs/{first.pk}").json()
        fields = ("input_tokens", "input_tokens_so_far", "output_tokens", "streaming_tokens")
        tasks = {task["key"]: {k: task[k] for k in fields} for task in detail["tasks"]}
        return tasks, detail["run"]["input_tokens"], detail["totals"]["input_tokens_so_far"]

    tasks, run_input, totals_input = tokens()
    panel = {view.key: view for view in task_views(first)}["a"]
    assert tasks["a"] == {
        "input_tokens": 0,  # settled only, as cost_usd
        "input_tokens_so_far": panel.input_tokens_so_far,
        "output_tokens": panel.output_tokens,
        "streaming_tokens": panel.live_output_tokens,
    }
    assert tasks["a"] == {"input_tokens": 0, "input_tokens_so_far": 1_027, "output_tokens": 0, "streaming_tokens": 8}
    assert tasks["b"] == {"input_tokens": 0, "input_tokens_so_far": 0, "output_tokens": 0, "streaming_tokens": 0}
    assert (run_input, totals_input) == (0, 1_027)

    attempt_ends.complete(claim, "Hello", Usage(input_tokens=1_027, output_tokens=40), advance=False)
    tasks, run_input, totals_input = tokens()
    assert tasks["a"] == {
        "input_tokens": 1_027,
        "input_tokens_so_far": 1_027,
        "output_tokens": 40,
        "streaming_tokens": 0,
    }
    assert (run_input, totals_input) == (1_027, 1_027)


def test_a_task_that_ended_otherwise_has_no_progress_in_its_record_as_on_its_panel(api, two_runs):
    """The API said `progress: 15` for a cancelled task whose panel and run_status say "—": how far
    its last attempt got is not how much of it is done. Its record gives the panel's progress: the
    streamed percentage while it runs, null once it was cancelled (or failed, or skipped), 100 once
    it succeeded whatever it last streamed."""
    from orchestrator.readmodels.tasks import task_views

    first, _ = two_runs
    streaming_first_attempt(first)  # task a has streamed 5%

    def progress():
        tasks = api["viewer"].get(f"/runs/{first.pk}").json()["tasks"]
        panels = {view.key: view.progress_text for view in task_views(first)}
        return {task["key"]: (task["progress"], panels[task["key"]]) for task in tasks}

    assert progress() == {"a": (5, "5%"), "b": (0, "0%")}
    assert api["launcher"].post(f"/runs/{first.pk}/cancel").status_code == 200
    assert set(first.tasks.values_list("state", flat=True)) == {TaskRun.State.CANCELLED}
    assert progress() == {"a": (None, "—"), "b": (None, "—")}

    first.tasks.filter(subtask__key="a").update(state=TaskRun.State.SUCCEEDED, progress=60)
    assert progress()["a"] == (100, "100%")
    schema = api["viewer"].get("/openapi.json").json()["components"]["schemas"]["TaskRunRecord"]
    assert "null for a task that failed, was cancelled or skipped" in schema["properties"]["progress"]["description"]


def test_a_tasks_record_counts_its_attempts_lost_with_their_worker(api, two_runs):
    """`lost_count` was in no record: the API said `attempt_count: 2` of a task whose first worker
    died, and not that this attempt spent none of its retries."""
    first, _ = two_runs
    a = first.tasks.get(subtask__key="a")
    Attempt.objects.filter(task_run=a).update(state=Attempt.State.LOST)
    Attempt.objects.create(task_run=a, number=2)
    TaskRun.objects.filter(pk=a.pk).update(attempt_count=2, lost_count=1)
    tasks = {t["key"]: t for t in api["viewer"].get(f"/runs/{first.pk}").json()["tasks"]}
    assert (tasks["a"]["attempt_count"], tasks["a"]["lost_count"]) == (2, 1)
    assert [attempt["state"] for attempt in tasks["a"]["attempts"]] == ["lost", "queued"]
    assert tasks["b"]["lost_count"] == 0
    schema = api["viewer"].get("/openapi.json").json()["components"]["schemas"]["TaskRunRecord"]
    said = schema["properties"]["lost_count"]["description"]
    assert "spends none of the task's retries" in said and "GLASSBOX_MAX_LOST_ATTEMPTS" in said
    assert "lost_count" in schema["required"]


def test_the_schema_says_which_task_and_run_tokens_are_settled_and_which_run_now(api):
    schemas = api["viewer"].get("/openapi.json").json()["components"]["schemas"]
    task = schemas["TaskRunRecord"]["properties"]
    assert "ended attempts" in task["input_tokens"]["description"]
    assert "input_tokens_so_far" in task["input_tokens"]["description"]
    assert "ended attempts" in task["output_tokens"]["description"]
    assert "running now" in task["input_tokens_so_far"]["description"]
    assert "streamed so far" in task["streaming_tokens"]["description"]
    run = schemas["RunRecord"]["properties"]
    assert "ended attempts" in run["input_tokens"]["description"]
    assert "totals.input_tokens_so_far" in run["input_tokens"]["description"]
    assert "totals.streaming_tokens" in run["output_tokens"]["description"]


def test_the_schema_says_which_tokens_are_settled_and_which_run_now(api):
    properties = api["viewer"].get("/openapi.json").json()["components"]["schemas"]["RunTotals"]["properties"]
    assert "ended attempts" in properties["input_tokens"]["description"]
    assert "input_tokens_so_far" in properties["input_tokens"]["description"]
    assert "running now" in properties["input_tokens_so_far"]["description"]
    assert "streamed so far" in properties["streaming_tokens"]["description"]


def test_the_schema_says_what_attempts_stopping_means(api):
    totals = api["viewer"].get("/openapi.json").json()["components"]["schemas"]["RunTotals"]
    assert "attempts_stopping" in totals["required"]
    description = totals["properties"]["attempts_stopping"]["description"]
    assert "next heartbeat" in description and "this is 0" in description


def test_money_is_text(api, two_runs):
    first, _ = two_runs
    body = api["viewer"].get(f"/runs/{first.pk}").json()
    assert isinstance(body["run"]["budget_usd"], str) and Decimal(body["run"]["budget_usd"]) == first.budget_usd


def test_approve_and_skip_need_no_body(api, personas, make_plan):
    run = runs.launch(
        make_plan({"a": ("researcher", [])}), launched_by=personas["launcher"], require_plan_approval=True
    )
    approver, launcher = api["approver"], api["launcher"]
    approved = approver.client.post(
        f"/api/checkpoints/{run.checkpoints.get().pk}/approve", "", content_type="application/json", **approver.headers
    )
    assert approved.status_code == 200 and approved.json()["comment"] == ""
    task = run.tasks.get()
    skipped = launcher.client.post(
        f"/api/tasks/{task.pk}/skip", "", content_type="application/json", **launcher.headers
    )
    assert skipped.status_code == 200 and skipped.json()["error"] == "skipped by launcher"


def test_unknown_api_paths_answer_json_404(api):
    response = api["viewer"].get("/no-such-thing")
    assert response.status_code == 404
    assert error(response)["message"] == "No API endpoint at /api/no-such-thing; the endpoints are listed at /api/docs."


# --- Agents: added and changed with their settings checked ------------------------------------------


def test_an_agent_admin_adds_and_changes_an_agent_through_the_api(api, personas):
    response = api["agent_admin"].post(
        "/agents",
        {"name": "critic", "provider": "simulated", "provider_options": {"latency": {"dist": "fixed", "seconds": 1}}},
    )
    assert response.status_code == 201, response.content
    assert response.json()["provider_options"] == {"latency": {"dist": "fixed", "seconds": 1}}
    assert Event.objects.get(type="agent.created").actor_user == personas["agent_admin"]
    response = api["agent_admin"].patch("/agents/critic", {"max_concurrency": 3, "status": "draft"})
    assert response.status_code == 200 and response.json()["max_concurrency"] == 3
    assert Agent.objects.get(name="critic").status == "draft"
    assert api["agent_admin"].post("/agents", {"name": "critic"}).status_code == 409


def test_invalid_agent_settings_are_refused_naming_every_problem_and_nothing_is_saved(api):
    before = Agent.objects.get(name="researcher").provider_options
    response = api["agent_admin"].patch(
        "/agents/researcher", {"provider_options": {"latency": "fast", "failure_rate": 7}}
    )
    assert response.status_code == 422
    problem = error(response)
    assert problem["code"] == "invalid_agent"
    messages = {(d["field"], d["message"]) for d in problem["details"]}
    assert ("provider_options", "latency must be an object, got 'fast'") in messages
    assert ("provider_options", "failure_rate must be between 0 and 1, got 7.0") in messages
    # A number out of its range is refused by the schema itself, naming the field.
    response = api["agent_admin"].patch("/agents/researcher", {"max_concurrency": 0})
    assert response.status_code == 422 and "max_concurrency" in error(response)["message"]
    assert Agent.objects.get(name="researcher").provider_options == before
    assert not Event.objects.filter(type="agent.changed").exists()
    response = api["agent_admin"].post("/agents", {"name": "typo", "provider_options": {"failur_rate": 0.1}})
    assert response.status_code == 422
    assert error(response)["message"] == (
        "Agent 'typo' not saved: provider_options: unknown option 'failur_rate': "
        "the simulated provider takes latency, failure_rate, overloaded_rate, hang, server_limit."
    )
    assert not Agent.objects.filter(name="typo").exists()


def test_agent_refusals_are_sentences_as_every_api_error(api):
    """They started lowercase ("no agent named 'ghost'") beside "No plan with id 4242."."""
    response = api["agent_admin"].patch("/agents/ghost", {"max_concurrency": 3})
    assert response.status_code == 404 and error(response)["message"] == "No agent named 'ghost'."
    response = api["agent_admin"].post("/agents", {"name": "researcher"})
    assert response.status_code == 409
    assert error(response)["message"] == (
        "An agent named 'researcher' exists: change it with PATCH /api/agents/researcher."
    )


def test_an_agent_text_with_a_nul_character_is_refused_as_its_schema_says(api):
    """PostgreSQL stores no NUL in text or JSON: the API refuses one with a 422 naming the field,
    and its schema says so (the fuzz test sends what the schema allows)."""
    for body in ({"system_prompt": "be\x00brief"}, {"capabilities": ["search", "web\x00"]}):
        response = api["agent_admin"].post("/agents", {"name": "nul", **body})
        assert response.status_code == 422
        assert f"{next(iter(body))}" in error(response)["message"]
        assert "must not contain NUL characters" in error(response)["message"]
    assert not Agent.objects.filter(name="nul").exists()
    schema = api["agent_admin"].get("/openapi.json").json()["components"]["schemas"]["AgentCreateIn"]["properties"]
    for field in ("role", "model", "system_prompt"):
        assert schema[field]["pattern"] == "^[^\\u0000]*$"
    assert schema["capabilities"]["anyOf"][0]["items"]["pattern"] == "^[^\\u0000]*$"


@pytest.mark.parametrize("raw", ['"garbage"', "[null, null]", "3"])
def test_a_body_that_is_not_an_object_is_refused_and_approves_nothing(api, personas, make_plan, raw):
    run = runs.launch(
        make_plan({"a": ("researcher", [])}), launched_by=personas["launcher"], require_plan_approval=True
    )
    checkpoint = run.checkpoints.get()
    response = api["approver"].post(f"/checkpoints/{checkpoint.pk}/approve", raw=raw)
    assert response.status_code == 422
    assert error(response)["message"] == "The request is not valid: body: must be a JSON object, or no body at all"
    checkpoint.refresh_from_db()
    assert checkpoint.status == "pending"


def test_no_body_or_null_still_approves(api, personas, make_plan):
    plan = make_plan({"a": ("researcher", [])})
    for raw in ("", "null"):
        run = runs.launch(plan, launched_by=personas["launcher"], require_plan_approval=True)
        response = api["approver"].post(f"/checkpoints/{run.checkpoints.get().pk}/approve", raw=raw)
        assert response.status_code == 200 and response.json()["status"] == "approved"


def test_launched_by_follows_the_schemas_pattern(api, two_runs):
    response = api["viewer"].get("/runs", launched_by="\u00f0")
    assert response.status_code == 422 and error(response)["code"] == "invalid_request"
    assert api["viewer"].get("/runs", launched_by="launcher").json()["count"] == 1


def test_the_schema_states_one_plan_source_and_no_nul():
    from dashboard.api import api as ninja_api

    schemas = ninja_api.get_openapi_schema()["components"]["schemas"]
    create = schemas["RunCreateIn"]
    assert [option["required"] for option in create["oneOf"]] == [["plan_id"], ["document"]]
    for name, field in [("RunCreateIn", "document"), ("RunCreateIn", "filename"), ("ApproveIn", "comment")]:
        assert schemas[name]["properties"][field]["pattern"] == "^[^\\u0000]*$"


def test_an_approval_of_an_edited_plan_version_is_409(api, personas, make_plan):
    from orchestrator.engine import plan_edits

    run = runs.launch(
        make_plan({"a": ("researcher", [])}), launched_by=personas["launcher"], require_plan_approval=True
    )
    listed = api["approver"].get("/checkpoints", run=run.pk).json()["items"][0]
    reviewed = listed["plan_version"]
    plan_edits.edit_instructions(run.checkpoints.get(), "a", "Changed after review.")
    response = api["approver"].post(f"/checkpoints/{listed['id']}/approve", {"plan_version": reviewed})
    assert response.status_code == 409 and error(response)["code"] == "action_refused"
    assert f"you reviewed version {reviewed}" in error(response)["message"]
    current = api["approver"].get("/checkpoints", run=run.pk).json()["items"][0]["plan_version"]
    approved = api["approver"].post(f"/checkpoints/{listed['id']}/approve", {"plan_version": current})
    assert approved.status_code == 200 and approved.json()["plan_version"] == current


def test_plan_approval_is_the_default_once_two_people_may_approve(api, personas):
    assert api["launcher"].post("/runs", {"document": DOCUMENT}).json()["run"]["status"] == "running"
    User.objects.create_superuser("second-approver")
    assert api["launcher"].post("/runs", {"document": DOCUMENT}).json()["run"]["status"] == "awaiting_approval"
    off = api["launcher"].post("/runs", {"document": DOCUMENT, "require_plan_approval": False})
    assert off.json()["run"]["status"] == "running"
