"""The dashboard's pages in a real browser against daphne: log in, launch the feature pipeline
from the New-run page (upload, preflight, Launch), decide its review checkpoint from the inbox.

Screenshots of every page land in test-artifacts/<test>/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from orchestrator.models import Checkpoint, Event, Run
from tests.browser.conftest import BROWSER_PASSWORD
from tests.conftest import ROOT, grant_with_approval, wait_for_run, wait_until

pytestmark = [pytest.mark.browser]

FEATURE_PIPELINE = ROOT / "examples" / "feature_pipeline.yaml"


def test_login_page_refuses_a_wrong_password_then_logs_in(page, browser_user, screenshot):
    page.goto("/approvals/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/approvals/"))
    screenshot(page, "login")
    page.get_by_label("Username").fill(browser_user.username)
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("Please enter a correct username and password")
    screenshot(page, "login-refused")

    page.get_by_label("Password").fill(BROWSER_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/approvals/$"))
    expect(page.get_by_role("heading", name="Approvals")).to_be_visible()

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/$"))
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))


def test_runs_page_lists_runs_and_refreshes_itself(logged_in_page, screenshot, demo_agents, priced_limit, make_plan):
    from orchestrator.engine import runs

    page = logged_in_page
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    expect(page.locator("#runs-table")).to_contain_text("No runs yet")
    screenshot(page, "runs-empty")

    plan = make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}, goal="Summarise the week")
    # No cluster: it stays running at 0/2. Launched as `manage.py launch` launches (as cli:root).
    run = runs.launch(plan, cap=2, budget_usd="0.50", actor_name="cli:root")
    # The 2-second poll brings the new run in without a reload.
    row = page.locator(f"#run-row-{run.pk}")
    expect(row).to_contain_text("Summarise the week", timeout=10_000)
    expect(row).to_contain_text("0 of 2 tasks succeeded")
    expect(row).to_contain_text("Running")
    expect(row).to_contain_text("root from the command line")
    expect(page.get_by_role("link", name="New run").first).to_be_visible()
    screenshot(page, "runs-one")

    # The run page's header names the same launcher (it said "launched by the command line").
    row.get_by_role("link").first.click()
    expect(page.locator("#run-header [data-launched-by]")).to_have_text("launched by root from the command line")
    screenshot(page, "run-header")


def test_the_preflight_names_the_tool_calls_that_wait_for_approval(
    logged_in_page, screenshot, demo_agents, priced_limit
):
    grant_with_approval("researcher", "workspace", "write_file")
    grant_with_approval("writer", "workspace", "read_file")
    page = logged_in_page
    page.goto("/runs/new/")
    page.get_by_label("Plan file", exact=True).set_input_files(str(ROOT / "examples" / "workspace_report.yaml"))
    page.get_by_role("button", name="Check the plan").click()
    decisions = page.locator("#preflight-decisions")
    expect(decisions.locator(".stat-value")).to_have_text("0 + tool calls")
    expect(decisions).to_contain_text(
        "approve calls of workspace:write_file (researcher), workspace:read_file (writer)"
    )
    expect(decisions).not_to_contain_text("needs no human decision")
    box = decisions.bounding_box()
    grid = page.locator(".preflight-grid").bounding_box()
    assert box is not None and grid is not None and box["x"] + box["width"] <= grid["x"] + grid["width"] + 1
    screenshot(page, "preflight-tool-approvals")


@pytest.mark.processes
def test_launch_the_feature_pipeline_then_approve_its_review_from_the_inbox(
    logged_in_page, screenshot, cluster, demo_agents, priced_limit, browser_user
):
    page = logged_in_page
    page.get_by_role("link", name="New run").first.click()
    expect(page.get_by_role("heading", name="New run")).to_be_visible()
    screenshot(page, "new-run")

    page.get_by_label("Plan file", exact=True).set_input_files(str(FEATURE_PIPELINE))
    page.get_by_label("Concurrency cap").fill("2")
    page.get_by_role("button", name="Check the plan").click()

    expect(page.get_by_role("heading", name="Check before launch")).to_be_visible()
    expect(page.locator("#preflight-dag")).to_contain_text("5 subtasks, 5 dependencies")
    for key in ("spec", "design", "implement", "test_plan", "review"):
        expect(page.locator(f"#preflight-node-{key}")).to_be_visible()
    expect(page.locator("#preflight-cost")).to_contain_text("$0.1332")
    expect(page.locator("#preflight-duration")).to_contain_text("critical path")
    assert not Run.objects.exists(), "the preflight saved something"
    screenshot(page, "preflight")

    page.get_by_role("button", name="Launch run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get()
    assert page.url.endswith(f"/runs/{run.pk}/")
    assert (run.launched_by, run.cap, run.plan.source_name) == (browser_user, 2, FEATURE_PIPELINE.name)
    screenshot(page, "run-page")

    # The design stops at a review checkpoint: the inbox shows it, the header counts it.
    wait_until(
        lambda: Checkpoint.objects.filter(run=run, status="pending").exists(), 60, "the design's review checkpoint"
    )
    checkpoint = Checkpoint.objects.get(run=run, status="pending")
    page.get_by_role("link", name=re.compile("^Approvals")).click()  # the header, on the run page
    item = page.locator(f"#checkpoint-{checkpoint.pk}")
    expect(item).to_contain_text("Review the output of “Design the data model and request flow”")
    expect(page.locator("#approvals-count")).to_have_text("1")
    screenshot(page, "approvals")

    # Reject without a comment is refused in place; Approve goes through and the count drops.
    item.get_by_role("button", name="Reject").click()
    expect(item.get_by_role("alert")).to_have_text("A comment is required to reject: say what is wrong")
    item.get_by_label(re.compile("^Comment")).fill("Looks right; hashing choice is sound.")
    item.get_by_role("button", name="Approve").click()
    expect(item).to_contain_text("Approved")
    expect(page.locator("#approvals-count")).to_be_hidden()  # nothing waits: no badge
    screenshot(page, "approvals-decided")
    checkpoint.refresh_from_db()
    assert (checkpoint.status, checkpoint.decided_by, checkpoint.comment) == (
        "approved",
        browser_user,
        "Looks right; hashing choice is sound.",
    )
    assert Event.objects.filter(type="checkpoint.approved", actor_user=browser_user, run=run).exists()
    assert wait_for_run(run, 90, cluster).status == "succeeded"


def test_an_invalid_plan_file_lists_every_problem_and_saves_nothing(logged_in_page, screenshot, demo_agents, tmp_path):
    broken = Path(tmp_path) / "broken.yaml"
    broken.write_text(
        "goal: Broken\nsubtasks:\n"
        "  - {key: a, agent: researcher, title: A, depends_on: [b]}\n"
        "  - {key: b, agent: reseacher, title: B, depends_on: [a]}\n"
    )
    page = logged_in_page
    page.goto("/runs/new/")
    page.get_by_label("Plan file", exact=True).set_input_files(str(broken))
    page.get_by_role("button", name="Check the plan").click()
    errors = page.locator("#preflight-errors")
    expect(errors).to_contain_text("2 problems in broken.yaml")
    expect(errors).to_contain_text('no agent named "reseacher" (did you mean "researcher"?)')
    expect(errors).to_contain_text("cycle: a → b → a")
    screenshot(page, "new-run-errors")
    assert not Run.objects.exists()
