"""The run page ("the glass box") in a real browser against daphne and a real qcluster.

The page is never reloaded in a test: every change arrives over the websocket (a marker set on
`window` at the start must still be there at the end). The DAG's state is read from Cytoscape
itself (`window.glassboxRun.cy`). Screenshots land in test-artifacts/<test>/; with
GLASSBOX_UPDATE_SCREENSHOTS=1 the first test also refreshes the README's picture,
docs/screenshots/run-page.png.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect

from orchestrator import plans
from orchestrator.engine import runs
from orchestrator.models import Agent, Attempt, Checkpoint, Event, Plan, Run, TaskRun
from tests.conftest import ROOT, wait_for_run

pytestmark = [pytest.mark.browser]

VIEWPORT = {"width": 1440, "height": 900}
README_SCREENSHOT = ROOT / "docs" / "screenshots" / "run-page.png"
XSS_SCRIPT = "<script>window.pwned = 'script'</script>"
XSS_IMG = "<img src=x onerror=\"window.pwned = 'img'\">"


def node_state(page, task_id: int) -> str | None:
    return page.evaluate("id => window.glassboxRun.cy.getElementById('t' + id).data('state')", task_id)


def poll(
    page, expression: str | Callable[[], bool], arg=None, *, timeout_s: float = 30, what: str = "the page"
) -> None:
    """Until `expression` (a function of `arg`) is true in the page, or a Python check is.

    Playwright's wait_for_function evaluates a string, which the Content-Security-Policy forbids
    (no eval), so this polls with page.evaluate instead.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if expression() if callable(expression) else page.evaluate(expression, arg):
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def wait_for_node(page, task_id: int, states: tuple[str, ...], timeout_s: float = 60) -> str:
    """Until the DAG node of `task_id` shows one of `states` (read from Cytoscape)."""
    poll(
        page,
        "([id, states]) => !!window.glassboxRun && states.includes(window.glassboxRun.cy.getElementById('t' + id).data('state'))",
        [task_id, list(states)],
        timeout_s=timeout_s,
        what=f"task {task_id} to be {' or '.join(states)} in the graph",
    )
    return node_state(page, task_id)


def wait_caught_up(page, run: Run) -> None:
    """Until the page has applied every event the run has written so far."""
    seq = Run.objects.get(pk=run.pk).last_event_seq
    poll(page, "seq => window.glassboxRun.lastSeq() >= seq", seq, what=f"the live view to reach event {seq}")


def click_node(page, task_id: int) -> None:
    """Click the node on the canvas, where Cytoscape drew it."""
    point = page.evaluate(
        """id => {
            const node = window.glassboxRun.cy.getElementById('t' + id);
            const box = document.getElementById('dag').getBoundingClientRect();
            const p = node.renderedPosition();
            return {x: box.left + p.x, y: box.top + p.y};
        }""",
        task_id,
    )
    page.mouse.click(point["x"], point["y"])


def open_run(page, run: Run) -> None:
    page.set_viewport_size(VIEWPORT)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    page.evaluate("window.__notReloaded = true")


def assert_not_reloaded(page) -> None:
    assert page.evaluate("window.__notReloaded === true"), "the page was reloaded"


def drawn_dependency_edges(page) -> int:
    return page.evaluate("window.glassboxRun.cy.edges('.dep:visible').length")


