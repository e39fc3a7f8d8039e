"""A checkpoint closed without a decision reads as such wherever it is shown: the task panel, the
admin's Checkpoints list, the JSON export and the approvals inbox never call it "rejected"."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from orchestrator.engine import dispatch, runs
from orchestrator.models import Checkpoint, Run
from orchestrator.readmodels import run_export

pytestmark = pytest.mark.django_db

CLOSED = "closed without a decision: the run was cancelled"


@pytest.fixture
def cancelled_call(make_plan, demo_agents, personas, monkeypatch) -> tuple[Run, Checkpoint]:
    """A run cancelled while its task's call of workspace:write_file awaited approval."""
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    run = runs.launch(make_plan({"a": ("researcher", [])}), launched_by=personas["launcher"])
    task = run.tasks.get()
    details = {"agent": "researcher", "server": "workspace", "tool": "write_file", "arguments": {"path": "x"}}
    checkpoint = Checkpoint.objects.create(
        run=run, task_run=task, kind=Checkpoint.Kind.TOOL, call_id="toolu_1", details=details
    )
    runs.cancel(run, user=personas["launcher"])
    checkpoint.refresh_from_db()
    return run, checkpoint


def test_the_task_panel_says_the_call_was_closed_not_rejected(client, personas, cancelled_call):
    run, checkpoint = cancelled_call
    client.force_login(personas["viewer"])
    url = reverse("run_task", args=[run.pk, checkpoint.task_run_id])
    html = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert f"Tool call checkpoint: <strong>{CLOSED}</strong>" in html
    assert "rejected" not in html


def test_the_admin_list_says_closed_without_a_decision(client, cancelled_call):
    client.force_login(User.objects.create_superuser("root"))
    html = client.get("/admin/orchestrator/checkpoint/").content.decode()
    assert "Closed without a decision: the run was cancelled" in html
    assert "Rejected" not in html.split("<tbody>")[1].split("</tbody>")[0]


def test_the_json_export_gives_the_status_and_the_outcome(cancelled_call):
    run, checkpoint = cancelled_call
    [record] = run_export.run_export(run)["checkpoints"]
    assert (record["status"], record["comment"], record["decided_by"]) == ("closed", "the run was cancelled", None)
    assert record["outcome"] == CLOSED


def test_the_approvals_inbox_says_it_was_closed_when_someone_tries_to_decide_it(client, personas, cancelled_call):
    _, checkpoint = cancelled_call
    client.force_login(personas["approver"])
    response = client.post(f"/approvals/{checkpoint.pk}/approve/", HTTP_HX_REQUEST="true")
    assert f"Already {CLOSED}." in response.text
    assert "Approve</button>" not in response.text
