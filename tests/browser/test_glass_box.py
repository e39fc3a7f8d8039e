"""The agent's path in a real browser: a task's steps appear live in its panel (no reload), its
DAG node says what the agent is doing, the whole result opens on the attempt's page, and the
run's artifacts appear when the task ends and download. Screenshots (desktop and phone) in
test-artifacts/<test>/."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from orchestrator import events
from orchestrator.engine import runs
from orchestrator.engine.agent_steps import Decision, Step
from orchestrator.models import Attempt, TaskRun
from orchestrator.tools import workspace
from tests.browser.test_narrow import PHONE, overflow
from tests.browser.test_run_page import assert_not_reloaded, open_run, poll
from tests.orchestrator.engine.test_agent_loop import FakeTools, ScriptedProvider, answer, tool_turn
from tests.scripted_agent_path import loop_steps, record_step

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def artifacts_root(tmp_path_factory):
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="module")
def daphne_env(artifacts_root) -> dict[str, str]:
    return {"GLASSBOX_ARTIFACTS_DIR": str(artifacts_root)}


@pytest.fixture
def shared_artifacts(artifacts_root, settings, monkeypatch):
    """One artifacts root for this process and the module's daphne."""
    monkeypatch.setenv("GLASSBOX_ARTIFACTS_DIR", str(artifacts_root))
    settings.GLASSBOX_ARTIFACTS_DIR = artifacts_root
    return artifacts_root


async def search(query: str = "", limit: int = 5) -> str:
    return "\n".join(f"{i + 1}. {query} — result line {i + 1} with some detail" for i in range(120))


async def calculate(expression: str = "") -> str:
    raise ValueError(f"cannot evaluate {expression!r}: division by zero")


def element_shot(locator, path) -> None:
    """A PNG of one part of the page (to look at the panel closely)."""
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(path), caret="initial")


def node_label(page, task_id: int) -> str:
    return page.evaluate("id => window.glassboxRun.cy.getElementById('t' + id).data('label')", task_id)


def test_a_tasks_path_appears_live_and_its_artifact_downloads(
    shared_artifacts, logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    page = logged_in_page
    plan = make_plan(
        {"research": ("researcher", [], {"title": "Research SQLite WAL mode"}), "write": ("writer", ["research"])},
        goal="Should we turn on WAL mode?",
    )
    run = runs.launch(plan, budget_usd="1")  # no cluster: the steps are recorded here, as the runtime will
    task = run.tasks.get(subtask__key="research")
    attempt = Attempt.objects.get(task_run=task, number=1)
    now = timezone.now()
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.RUNNING, worker="host:1", started_at=now)
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.RUNNING, started_at=now, attempt_count=1)
    events.record("task.started", task=task, payload={"attempt": 1})
    steps = loop_steps(
        ScriptedProvider(
            tool_turn(
                ("search", {"query": "sqlite wal concurrency", "limit": 5}),
                ("calculate", {"expression": "1/0"}),
                ("delete_everything", {}),
                text="I will look up how WAL mode behaves under concurrent writers.",
            ),
            answer("WAL mode lets readers and one writer work at once; turn it on."),
        ),
        FakeTools(search=(search, True), calculate=(calculate, False)),
        decisions=[Decision(True, "read-only search, fine", "alice")],
    )
    open_run(page, run)
    page.goto(f"/runs/{run.pk}/?task={task.pk}")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    page.evaluate("window.__notReloaded = true")
    path = page.locator(f"#task-path-{task.pk}")
    expect(path).to_contain_text("No step recorded yet.")

    # Step by step, as the runtime records them; each shows up without a reload.
    text, model, call = steps[0], steps[1], steps[2]
    for step in (text, model, call):
        record_step(task, step)
    expect(path.locator(".path-said")).to_have_text("I will look up how WAL mode behaves under concurrent writers.")
    search_row = path.locator(".path-call", has_text="search").first
    expect(search_row).to_contain_text("waiting for approval")
    expect(search_row.locator(".path-args pre")).to_contain_text('"query": "sqlite wal concurrency"')
    expect(page.locator(f"#task-{task.pk}")).to_have_attribute(
        "data-activity", "step 1 · waiting for approval of search"
    )
    poll(
        page,
        "id => window.glassboxRun.cy.getElementById('t' + id).data('label').includes('waiting for approval')",
        task.pk,
        what="the node's activity",
    )
    screenshot(page, "waiting-for-approval")
    # The reader closes the call's (short, so open) arguments: its row, sent again with the
    # approval and the result, keeps them closed.
    search_row.locator(".path-args summary").click()
    assert search_row.locator(".path-args").evaluate("details => details.open") is False

    for step in steps[3:]:
        if step.step == 2 and not path.locator(".path-wait").count():
            # The answer's call is held by the provider's request budget, then sent.
            record_step(task, Step(kind="rate_wait", step=2, wait="rate_limit_requests"))
            expect(page.locator(f"#task-{task.pk}")).to_have_attribute(
                "data-activity", "step 2 · waiting for the provider's request budget"
            )
            wait_row = path.locator(".path-wait.is-open")
            expect(wait_row).to_contain_text("waiting for the provider's request budget")
            wait_row.scroll_into_view_if_needed()  # in the panel's own scroll, below the long result
            element_shot(page.locator(".panel-card"), screenshot(page, "rate-wait").with_name("panel-rate-wait.png"))
            record_step(task, Step(kind="rate_waited", step=2, wait="rate_limit_requests", duration_s=12.2))
            expect(path.locator(".path-wait")).to_contain_text("Waited 12 s for the provider's request budget")
            element_shot(
                page.locator(".panel-card"), screenshot(page, "rate-waited").with_name("panel-rate-waited.png")
            )
        record_step(task, step)
        if step.kind == "tool_result" and step.tool == "search":
            expect(search_row).to_contain_text("Approved by alice")
            expect(search_row.locator(".path-result")).to_contain_text("1. sqlite wal concurrency")
            assert search_row.locator(".path-args").evaluate("details => details.open") is False
    failed_args = path.locator(".path-call.is-error", has_text="calculate").locator(".path-args")
    assert failed_args.evaluate("details => details.open") is True  # the reader left this one alone
    expect(path.locator(".path-said").last).to_have_text(
        "WAL mode lets readers and one writer work at once; turn it on."
    )
    failed = path.locator(".path-call.is-error", has_text="calculate")
    expect(failed.locator(".path-result.is-error")).to_contain_text("division by zero")
    expect(path.locator(".path-refused")).to_contain_text("delete_everything")
    expect(path.locator(".path-model").last).to_contain_text("ended its turn")
    assert path.locator(".path-row").count() == 1 + len(  # the wait's row
        {s.call_id or id(s) for s in steps if s.kind not in ("approval", "tool_result")}
    )
    assert "finishing" in node_label(page, task.pk)
    assert_not_reloaded(page)
    screenshot(page, "path-desktop")
    element_shot(page.locator(".panel-card"), screenshot(page, "path-desktop").with_name("panel-desktop.png"))

    # The task ends with a file in the workspace: the node drops its activity, the file is listed.
    report = workspace.run_directory(run.pk) / "report.md"
    report.write_text("# WAL\n\nTurn it on.\n")
    finished = timezone.now()
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.SUCCEEDED, finished_at=finished)
    TaskRun.objects.filter(pk=task.pk).update(
        state=TaskRun.State.SUCCEEDED, progress=100, finished_at=finished, output="Turn it on."
    )
    events.record("task.succeeded", task=task, payload={"attempt": 1})
    link = page.locator("#run-artifacts a", has_text="report.md")
    expect(link).to_be_visible()
    expect(page.locator(f"#task-{task.pk}")).not_to_have_attribute("data-activity", "step 2 · finishing")
    poll(
        page,
        "id => !window.glassboxRun.cy.getElementById('t' + id).data('label').includes('step')",
        task.pk,
        what="the node's activity to clear",
    )
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "report.md"
    assert open(download.value.path(), encoding="utf-8").read() == "# WAL\n\nTurn it on.\n"
    assert_not_reloaded(page)

    # The whole result, on the attempt's page.
    whole = search_row.get_by_role("link", name="Whole result")
    expect(whole).to_be_visible()
    whole.click()
    page.wait_for_url(f"**/runs/{run.pk}/tasks/{task.pk}/attempts/1/**")
    expect(page.locator(".path-result.is-whole").first).to_contain_text("120. sqlite wal concurrency")
    screenshot(page, "attempt-page")

    # A phone: the panel and the attempt's page fit the width.
    page.set_viewport_size(PHONE)
    assert overflow(page) == []
    screenshot(page, "attempt-page-phone")
    page.goto(f"/runs/{run.pk}/?task={task.pk}")
    expect(page.locator(f"#task-path-{task.pk}")).to_contain_text("WAL mode lets readers")
    assert overflow(page) == []
    element_shot(page.locator(f"#task-path-{task.pk}"), screenshot(page, "path-phone").with_name("panel-phone.png"))