@pytest.mark.processes
def test_watch_a_run_pause_resume_stream_and_approve_a_gate(
    logged_in_page, cluster, demo_agents, priced_limit, make_plan, screenshot
):
    page = logged_in_page
    Agent.objects.update(provider_options={"latency": {"dist": "uniform", "low_s": 1.5, "high_s": 3.0}})
    Agent.objects.filter(name="tester").update(provider_options={"latency": {"dist": "fixed", "seconds": 6.0}})
    plan = make_plan(
        {
            "frame": ("researcher", []),
            "queries": ("researcher", ["frame"]),
            "indexes": ("researcher", ["frame"]),
            "pool": ("researcher", ["frame"]),
            "load_test": ("tester", ["frame"]),
            "caching": ("architect", ["frame"]),
            "serializer": ("coder", ["frame"]),
            "ranked_plan": (
                "writer",
                ["queries", "indexes", "pool", "load_test", "caching", "serializer"],
                {"gate": "before"},
            ),
        },
        goal="Bring the checkout API's p95 latency from 900 ms to 300 ms",
    )
    run = runs.launch(plan, cap=3, budget_usd="1")
    tasks = {t.subtask.key: t.pk for t in run.tasks.select_related("subtask")}
    open_run(page, run)

    # The DAG has one drawn edge per dependency of the plan.
    assert drawn_dependency_edges(page) == plan.dependencies.count() == 12
    assert page.evaluate("window.glassboxRun.cy.nodes('.task').length") == 8

    # Nodes change state as the workers go, without a reload.
    assert wait_for_node(page, tasks["frame"], ("succeeded",)) == "succeeded"
    wait_for_node(page, tasks["load_test"], ("running",))
    screenshot(page, "running")

    # Open the slow task's panel from the graph and see its output stream in.
    click_node(page, tasks["load_test"])
    panel = page.locator("#task-panel")
    expect(panel).to_have_attribute("data-task", str(tasks["load_test"]))
    expect(panel.locator("h2")).to_have_text("Load Test")
    stream = page.locator(f"#task-output-{tasks['load_test']} pre.output-stream")
    lengths = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(lengths) < 3:
        if stream.count():
            lengths.add(len(stream.first.inner_text()))
        if node_state(page, tasks["load_test"]) != "running":
            break
        time.sleep(0.2)
    assert len(lengths) >= 2, f"the output did not grow while the task ran (lengths seen: {sorted(lengths)})"
    if os.environ.get("GLASSBOX_UPDATE_SCREENSHOTS") == "1":  # the README's picture, on request only
        page.screenshot(path=str(README_SCREENSHOT))
    screenshot(page, "panel-streaming")

    # Pause: the header says so at once; nothing new starts. Resume: work goes on.
    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "paused")
    expect(page.locator("#run-flash")).to_contain_text("paused")
    run.refresh_from_db()
    assert run.status == Run.Status.PAUSED
    expect(page.locator(".event-row[data-type='run.paused']")).to_have_count(1)
    # A type first written while the page is open joins the log's filter, as a reload lists it.
    expect(page.locator("#filter-type optgroup[label='Types'] option[value='run.paused']")).to_have_count(1)
    listed = page.eval_on_selector_all("#filter-type optgroup[label='Types'] option", "os => os.map(o => o.value)")
    assert listed == sorted(listed)
    screenshot(page, "paused")
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "running")

    # The gate before the final task: it shows up, is approved, and the run finishes.
    card = page.locator("#run-checkpoints .checkpoint-card[data-kind='before']")
    expect(card).to_be_visible(timeout=90_000)
    expect(card).to_contain_text("may Ranked Plan start?")
    assert node_state(page, tasks["ranked_plan"]) == "waiting_gate"
    screenshot(page, "gate")
    card.get_by_label(re.compile("^Comment")).fill("Go ahead.")
    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_count(0)
    wait_for_node(page, tasks["ranked_plan"], ("succeeded",), timeout_s=90)
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "succeeded")
    expect(page.locator(f"#final-{tasks['ranked_plan']} .markdown")).not_to_be_empty()
    expect(page.locator("#run-gantt .gantt-bar")).to_have_count(Attempt.objects.filter(task_run__run=run).count())
    assert_not_reloaded(page)
    screenshot(page, "finished")
    assert wait_for_run(run, 30, cluster).status == Run.Status.SUCCEEDED
    gate = Checkpoint.objects.get(run=run, kind=Checkpoint.Kind.BEFORE)
    assert (gate.status, gate.comment) == (Checkpoint.Status.APPROVED, "Go ahead.")
    assert Event.objects.filter(run=run, type="run.paused").exists()
    assert Event.objects.filter(run=run, type="run.resumed").exists()


def test_edit_the_plan_then_reject_it_with_a_comment(logged_in_page, demo_agents, priced_limit, make_plan, screenshot):
    page = logged_in_page
    plan = make_plan(
        {
            "scope": ("researcher", [], {"instructions": "Frame the question."}),
            "a": ("researcher", ["scope"]),
            "b": ("researcher", ["scope"]),
            "c": ("researcher", ["scope"]),
            "merge": ("writer", ["a", "b", "c"]),
        },
        goal="A plan to review",
    )
    run = runs.launch(plan, budget_usd="1", require_plan_approval=True)
    checkpoint = run.checkpoints.get()
    open_run(page, run)
    card = page.locator(f"#checkpoint-{checkpoint.pk}")
    expect(card).to_contain_text("Approve the plan before anything runs")
    assert drawn_dependency_edges(page) + page.evaluate("window.glassboxRun.cy.edges('.group-edge:visible').length") > 0
    page.evaluate("window.glassboxRun.expandAll()")
    assert drawn_dependency_edges(page) == 6
    screenshot(page, "plan-approval")

    # Edit a subtask's instructions.
    row = card.locator("#plan-subtask-scope")
    row.get_by_label("Instructions of scope").fill("Frame the question in one sentence.")
    row.get_by_role("button", name="Save").click()
    expect(page.locator("#run-flash")).to_contain_text("Instructions of scope saved")
    wait_caught_up(page, run)
    run.refresh_from_db()
    assert run.plan.subtasks.get(key="scope").instructions == "Frame the question in one sentence."

    # Remove one: the graph loses the node and its two edges, with no reload.
    page.on("dialog", lambda dialog: dialog.accept())
    card.locator("#plan-subtask-b").get_by_role("button", name="Remove b").click()
    expect(page.locator("#run-flash")).to_contain_text("b removed from the plan. merge no longer waits for it.")
    poll(page, "() => window.glassboxRun.cy.nodes('.task').length === 4", what="the graph to lose the node")
    page.evaluate("window.glassboxRun.expandAll()")
    assert drawn_dependency_edges(page) == 4
    expect(card.locator("#plan-subtask-b")).to_have_count(0)
    wait_caught_up(page, run)

    # Reject needs a comment: refused in place without one, done with one.
    card.get_by_role("button", name="Reject").click()
    expect(page.locator("#run-flash .run-flash-text")).to_have_text(
        "A comment is required to reject: say what is wrong"
    )
    checkpoint.refresh_from_db()
    assert checkpoint.status == Checkpoint.Status.PENDING
    card.get_by_label(re.compile("^Comment")).fill("Too broad: split the scope first.")
    card.get_by_role("button", name="Reject").click()
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "cancelled")
    expect(page.locator(f"#checkpoint-{checkpoint.pk}")).to_have_count(0)
    expect(page.locator("#run-header")).to_contain_text("plan rejected: Too broad")
    expect(page.locator("#run-gantt .gantt-empty")).to_have_text("No attempt ran: the plan was rejected.")
    assert_not_reloaded(page)
    screenshot(page, "plan-rejected")
    checkpoint.refresh_from_db()
    assert (checkpoint.status, checkpoint.comment) == (Checkpoint.Status.REJECTED, "Too broad: split the scope first.")


