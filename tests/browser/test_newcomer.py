"""The newcomer's path in Chromium: approve a plan with the demo approver (the launcher is told
why they cannot and who can), write a plan checked as you type, re-run part of a finished run
and read the request behind an attempt, and a cancel that leaves nothing stale on the page."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from playwright.sync_api import expect

from orchestrator.engine import runs
from orchestrator.models import Agent, Run
from tests.browser.conftest import BROWSER_PASSWORD, log_in
from tests.browser.test_run_page import VIEWPORT
from tests.conftest import ROOT, fast_latency
from tests.conftest import run_here as run_in_this_process

pytestmark = [pytest.mark.browser]


def open_run(page, run: Run) -> None:
    page.set_viewport_size(VIEWPORT)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def test_the_launcher_sees_who_may_approve_and_the_demo_approver_approves(
    page, browser_user, demo_agents, priced_limit, make_plan, screenshot, no_broker
):
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert "User approver: created with the Approver role, password 'approver'" in out.getvalue()
    browser_user.groups.add(Group.objects.get(name="Approver"))  # the launcher may approve others' plans
    plan = make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}, goal="Plan for two people")
    run = runs.launch(plan, launched_by=browser_user, require_plan_approval=True)
    checkpoint = run.checkpoints.get()

    # The launcher (who also holds the Approver role): no Approve button anywhere, and why.
    log_in(page, browser_user.username, BROWSER_PASSWORD)
    open_run(page, run)
    card = page.locator(f"#checkpoint-{checkpoint.pk}")
    expect(card.locator("[data-sod-note]")).to_contain_text("browser launched this run")
    expect(card.locator("[data-sod-note]")).to_contain_text("who may approve: approver")
    expect(card.get_by_role("button", name="Approve")).to_be_hidden()
    expect(card.get_by_role("button", name="Reject")).to_be_visible()
    screenshot(page, "launcher-run-page")
    page.goto("/approvals/")
    item = page.locator(f"#checkpoint-{checkpoint.pk}")
    expect(item).to_contain_text("who may approve: approver")
    expect(item.get_by_role("button", name="Approve")).to_have_count(0)
    screenshot(page, "launcher-inbox")
    page.get_by_role("button", name="Log out").click()

    # The demo approver approves it from the inbox; the run starts.
    log_in(page, "approver", "approver")
    page.goto("/approvals/")
    item = page.locator(f"#checkpoint-{checkpoint.pk}")
    item.get_by_role("button", name="Approve").click()
    expect(page.locator(f"#checkpoint-{checkpoint.pk}")).to_contain_text("Approved")
    screenshot(page, "approver-approved")
    run.refresh_from_db()
    checkpoint.refresh_from_db()
    assert run.status == Run.Status.RUNNING and checkpoint.decided_by.username == "approver"


def test_a_plan_written_on_the_page_is_checked_as_you_type(logged_in_page, demo_agents, priced_limit, screenshot):
    page = logged_in_page
    page.goto("/runs/new/")
    page.get_by_label("Write or paste a plan (YAML or JSON), checked as you type").check()
    editor = page.get_by_label("Plan", exact=True)
    expect(editor).to_be_visible()
    expect(page.get_by_label("Plan file", exact=True)).to_be_hidden()
    editor.fill("goal: Ship it\nsubtasks:\n  - key: a\n    agent: nobody\n    title: A\n")
    check = page.locator("#plan-check")
    expect(check).to_contain_text("1 problem")
    expect(check).to_contain_text('no agent named "nobody"')
    expect(check).to_contain_text("line 4")
    screenshot(page, "editor-problem")
    editor.fill((ROOT / "examples" / "research_brief.yaml").read_text())
    expect(check).to_contain_text("Valid: 6 subtasks, 8 dependencies")
    screenshot(page, "editor-valid")
    page.get_by_role("button", name="Check the plan").click()
    expect(page.get_by_role("heading", name="Check before launch")).to_be_visible()
    expect(page.locator("#preflight-cost")).to_contain_text("worst case")
    expect(page.get_by_text("The plan written on the New-run page, not saved yet.")).to_be_visible()
    page.get_by_role("button", name="Launch run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get()
    assert run.plan.source_name == "written on the New-run page"


def test_rerun_from_a_task_and_read_the_request_behind_its_attempt(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot, no_broker
):
    page = logged_in_page
    Agent.objects.update(provider_options=fast_latency(0.05))
    plan = make_plan(
        {"scope": ("researcher", []), "draft": ("writer", ["scope"]), "polish": ("writer", ["draft"])},
        goal="Write a short brief about queues",
    )
    run = runs.launch(plan, cap=2, budget_usd="1")
    open_run(page, run)
    run_in_this_process(run)
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "succeeded")
    expect(page.locator("#cost-estimate")).to_contain_text(re.compile(r"estimated \$[\d.]+: it cost \d+% of that"))
    draft = run.tasks.get(subtask__key="draft")
    page.locator(f"#task-{draft.pk} .task-link").click()
    panel = page.locator("#task-panel")
    expect(panel).to_have_attribute("data-task", str(draft.pk))
    request = panel.locator(".attempt-request").first
    request.locator("summary").click()
    expect(request).to_contain_text("Request sent: simulated:sim-1 · max 1,024 tokens")
    expect(request).to_contain_text("Goal of the whole team: Write a short brief about queues")
    scope_summary = run.tasks.get(subtask__key="scope").summary
    expect(request).to_contain_text(f"- Scope (scope): {scope_summary.split()[0]}")
    screenshot(page, "request")

    page.once("dialog", lambda dialog: dialog.accept())
    panel.get_by_role("button", name="Re-run from here").click()
    expect(page.locator("#run-flash")).to_contain_text("draft and 1 task below it will run again")
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "running")
    expect(page.locator(f"#task-{draft.pk}")).to_have_attribute("data-state", "queued")
    scope = run.tasks.get(subtask__key="scope")
    expect(page.locator(f"#task-{scope.pk}")).to_have_attribute("data-state", "succeeded")  # kept
    screenshot(page, "rerun")
    run_in_this_process(run)
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "succeeded")
    page.locator(f"#task-{draft.pk} .task-link").click()
    expect(panel.locator(".attempt-output")).to_have_count(1)  # the first answer, kept on its attempt
    assert run.tasks.get(subtask__key="draft").attempt_count == 2


def test_cancel_leaves_nothing_stale_on_the_live_page(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot, no_broker
):
    page = logged_in_page
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(5)}, goal="Five probes")
    run = runs.launch(plan, cap=2, budget_usd="1")
    open_run(page, run)
    totals = page.locator("#run-totals")
    expect(totals).to_contain_text("reserved in flight")
    held = run.tasks.filter(state="ready").first()
    expect(page.locator(f"#task-{held.pk}")).to_contain_text("run cap reached (2 queued or running)")
    page.get_by_role("button", name="Pause").click()
    expect(page.locator(f"#task-{held.pk}")).to_contain_text("run paused: starts when the run is resumed")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "cancelled")
    expect(totals).not_to_contain_text("reserved in flight")
    expect(page.locator(f"#task-{held.pk}")).not_to_contain_text("run paused")
    expect(page.locator(f"#task-{held.pk}")).to_have_attribute("data-state", "cancelled")
    screenshot(page, "cancelled")
    page.goto("/runs/")
    row = page.locator(f"#run-row-{run.pk}")
    expect(row).to_contain_text("0 of 5 tasks succeeded")
    expect(row).to_contain_text("5 cancelled")
    assert page.evaluate(
        f"[...document.querySelectorAll('#run-row-{run.pk} rect')].map(r => r.getAttribute('class'))"
    ) == ["state-cancelled"]
    screenshot(page, "runs-list")
