"""The header's "Approvals N" badge on the run page, in a real browser: a checkpoint that opens
or closes while the page is open is counted by the live view's frames, with no reload and
without waiting for the badge's own 5 s poll (which the test holds unanswered). And the inbox's
own rendering of what it asks: a refusal in words, a tool call's arguments in one box."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from orchestrator import events
from orchestrator.engine import runs
from orchestrator.models import Checkpoint, Run, TaskRun

pytestmark = [pytest.mark.browser]


def open_tool_checkpoint(run: Run, task: TaskRun, arguments: dict | None = None) -> Checkpoint:
    """What engine/tool_approvals.open_checkpoint writes: the checkpoint and its event, in one transaction."""
    with events.atomic():
        checkpoint = Checkpoint.objects.create(
            run=run,
            task_run=task,
            kind=Checkpoint.Kind.TOOL,
            call_id="call-1",
            details={
                "agent": "coder",
                "name": "echo",
                "server": "testsrv",
                "tool": "echo",
                "arguments": arguments or {},
            },
        )
        events.record(
            "checkpoint.created",
            run=run.pk,
            task=task,
            actor_name="agent:coder",
            message="coder wants to call testsrv:echo: approval needed",
            payload={"checkpoint": checkpoint.pk, "kind": Checkpoint.Kind.TOOL, "tool": "testsrv:echo"},
        )
    return checkpoint


@pytest.mark.parametrize("width", [1280, 390])
def test_a_tool_call_waiting_for_a_decision_is_counted_in_the_header_without_a_reload(
    logged_in_page, browser_user, make_agent, make_plan, screenshot, width
):
    page = logged_in_page
    make_agent("coder")
    run = runs.launch(make_plan({"a": ("coder", [])}), budget_usd="1")
    task = run.tasks.get()
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.RUNNING)
    page.set_viewport_size({"width": width, "height": 860})
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    badge = page.locator("#approvals-count")
    expect(badge).to_be_attached()
    expect(badge).to_be_hidden()  # nothing waits: no badge (it was a grey "0")
    expect(badge).to_have_text("")
    page.evaluate("window.__notReloaded = true")
    page.route("**/approvals/count/", lambda route: None)  # the poll goes unanswered from now on

    checkpoint = open_tool_checkpoint(run, task)
    expect(page.locator(f"#checkpoint-{checkpoint.pk}")).to_be_visible()
    expect(badge).to_have_text("1", timeout=3_000)
    expect(badge).to_be_visible()
    screenshot(page, f"badge-{width}")

    runs.decide(checkpoint, approve=True, user=browser_user)
    expect(page.locator(f"#checkpoint-{checkpoint.pk}")).to_have_count(0)
    expect(badge).to_be_hidden(timeout=3_000)
    expect(badge).to_have_text("")
    assert page.evaluate("window.__notReloaded === true"), "the page was reloaded"


def test_a_refused_decision_in_the_inbox_reads_as_a_sentence(logged_in_page, make_agent, make_plan, screenshot):
    """The inbox showed the engine's refusal as it follows a colon: "a comment is required to reject…"."""
    page = logged_in_page
    make_agent("coder")
    run = runs.launch(make_plan({"a": ("coder", [], {"gate": "before"})}), budget_usd="1")
    checkpoint = run.checkpoints.get(status=Checkpoint.Status.PENDING)
    page.goto("/approvals/")
    item = page.locator(f"#checkpoint-{checkpoint.pk}")
    item.get_by_role("button", name="Reject").click()
    expect(item.get_by_role("alert")).to_have_text("A comment is required to reject: say what is wrong")
    screenshot(page, "refused-reject")
    checkpoint.refresh_from_db()
    assert checkpoint.status == Checkpoint.Status.PENDING


# Every element of an element's tree that draws a border, with its tag and classes.
BORDERED = """root => [root, ...root.querySelectorAll('*')]
    .filter(e => ['Top', 'Right', 'Bottom', 'Left'].some(side => {
        const style = getComputedStyle(e);
        return style['border' + side + 'Style'] !== 'none' && parseFloat(style['border' + side + 'Width']) > 0;
    }))
    .map(e => e.tagName.toLowerCase() + '.' + [...e.classList].join('.'))"""


def test_a_tool_calls_arguments_are_one_box_in_the_inbox(logged_in_page, make_agent, make_plan, screenshot):
    """The arguments were Markdown's code block inside the excerpt's box: a border in a border."""
    page = logged_in_page
    make_agent("coder")
    run = runs.launch(make_plan({"a": ("coder", [])}), budget_usd="1")
    task = run.tasks.get()
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.RUNNING)
    checkpoint = open_tool_checkpoint(run, task, {"path": "notes/findings.md", "content": "Three options."})
    page.goto("/approvals/")
    arguments = page.locator(f"#checkpoint-{checkpoint.pk}").get_by_label("Arguments")
    expect(arguments).to_contain_text('"path": "notes/findings.md"')
    screenshot(page, "tool-arguments")
    assert arguments.evaluate(BORDERED) == ["pre.excerpt.tool-arguments"]


def test_the_badge_leaves_out_the_plans_of_the_viewers_own_runs_live_and_in_the_inbox(
    logged_in_page, browser_user, make_agent, make_plan, screenshot
):
    """The badge counted a plan its viewer launched, which separation of duties keeps them from
    approving: "Approvals 1" in the header, nothing to approve in the inbox. The live frames (the
    same HTML for every viewer who may decide) now take it off on the launcher's page, and the
    inbox lists it apart, under who may approve it."""
    page = logged_in_page
    make_agent("coder")
    own = runs.launch(
        make_plan({"a": ("coder", [])}, goal="My own plan"), launched_by=browser_user, require_plan_approval=True
    )
    run = runs.launch(make_plan({"b": ("coder", [])}), budget_usd="1")
    task = run.tasks.get()
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.RUNNING)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    badge = page.locator("#approvals-count")
    expect(badge).to_be_hidden()  # its poll: nothing waits for this person
    page.route("**/approvals/count/", lambda route: None)  # only the frames count from now on

    checkpoint = open_tool_checkpoint(run, task)
    expect(page.locator(f"#checkpoint-{checkpoint.pk}")).to_be_visible()
    expect(badge).to_have_text("1", timeout=3_000)  # the tool call; not the own plan
    runs.decide(checkpoint, approve=True, user=browser_user)
    expect(page.locator(f"#checkpoint-{checkpoint.pk}")).to_have_count(0)
    expect(badge).to_be_hidden(timeout=3_000)
    page.unroute("**/approvals/count/")

    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 860})
        page.goto("/approvals/")
        expect(page.locator("#approvals-list")).to_contain_text("Nothing is waiting for your decision.")
        apart = page.locator("#approvals-for-another")
        expect(apart.get_by_role("heading")).to_have_text("Your runs' plans, waiting for another approver")
        item = apart.locator(f"#checkpoint-{own.checkpoints.get().pk}")
        expect(item).to_contain_text("you may still edit or reject it on its run page.")
        expect(item.get_by_role("button")).to_have_count(0)
        expect(badge).to_be_hidden()
        screenshot(page, f"inbox-own-plan-{width}")