def test_the_lanes_follow_another_run_and_a_pause_and_the_timeline_says_why_no_attempt_ran(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """Nothing runs (no cluster): what changes comes from here, over the websocket, never a reload."""
    page = logged_in_page
    run = runs.launch(make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}), budget_usd="1")
    other = runs.launch(
        make_plan({k: ("researcher", []) for k in ("x", "y", "z")}, goal="Another run"), cap=3, budget_usd="1"
    )
    open_run(page, run)
    page.set_viewport_size({"width": 1280, "height": 860})
    researcher = page.locator("#agent-lanes .lane[data-agent='researcher'] .lane-slots-text")
    expect(researcher).to_have_text("1/4 +3 in other runs")
    seq = page.evaluate("window.glassboxRun.lastSeq()")

    runs.cancel(other)  # no event of this run
    expect(researcher).to_have_text("1/4", timeout=3_000)
    assert page.evaluate("window.glassboxRun.lastSeq()") == seq == Run.objects.get(pk=run.pk).last_event_seq
    screenshot(page, "other-run-cancelled")

    runs.pause(run)
    concurrency = page.locator("#run-totals .stat", has_text="Concurrency")
    expect(concurrency).to_contain_text("0 running · paused")
    expect(concurrency).to_contain_text("paused: nothing new starts until it is resumed")
    writer = page.locator("#agent-lanes .lane[data-agent='writer'] .lane-idle")
    expect(writer).to_have_text("paused: nothing new starts until the run is resumed")
    screenshot(page, "paused")

    runs.resume(run)
    expect(concurrency).to_contain_text("0 running of 4")
    expect(writer).to_have_text("idle")

    runs.cancel(run)
    empty = page.locator("#run-gantt .gantt-empty")
    expect(empty).to_have_text("No attempt ran: the run was cancelled before any started.")
    expect(empty).to_be_visible()
    expect(concurrency).to_contain_text("0 running · ended")
    assert_not_reloaded(page)
    screenshot(page, "cancelled-before-any-attempt")

    rejected = runs.launch(make_plan({"a": ("researcher", [])}, goal="Rejected"), require_plan_approval=True)
    open_run(page, rejected)
    page.set_viewport_size({"width": 1280, "height": 860})
    expect(empty).to_have_text("No attempt has started yet.")
    runs.decide(rejected.checkpoints.get(), approve=False, user=User.objects.get(), comment="Too broad")
    expect(empty).to_have_text("No attempt ran: the plan was rejected.")
    screenshot(page, "plan-rejected")


# A frame as the live view applies one: each part replaces the element of its id, then the page syncs.
APPLY_FRAME = """html => {
    const parts = document.createElement('template');
    parts.innerHTML = html;
    [...parts.content.children].forEach(part => document.getElementById(part.id).replaceWith(part));
    document.body.dispatchEvent(new CustomEvent('htmx:wsAfterMessage', {bubbles: true}));
}"""


def test_a_lane_shows_its_running_task_s_live_percentage_as_its_row_does(
    logged_in_page, demo_agents, priced_limit, make_plan, no_broker
):
    """The row said 40% (a live piece) while the agent's lane said 10% (the saved progress, from
    which the lanes are redrawn: by events, saves, other runs' slots): the lane's bar must show the
    row's percentage, and not step back when the lanes are redrawn from the saved progress."""
    from dashboard import frames
    from orchestrator.engine import execution
    from orchestrator.providers.base import Usage

    page = logged_in_page
    run = runs.launch(make_plan({"draft": ("writer", [])}), budget_usd="1")
    task = run.tasks.get()
    claim = execution.claim_attempt(Attempt.objects.get(task_run=task).pk, "host:1")
    assert claim is not None
    execution.save_progress([(claim, execution.Progress("Hel", 10, Usage(input_tokens=20, output_tokens=4)))])
    open_run(page, run)
    wait_caught_up(page, run)  # no event's frame still on its way, to redraw the row over the piece below
    row = page.locator(f"#task-{task.pk} progress")
    lane = page.locator(f"#agent-lanes .lane[data-agent='writer'] .task-link[data-task='{task.pk}'] ~ progress")
    expect(row).to_have_attribute("value", "10")
    expect(lane).to_have_attribute("value", "10")
    # The broadcaster's first poll of the saved progress redraws the row at the saved percentage:
    # a save the page was not rendered with shows that poll is behind us, so no frame of it lands
    # on the live piece below (in the embedded profile the server never heard of that piece).
    execution.save_progress([(claim, execution.Progress("Hello", 12, Usage(input_tokens=20, output_tokens=5)))])
    expect(row).to_have_attribute("value", "12")
    expect(lane).to_have_attribute("value", "12")

    page.evaluate(APPLY_FRAME, frames.render_live_progress({task.pk: 40}))  # a live piece: 40%
    expect(row).to_have_attribute("value", "40")
    expect(lane).to_have_attribute("value", "40")
    expect(lane).to_have_attribute("aria-label", re.compile(r": 40%$"))

    page.evaluate(APPLY_FRAME, frames.render_slots_elsewhere(run.pk))  # the lanes redrawn from the saved 12%
    expect(row).to_have_attribute("value", "40")
    expect(lane).to_have_attribute("value", "40")
    assert_not_reloaded(page)