def test_an_ended_attempts_page_reads_in_lines_not_a_word_a_line(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """The attempt page's "No step recorded for this attempt." stood in the path's 1.6rem column
    of step numbers, one word a line; a cancelled agent without tools shows its text there."""
    page = logged_in_page
    run = runs.launch(make_plan({"look": ("researcher", []), "write": ("writer", ["look"])}), budget_usd="1")
    look, write = run.tasks.get(subtask__key="look"), run.tasks.get(subtask__key="write")
    Attempt.objects.filter(task_run=look).update(
        state=Attempt.State.CANCELLED, input_tokens=361, output_tokens=69, cost_usd="0.0021"
    )
    TaskRun.objects.filter(pk=look.pk).update(
        state=TaskRun.State.CANCELLED, output="SQLite's WAL mode lets readers go on while one writer writes."
    )
    Attempt.objects.create(task_run=write, number=1, state=Attempt.State.FAILED, error="simulated failure")
    TaskRun.objects.filter(pk=write.pk).update(state=TaskRun.State.FAILED, attempt_count=1)
    page.goto(f"/runs/{run.pk}/?task={look.pk}")
    expect(page.locator(f"#task-output-{look.pk}")).to_contain_text("Partial output of attempt 1 (cancelled)")
    screenshot(page, "run-page-panel")
    page.goto(f"/runs/{run.pk}/tasks/{look.pk}/attempts/1/")
    expect(page.locator(".attempt-output")).to_contain_text("Partial output of attempt 1 (cancelled)")
    expect(page.locator(".attempt-output")).to_contain_text("WAL mode lets readers")
    screenshot(page, "cancelled-attempt")
    page.goto(f"/runs/{run.pk}/tasks/{write.pk}/attempts/1/")
    none = page.locator(".path-none")
    expect(none).to_have_text("No step recorded for this attempt.")
    # No Output card said nothing of its text: a reader could not tell none from a broken page.
    expect(page.locator(".attempt-no-output")).to_have_text(
        "This attempt wrote no output: it ended (failed) before its model wrote anything."
    )
    screenshot(page, "failed-attempt")
    assert none.bounding_box()["height"] < 2 * float(none.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