def test_the_timeline_shows_a_pause_as_it_happens_and_where_it_ended(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """A gap in the bars said nothing of why nothing started then; a pause is drawn across the lanes."""
    page = logged_in_page
    run = runs.launch(make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}), budget_usd="1")
    scope = run.tasks.get(subtask__key="scope")
    began = timezone.now() - timedelta(seconds=4)
    Attempt.objects.filter(task_run=scope).update(state=Attempt.State.RUNNING, worker="w:1", started_at=began)
    TaskRun.objects.filter(pk=scope.pk).update(state=TaskRun.State.RUNNING, started_at=began)
    open_run(page, run)
    page.set_viewport_size({"width": 1280, "height": 860})
    row = page.locator("#run-gantt .gantt-paused-row")
    expect(row).to_have_count(0)

    runs.pause(run)
    expect(row).to_contain_text("paused")
    band = row.locator(".gantt-pause")
    expect(band).to_have_attribute("data-end", "")  # still paused: it grows with the clock
    expect(band).to_have_attribute("title", re.compile("nothing new starts until the run is resumed"))
    expect(page.locator(f"#gantt-lane-{demo_agents['researcher'].pk} .gantt-pause")).to_have_count(1)
    page.wait_for_function("document.querySelector('#run-gantt .gantt-paused-row .gantt-pause').offsetWidth > 0")

    runs.resume(run)
    expect(band).to_have_attribute("data-end", re.compile(r"^\d+$"))
    expect(band).to_have_attribute("title", re.compile(r"^Paused for .*: nothing new started"))
    assert_not_reloaded(page)
    page.locator("#run-gantt").scroll_into_view_if_needed()
    path = screenshot(page, "timeline-paused-and-resumed")
    page.locator("#run-gantt").screenshot(path=str(path.with_name("timeline.png")))
    page.set_viewport_size({"width": 390, "height": 860})
    page.locator("#run-gantt").screenshot(path=str(path.with_name("timeline-390.png")))


def test_a_reopened_runs_timeline_folds_the_minutes_it_lay_ended(
    logged_in_page, make_agent, priced_limit, make_plan, no_broker, monkeypatch, screenshot
):
    """A run a person retried ten minutes after it failed drew its timeline from its start to now on
    one axis: the minutes it lay ended filled it, and the seconds of work of each start were slivers."""
    from tests.conftest import fast_latency, run_here

    page = logged_in_page
    real_now, behind = timezone.now, [timedelta(minutes=10, seconds=20)]
    monkeypatch.setattr(timezone, "now", lambda: real_now() - behind[0])  # what this process writes
    # It fails part-way through its five seconds: after one to four seconds of work.
    researcher = make_agent("researcher", provider_options={**fast_latency(5), "failure_rate": 1}, max_retries=0)
    run = run_here(runs.launch(make_plan({"scope": ("researcher", [])}), budget_usd="1"))
    assert run.status == Run.Status.FAILED  # ten minutes ago
    open_run(page, run)
    page.set_viewport_size({"width": 1280, "height": 860})
    ended_row = page.locator("#run-gantt .gantt-ended-row")
    expect(ended_row).to_have_count(0)  # ended, not reopened: its timeline ends where it ended

    behind[0] = timedelta(0)
    researcher.provider_options = fast_latency(2)
    researcher.save()
    runs.retry_task(run.tasks.get(), user=User.objects.get())
    run = run_here(run)
    assert run.status == Run.Status.SUCCEEDED
    band = ended_row.locator(".gantt-ended")
    expect(band).to_have_attribute(
        "title", re.compile(r"^Ended \(failed\) for 10 min [0-5]\d s, then reopened by a retry of scope$")
    )
    expect(page.locator("#run-gantt .gantt-bar")).to_have_count(2)
    expect(page.locator("#run-gantt .gantt-bar.attempt-succeeded")).to_have_count(1)
    expect(band).to_have_class(re.compile(r"\bis-folded\b"))
    expect(band).to_contain_text(re.compile(r"^ended 10 min [0-5]\d s$"))  # how long, not on hover alone
    drawn = page.evaluate(
        """() => {
            const width = el => el.getBoundingClientRect().width;
            const gantt = document.querySelector('#run-gantt');
            return {
                lane: width(gantt.querySelector('.gantt-ticks')),
                bars: [...gantt.querySelectorAll('.gantt-bar')].map(width),
                band: width(gantt.querySelector('.gantt-ended-row .gantt-ended')),
                ticks: [...gantt.querySelectorAll('.gantt-tick')].map(tick => tick.textContent),
                crowded: [...gantt.querySelectorAll('.gantt-tick')].some((tick, i, all) =>
                    i > 0 && tick.getBoundingClientRect().left < all[i - 1].getBoundingClientRect().right),
            };
        }"""
    )
    # Seconds of work in each start on a ten-minute axis: each bar was drawn 3 px wide.
    assert all(width > drawn["lane"] / 5 for width in drawn["bars"]), drawn
    assert 30 < drawn["band"] < 60, drawn  # folded to a break of fixed width, whatever it lasted
    # The ticks go on after the fold from where the run was reopened, none written over another.
    assert drawn["ticks"][0] == "0 s" and any(tick.startswith("10 min") for tick in drawn["ticks"]), drawn
    assert not drawn["crowded"], drawn
    assert_not_reloaded(page)
    page.locator("#run-gantt").scroll_into_view_if_needed()
    path = screenshot(page, "timeline-reopened")
    page.locator("#run-gantt").screenshot(path=str(path.with_name("timeline.png")))
    page.set_viewport_size({"width": 390, "height": 860})
    page.wait_for_timeout(1_500)  # laid out again at the clock's next tick: the fold keeps its width
    page.locator("#run-gantt").screenshot(path=str(path.with_name("timeline-390.png")))


def test_a_run_stopped_over_budget_has_its_budget_raised_from_its_header_and_a_retry_goes_on(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """It said "raise the budget and retry" with no way to raise it; Retry said "scope will run
    again." and the run ended once more in the same second."""
    from orchestrator import events
    from orchestrator.engine import scheduler

    page = logged_in_page
    run = runs.launch(make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}), budget_usd="1")
    scope = run.tasks.get(subtask__key="scope")
    Attempt.objects.filter(task_run__run=run).update(reserved_usd=0)
    TaskRun.objects.filter(pk=scope.pk).update(state=TaskRun.State.FAILED, finished_at=timezone.now())
    Run.objects.filter(pk=run.pk).update(cost_usd="0.999", reserved_usd=0)
    with events.atomic():
        scheduler.stop_over_budget(scheduler.lock_run(run.pk))
    open_run(page, run)
    header = page.locator("#run-header")
    expect(header).to_contain_text("raise the budget on the run's page, then retry a cancelled task")
    expect(page.locator("#cost-budget-stop")).to_have_text("stopped: the next task would exceed the budget")
    budget = header.get_by_label("Budget $")
    expect(budget).to_have_value("1.00")

    page.goto(f"/runs/{run.pk}/?task={scope.pk}")
    page.evaluate("window.__notReloaded = true")
    page.locator("#task-panel [data-action='retry']").click()
    flash = page.locator("#run-flash")
    expect(flash).to_contain_text(re.compile(r"Task scope may cost up to \$0\.0\d+ .* at least \$1\.02 first"))
    expect(flash).not_to_contain_text("will run again")

    budget = page.locator("#run-header").get_by_label("Budget $")
    budget.fill("1.02")
    page.locator("#run-header [data-action='change-budget']").click()
    expect(flash).to_contain_text(
        f"Run {run.pk}'s budget is now $1.02. It stays stopped until you retry a cancelled task."
    )
    expect(page.locator("#run-totals")).to_contain_text("of $1.02")
    expect(page.locator("#run-header").get_by_label("Budget $")).to_have_value("1.02")
    screenshot(page, "budget-raised")

    page.locator("#task-panel [data-action='retry']").click()
    expect(flash).to_contain_text("scope will run again.")
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "running")
    assert_not_reloaded(page)


def test_a_long_plan_under_review_scrolls_in_its_box_and_the_page_ends_with_its_content(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """The review table of a plan awaiting approval scrolls inside its box; its hidden field labels
    stretched the page far below its content (~11,000 blank px under a 200-subtask plan)."""
    page = logged_in_page
    probes = {f"probe_{i:02}": ("researcher", ["scope"]) for i in range(60)}
    subtasks = {"scope": ("researcher", []), **probes, "merge": ("writer", list(probes))}
    run = runs.launch(make_plan(subtasks, goal="A long plan to review"), budget_usd="5", require_plan_approval=True)
    open_run(page, run)
    expect(page.locator(".plan-review")).to_be_visible()
    expect(page.get_by_label("Instructions of merge")).to_be_attached()
    # A list this long scrolls, and says so: how many subtasks, and a cue at the box's bottom edge.
    expect(page.locator("#run-checkpoints .context")).to_contain_text("62 subtasks, in a list that scrolls")
    expect(page.locator(".plan-review .plan-scroll-cue")).to_have_text(
        "62 subtasks in all: scroll this list to see every one"
    )
    cue, box = page.evaluate(
        """() => [document.querySelector('.plan-scroll-cue'), document.querySelector('.plan-review')]
            .map(e => e.getBoundingClientRect().bottom)"""
    )
    assert abs(cue - box) <= 2, f"the cue ends at {cue} px, not at the bottom of its box ({box})"
    page_height, content_bottom = page.evaluate(
        """() => [
            document.documentElement.scrollHeight,
            Math.max(...[...document.body.children].map(e => e.getBoundingClientRect().bottom + window.scrollY)),
        ]"""
    )
    screenshot(page, "long-plan-under-review")
    assert page_height <= content_bottom + 50, (
        f"the page is {page_height} px tall, its content ends at {content_bottom}"
    )


# The right edge of what `inner` draws (its text, however it wraps: a range over its contents, not
# its box, which keeps to its column while the text spills out of it), and the left edge of the
# next column or the right edge of the box `inner` sits in: a title drawn over them ends past them.
DRAWN_RIGHT = (
    "el => { const r = document.createRange(); r.selectNodeContents(el); return r.getBoundingClientRect().right; }"
)
BEFORE_NEXT = f"""([inner, next]) => [({DRAWN_RIGHT})(document.querySelector(inner)),
    document.querySelector(next).getBoundingClientRect().left]"""
INSIDE = f"""([inner, outer]) => {{ const el = document.querySelector(inner);
    return [({DRAWN_RIGHT})(el), el.closest(outer).getBoundingClientRect().right]; }}"""


def test_a_long_title_without_spaces_breaks_inside_its_box_everywhere(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """The plan document allows 200-character titles; one word of 199 "x" was drawn over the
    agent, state, tokens, cost and attempt columns. It wraps in its own box wherever it is shown."""
    page = logged_in_page
    title = "x" * 199
    plan = make_plan({"long": ("researcher", [], {"title": title, "gate": "before"})}, goal="A long title")
    run = runs.launch(plan, budget_usd="1")  # no cluster: the gate holds the task
    long = run.tasks.get()
    open_run(page, run)
    row = f"#task-{long.pk}"
    expect(page.locator(f"{row} .task-link")).to_have_text(title)

    # The tasks table: the title ends before the agent's column.
    title_right, agent_left = page.evaluate(BEFORE_NEXT, [f"{row} .cell-task", f"{row} .cell-agent"])
    assert title_right <= agent_left, f"the title ends at {title_right} px, the agent column starts at {agent_left}"

    # The gate's card on the run page: the question ends before the decision form.
    card = "#run-checkpoints .checkpoint-card"
    ask_right, form_left = page.evaluate(BEFORE_NEXT, [f"{card} .ask", f"{card} form.decide"])
    assert ask_right <= form_left, f"the gate's question ends at {ask_right} px, its form starts at {form_left}"

    # The graph's hover line stays in the graph's card.
    page.evaluate("id => window.glassboxRun.cy.getElementById('t' + id).emit('mouseover')", long.pk)
    expect(page.locator("#dag-hover")).to_contain_text(title)
    hover_right, card_right = page.evaluate(INSIDE, ["#dag-hover", ".card"])
    assert hover_right <= card_right, f"the graph's hover line ends at {hover_right} px, its card at {card_right}"

    # The task panel's head.
    page.locator(f"{row} .task-link").click()
    expect(page.locator("#task-panel h2")).to_have_text(title)
    head_right, panel_right = page.evaluate(INSIDE, ["#task-panel h2", "#task-panel"])
    assert head_right <= panel_right, f"the panel's title ends at {head_right} px, the panel at {panel_right}"
    screenshot(page, "long-title-run-page")

    # The approvals inbox: the question ends before the decision column.
    page.goto("/approvals/")
    ask_right, decide_left = page.evaluate(BEFORE_NEXT, [".approval .ask", ".approval .decide"])
    screenshot(page, "long-title-approvals")
    assert ask_right <= decide_left, f"the inbox's question ends at {ask_right} px, the form starts at {decide_left}"


def test_every_subtask_of_a_plan_under_review_is_in_the_page_not_in_a_hidden_scroll(
    logged_in_page, demo_agents, priced_limit, screenshot
):
    """The example feature pipeline's five subtasks sat in a box 338 px high holding 429 px, which
    showed four of them and no sign of the fifth: an approver could approve a subtask never seen.
    Each subtask's key must come into the viewport by scrolling the page alone."""
    page = logged_in_page
    document = (ROOT / "examples" / "feature_pipeline.yaml").read_text()
    plan = plans.save_plan(plans.validate_document(document, filename="feature_pipeline.yaml"), source=Plan.Source.FILE)
    run = runs.launch(plan, budget_usd="5", require_plan_approval=True)
    keys = list(plan.subtasks.order_by("position").values_list("key", flat=True))
    assert len(keys) == 5
    open_run(page, run)
    card = page.locator("#run-checkpoints .checkpoint-card")
    expect(card.locator(".context")).to_contain_text("5 subtasks.")
    expect(card.locator(".plan-scroll-cue")).to_have_count(0)
    screenshot(page, "plan-of-five-under-review")
    for key in keys:
        # The window scrolls to the key (scrollIntoView would scroll an inner box too); what is drawn
        # at the key's centre must then be the key itself, not whatever an inner box left there.
        seen = page.evaluate(
            """key => {
                const code = document.querySelector(`#plan-subtask-${key} code`);
                const top = code.getBoundingClientRect().top + window.scrollY;
                window.scrollTo(0, Math.max(0, top - window.innerHeight / 2));
                const r = code.getBoundingClientRect();
                const x = (r.left + r.right) / 2, y = (r.top + r.bottom) / 2;
                const inView = r.top >= 0 && r.bottom <= window.innerHeight && r.left >= 0 && r.right <= window.innerWidth;
                return inView && code.contains(document.elementFromPoint(x, y));
            }""",
            key,
        )
        assert seen, f"subtask {key} cannot be seen by scrolling the page: it is hidden inside a scroll box"


def test_untrusted_goal_titles_and_outputs_show_as_text_and_run_nothing(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    page = logged_in_page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    plan = make_plan(
        {
            "evil": ("researcher", [], {"title": f"Title {XSS_SCRIPT}", "instructions": f"Do {XSS_IMG}"}),
            "final": ("writer", ["evil"], {"title": f"Final {XSS_IMG}"}),
        },
        goal=f"Goal {XSS_SCRIPT} {XSS_IMG}",
    )
    run = runs.launch(plan, budget_usd="1")  # no cluster: the outputs are written here
    now = timezone.now()
    for task in run.tasks.select_related("subtask"):
        TaskRun.objects.filter(pk=task.pk).update(
            state=TaskRun.State.SUCCEEDED,
            output=f"# {task.subtask.key}\n\nText {XSS_SCRIPT} and {XSS_IMG} and [a link](javascript:window.pwned='link')",
            summary=f"Summary {XSS_IMG}",
            progress=100,
            started_at=now,
            finished_at=now,
        )
    evil = run.tasks.get(subtask__key="evil")
    open_run(page, run)

    expect(page.locator("#run-header h1")).to_contain_text("<script>window.pwned = 'script'</script>")
    expect(page.locator(f"#task-{evil.pk}")).to_contain_text("Title <script>")
    page.locator(f"#task-{evil.pk} .task-link").click()
    panel = page.locator("#task-panel")
    expect(panel.locator("h2")).to_contain_text("<script>")
    expect(panel).to_contain_text('<img src=x onerror="window.pwned')  # instructions, as text
    expect(panel.locator(".output-rendered h1")).to_have_text("evil")
    assert panel.locator(".output-rendered img, .output-rendered script").count() == 0
    final = run.tasks.get(subtask__key="final")
    expect(page.locator(f"#final-{final.pk}")).to_contain_text("Final <img")
    page.locator(".task-output-item summary").first.click()
    expect(page.locator(".task-output-item .lazy-output h1")).to_have_text("evil")
    links = page.locator("a[href^='javascript']")
    assert links.count() == 0
    # The link text survives without its javascript: URL; clicking it does nothing.
    expect(panel.locator(".output-rendered")).to_contain_text("a link")
    assert page.evaluate("window.pwned === undefined")
    assert dialogs == []
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert_not_reloaded(page)
    screenshot(page, "untrusted-text")


def test_the_page_follows_changes_made_elsewhere_and_labels_nodes_with_the_servers_text(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    page = logged_in_page
    plan = make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}, goal="Followed from elsewhere")
    run = runs.launch(plan, budget_usd="1")  # no cluster: nothing runs; the changes come from here
    write = run.tasks.get(subtask__key="write")
    TaskRun.objects.filter(pk=write.pk).update(input_tokens=12_000, output_tokens=345)
    open_run(page, run)

    # The node's label places the row's server-formatted token count (12,345 → "12.3k").
    expect(page.locator(f"#task-{write.pk} .cell-tokens")).to_have_text("12.3k")
    label = page.evaluate("id => window.glassboxRun.cy.getElementById('t' + id).data('label')", write.pk)
    assert label.endswith("· 12.3k tok"), label
    seq_before = page.evaluate("window.glassboxRun.lastSeq()")

    # Changes made through the engine (as the command line would) arrive over the websocket.
    runs.skip_task(write, reason="not needed after all")
    assert wait_for_node(page, write.pk, ("skipped",), timeout_s=30) == "skipped"
    expect(page.locator(f"#task-{write.pk}")).to_have_attribute("data-state", "skipped")
    runs.pause(run)
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "paused")
    wait_caught_up(page, run)
    assert page.evaluate("window.glassboxRun.lastSeq()") > seq_before
    expect(page.locator(".event-row[data-type='task.skipped']")).to_have_count(1)
    assert_not_reloaded(page)
    screenshot(page, "followed")


# What the page shows of one running task: its row's bar and tokens, its open panel's Progress
# and Tokens (and bar), and its agent lane's tokens and bar; the row's state and whether the lane lists it.
RUNNING_TASK_NUMBERS = """id => {
    const row = document.getElementById('task-' + id);
    const head = document.getElementById('task-head-' + id);
    const burn = document.querySelector('#agent-lanes .task-link[data-task="' + id + '"] ~ .lane-burn');
    const laneBar = document.querySelector('#agent-lanes .task-link[data-task="' + id + '"] ~ progress');
    const fact = name => [...head.querySelectorAll('.task-facts div')]
        .find(div => div.querySelector('dt').textContent === name).querySelector('dd').textContent;
    return {
        state: row.dataset.state,
        row: row.querySelector('progress') ? row.querySelector('progress').value : 100,
        panel: fact('Progress'),
        panelBar: head.querySelector('progress').value,
        rowTokens: row.querySelector('.cell-tokens').textContent,
        panelTokens: fact('Tokens'),
        laneTokens: burn ? burn.textContent.replace(' tok', '') : null,
        lane: laneBar ? laneBar.value : null,
        cardTokens: [...document.querySelectorAll('#run-totals .stat')]
            .find(stat => stat.querySelector('.stat-label').textContent.trim() === 'Tokens')
            .querySelector('.stat-value').textContent,
    };
}"""


@pytest.mark.processes
def test_an_open_panel_shows_the_progress_and_tokens_of_its_running_task_as_its_row_and_lane_do(
    logged_in_page, cluster, demo_agents, priced_limit, make_plan, screenshot
):
    page = logged_in_page
    Agent.objects.filter(name="tester").update(provider_options={"latency": {"dist": "fixed", "seconds": 10.0}})
    plan = make_plan({"load_test": ("tester", [])}, goal="Load-test the checkout API")
    run = runs.launch(plan, cap=1, budget_usd="1")
    task = run.tasks.get()
    open_run(page, run)
    wait_for_node(page, task.pk, ("running",))
    page.locator(f"#task-{task.pk} .task-link").click()
    expect(page.locator("#task-panel")).to_have_attribute("data-task", str(task.pk))
    expect(page.locator(f"#task-head-{task.pk}")).to_be_visible()

    # While it runs, the panel's Progress follows the row's bar, and once a save brought the
    # tokens streamed so far, the row, the panel, the lane and the run's Tokens card say the same number.
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = page.evaluate(RUNNING_TASK_NUMBERS, task.pk)
        if now["state"] != "running":
            break
        seen.append(now)
        if (
            len({s["row"] for s in seen if s["row"] > 0}) >= 2
            and now["row"] > 0
            and now["laneTokens"] not in (None, "0")
        ):
            break
        time.sleep(0.1)
    # (A sample may fall between a frame's swap and its percentages, or before the first frame
    # after the panel opened: the numbers agree from the next frame on.)
    moving = [s for s in seen if s["row"] > 0]
    assert moving, f"the row's bar never moved off 0% while the task ran: {seen}"
    agreeing = {s["row"] for s in moving if s["panel"] == f"{s['row']:.0f}%" and s["panelBar"] == s["row"]}
    assert len(agreeing) >= 2, f"the panel's Progress did not move on with its row: {seen}"
    last = moving[-1]
    assert last["panel"] == f"{last['row']:.0f}%", last
    # The agent's lane draws its bar at the row's percentage (a frame and the page's sync are one step).
    assert [s for s in moving if s["lane"] is not None and s["lane"] != s["row"]] == [], seen
    saved = [s for s in seen if s["laneTokens"] not in (None, "0")]
    assert saved, f"no save of the streamed tokens reached the lane while the task ran: {seen}"
    # The run's Tokens card too (its one task is the one streaming): it said 0 until the task ended.
    assert saved[-1]["rowTokens"] == saved[-1]["panelTokens"] == saved[-1]["laneTokens"] == saved[-1]["cardTokens"], (
        saved[-1]
    )
    page.locator(f"#task-head-{task.pk}").scroll_into_view_if_needed()
    screenshot(page, "panel-running")

    # Once it has ended, its row and its panel say so, with the same final tokens.
    expect(page.locator(f"#task-head-{task.pk}")).to_have_attribute("data-state", "succeeded", timeout=30_000)
    expect(page.locator(f"#task-{task.pk}")).to_have_attribute("data-state", "succeeded")
    row_tokens = page.locator(f"#task-{task.pk} .cell-tokens").inner_text()
    expect(page.locator(f"#task-head-{task.pk} .task-facts div:nth-child(2) dd")).to_have_text(row_tokens)
    expect(page.locator(f"#task-head-{task.pk} .task-facts div:nth-child(1) dd")).to_have_text("100%")
    assert_not_reloaded(page)


def test_a_task_waiting_for_a_tool_calls_approval_or_its_retry_is_drawn_in_its_own_state(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """A task whose call waited for approval was drawn running (blue), not in the purple of
    "needs approval"; one waiting for its retry was drawn "held back", as a cap holds a task."""
    from orchestrator.engine import execution, tool_approvals

    page = logged_in_page
    run = runs.launch(make_plan({"calls": ("researcher", []), "again": ("writer", []), "held": ("writer", [])}))
    calls, again, held = (run.tasks.get(subtask__key=key) for key in ("calls", "again", "held"))
    claim = execution.claim_attempt(Attempt.objects.get(task_run=calls).pk, "host:1")
    asked = tool_approvals.Asked("c1", "write_file", "workspace", "write_file", {"path": "notes.md"})
    tool_approvals.open_checkpoint(claim, asked)
    TaskRun.objects.filter(pk=again.pk).update(
        state=TaskRun.State.READY, wait_code="retry_backoff", wait_reason="retrying from 17:57:16 UTC after: boom"
    )
    TaskRun.objects.filter(pk=held.pk).update(
        state=TaskRun.State.READY, wait_code="run_cap", wait_reason="run cap reached (1 queued or running)"
    )
    open_run(page, run)
    assert wait_for_node(page, calls.pk, ("waiting_gate",)) == "waiting_gate"
    assert wait_for_node(page, again.pk, ("retrying",)) == "retrying"
    assert wait_for_node(page, held.pk, ("waiting",)) == "waiting"
    drawn = page.evaluate("id => window.glassboxRun.cy.getElementById('t' + id).style('border-color')", calls.pk)
    assert drawn.replace(" ", "") == "rgb(124,58,237)"  # base.css: --state-waiting_gate, the purple of "needs approval"
    # Its row says which call waits (it said "step 1 · thinking", from before the call was asked).
    expect(page.locator(f"#task-{calls.pk} .wait-reason")).to_have_text("step 1 · waiting for approval of write_file")
    screenshot(page, "approval-and-retry")
