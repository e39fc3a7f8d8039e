"""Every page works at 390 px (a phone held upright): nothing overflows sideways; wide tables and
the graph scroll inside their own box. Screenshots in test-artifacts/<test>/."""

from __future__ import annotations

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from orchestrator.engine import runs, scheduler
from orchestrator.models import Run, TaskRun
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser]

PHONE = {"width": 390, "height": 844}


def overflow(page) -> list[str]:
    """What sticks out to the right of the viewport (the page scrolls sideways because of it)."""
    return page.evaluate(
        """() => {
            const width = document.documentElement.clientWidth;
            const out = [];
            if (document.documentElement.scrollWidth > width + 1) {
                for (const el of document.body.querySelectorAll('*')) {
                    const r = el.getBoundingClientRect();
                    if (r.right > width + 1 && r.width > 0 && getComputedStyle(el).position !== 'fixed') {
                        let inside = el.parentElement, clipped = false;
                        while (inside && inside !== document.body) {
                            const o = getComputedStyle(inside).overflowX;
                            if (o === 'auto' || o === 'scroll' || o === 'hidden') { clipped = true; break; }
                            inside = inside.parentElement;
                        }
                        if (!clipped) out.push((el.id ? '#' + el.id : el.tagName.toLowerCase() + '.' + el.className) + ' right=' + Math.round(r.right));
                    }
                }
                out.unshift('scrollWidth=' + document.documentElement.scrollWidth);
            }
            return out.slice(0, 12);
        }"""
    )


def test_every_page_fits_a_390_px_screen(
    logged_in_page, demo_agents, priced_limit, make_plan, browser_user, screenshot
):
    page = logged_in_page
    page.set_viewport_size(PHONE)
    plan = make_plan(
        {
            "scope": ("researcher", [], {"instructions": "Frame the question in one paragraph."}),
            "a": ("researcher", ["scope"]),
            "b": ("architect", ["scope"]),
            "merge": ("writer", ["a", "b"], {"gate": "before"}),
        },
        goal="Choose a message queue for the billing service and explain the trade-offs to the team",
    )
    run = runs.launch(plan, cap=2, budget_usd="1", launched_by=browser_user)
    waiting = runs.launch(plan, require_plan_approval=True)
    task = run.tasks.get(subtask__key="scope")
    pages = {
        "runs": "/runs/",
        "run": f"/runs/{run.pk}/",
        "run-panel": f"/runs/{run.pk}/?task={task.pk}",
        "run-awaiting-approval": f"/runs/{waiting.pk}/",
        "plans": "/plans/",
        "plan": f"/plans/{plan.pk}/",
        "new-run": "/runs/new/",
        "approvals": "/approvals/",
    }
    problems = {}
    for name, url in pages.items():
        page.goto(url)
        expect(page.locator("main")).to_be_visible()
        screenshot(page, name)
        sticking_out = overflow(page)
        if sticking_out:
            problems[name] = sticking_out
    page.goto("/runs/new/")
    page.get_by_label("Plan file", exact=True).set_input_files(str(ROOT / "examples" / "research_brief.yaml"))
    page.get_by_role("button", name="Check the plan").click()
    expect(page.get_by_role("heading", name="Check before launch")).to_be_visible()
    screenshot(page, "preflight")
    if sticking_out := overflow(page):
        problems["preflight"] = sticking_out
    assert problems == {}, "\n".join(f"{k}: {v}" for k, v in problems.items())


def cut_short(page, selector: str) -> list[str]:
    """The elements under `selector` whose text is wider than their box (cut, or drawn outside it)."""
    return page.evaluate(
        """selector => [...document.querySelectorAll(selector + ' *')]
            .filter(el => el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
            .map(el => el.className + ': ' + el.textContent.trim().slice(0, 60))""",
        selector,
    )


def test_the_totals_cards_wrap_their_text_at_390_px_rather_than_cut_it(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """At 390 px the Cost card cut the budget to "of $0…." (its value kept to one line, cut with an
    ellipsis); every card's text wraps inside the card instead."""
    page = logged_in_page
    page.set_viewport_size(PHONE)
    plan = make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"], {"gate": "before"})})
    run = runs.launch(plan, cap=2, budget_usd="0.5")
    Run.objects.filter(pk=run.pk).update(cost_usd=Decimal("0.0131"), input_tokens=1307, output_tokens=615)
    page.goto(f"/runs/{run.pk}/")
    cost = page.locator("#run-totals .stat").filter(has_text="Cost")
    expect(cost.locator(".stat-value")).to_have_text("$0.0131 of $0.50")
    screenshot(page, "totals")
    assert cut_short(page, "#run-totals") == []

    # Only the gated task is left: the ETA is the time after the decision, in words that wrap too.
    run.tasks.filter(subtask__key="scope").update(state=TaskRun.State.SUCCEEDED, output="ok")
    scheduler.advance(run.pk)  # opens the gate's checkpoint
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#run-totals .js-eta")).to_contain_text("after the decision")
    screenshot(page, "totals-after-the-decision")
    assert cut_short(page, "#run-totals") == []


def boxes(page, selector: str) -> list[dict]:
    """The on-screen box of each element under `selector`: left, right, top (CSS pixels)."""
    return page.evaluate(
        """selector => [...document.querySelectorAll(selector)].map(el => {
            const r = el.getBoundingClientRect();
            return {left: Math.round(r.left), right: Math.round(r.right), top: Math.round(r.top)};
        })""",
        selector,
    )


def scrolls_sideways(page, selector: str) -> bool:
    return page.locator(selector).evaluate("el => el.scrollWidth > el.clientWidth + 1")


def test_the_event_log_and_the_task_table_are_read_on_a_390_px_screen(
    logged_in_page, demo_agents, priced_limit, make_plan, browser_user, screenshot
):
    """At 390 px the event log was a 640 px grid scrolled inside its box: each event's message was
    off-screen to the right, and rows grew to 143 px of one word a line. The message now wraps
    below its time and type, inside the screen; the task table still scrolls sideways, inside its
    own box (not the page), with the task's name kept in view and a hint that there is more."""
    page = logged_in_page
    page.set_viewport_size(PHONE)
    plan = make_plan(
        {f"probe_{n}": ("researcher", [], {"instructions": "Probe one angle."}) for n in range(4)}
        | {"brief": ("writer", [f"probe_{n}" for n in range(4)])},
        goal="Compare three message queues for the billing service",
    )
    run = runs.launch(plan, cap=2, budget_usd="1", launched_by=browser_user)
    runs.cancel(run)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#event-log-rows .event-row").first).to_be_visible()
    screenshot(page, "run-390")

    messages = boxes(page, "#event-log-rows .event-message")
    assert messages and all(0 <= box["left"] and box["right"] <= PHONE["width"] for box in messages), messages
    log_box = page.locator("section[aria-labelledby=log-title] .scroll-box")
    assert not scrolls_sideways(page, "section[aria-labelledby=log-title] .scroll-box")
    first = page.locator("#event-log-rows .event-row").first
    first.scroll_into_view_if_needed()
    expect(first.locator(".event-message")).to_be_in_viewport(ratio=1)
    times, texts = boxes(page, "#event-log-rows .event-row > :nth-child(2)"), messages
    assert all(text["top"] > time["top"] for time, text in zip(times, texts, strict=True))  # below its time
    log_right = log_box.bounding_box()
    assert all(box["right"] <= log_right["x"] + log_right["width"] for box in messages)

    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # the page never scrolls sideways
    assert scrolls_sideways(page, ".tasks-box")  # the table does, inside its box
    expect(page.get_by_text("Scroll the table sideways for progress, tokens, cost and attempts.")).to_be_visible()
    tasks_box = page.locator(".tasks-box")
    tasks_box.scroll_into_view_if_needed()
    tasks_box.evaluate("el => el.scrollLeft = el.scrollWidth")
    expect(tasks_box.get_by_role("columnheader", name="Cost")).to_be_in_viewport()
    task_name = tasks_box.get_by_role("link", name="Probe 0")
    expect(task_name).to_be_in_viewport()  # the task's name stays in view beside its numbers
    name_box, box = task_name.bounding_box(), tasks_box.bounding_box()
    assert box["x"] <= name_box["x"] and name_box["x"] + name_box["width"] <= box["x"] + box["width"]
    screenshot(page, "tasks-scrolled-390")

    # At desktop width nothing of this shows: the log's message is on the line of its time, no hint.
    page.set_viewport_size({"width": 1400, "height": 900})
    times, texts = (
        boxes(page, "#event-log-rows .event-row > :nth-child(2)"),
        boxes(page, "#event-log-rows .event-message"),
    )
    assert all(abs(text["top"] - time["top"]) <= 2 for time, text in zip(times, texts, strict=True))
    expect(page.get_by_text("Scroll the table sideways for progress, tokens, cost and attempts.")).to_be_hidden()
    expect(page.get_by_role("columnheader", name="Message")).to_be_visible()
    assert not scrolls_sideways(page, ".tasks-box")


def test_the_plan_under_review_shows_each_subtasks_instructions_across_a_390_px_screen(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """At 390 px the plan review was a table scrolled sideways inside its box: each row showed the
    title, the agent and the upstreams, and the instructions a person is asked to read and edit
    lay out of view to the right. Each subtask now stacks, its instructions box the screen's width."""
    page = logged_in_page
    page.set_viewport_size(PHONE)
    plan = make_plan(
        {
            "scope": ("researcher", [], {"instructions": "Frame the question in one paragraph."}),
            "a": ("researcher", ["scope"]),
            "merge": ("writer", ["scope", "a"]),
        }
    )
    run = runs.launch(plan, require_plan_approval=True)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#plan-subtask-scope textarea")).to_have_value("Frame the question in one paragraph.")
    screenshot(page, "plan-review-390")
    for selector, count in ((".plan-table textarea", 3), (".plan-table button", 6)):  # Save and Remove
        shown = boxes(page, selector)
        assert len(shown) == count, (selector, shown)
        assert all(0 <= box["left"] and box["right"] <= PHONE["width"] for box in shown), (selector, shown)
    assert min(box["right"] - box["left"] for box in boxes(page, ".plan-table textarea")) > 200
    assert not scrolls_sideways(page, ".plan-review")
    after = page.locator("#plan-subtask-merge td").nth(2)  # its heading hidden, the cell says what it is
    assert after.evaluate("td => getComputedStyle(td, '::before').content") == '"After: "'
    expect(after).to_have_text("scope, a")


def test_the_runs_list_shows_each_runs_status_progress_and_cost_across_a_390_px_screen(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """At 390 px the runs list was a table scrolled sideways: a run's goal and half its status
    ("Awaiting appr") in view, its progress, elapsed time, cost and launcher off-screen."""
    page = logged_in_page
    page.set_viewport_size(PHONE)
    plan = make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])})
    waiting = runs.launch(plan, require_plan_approval=True)
    page.goto("/runs/")
    row = page.locator(f"#run-row-{waiting.pk}")
    expect(row.locator(".badge.status-awaiting_approval")).to_have_text("Awaiting approval")
    screenshot(page, "runs-390")
    for selector in (".badge", ".state-strip", "meter", "td"):
        shown = boxes(page, f"#run-row-{waiting.pk} {selector}")
        assert shown and all(0 <= box["left"] and box["right"] <= PHONE["width"] for box in shown), (selector, shown)
    assert not scrolls_sideways(page, "#runs-table .table-wrap")
    elapsed = row.locator("td").nth(4)  # its heading hidden, the cell says what it is
    assert elapsed.evaluate("td => getComputedStyle(td, '::before').content") == '"Elapsed: "'


def test_the_plans_list_shows_each_plans_goal_runs_and_last_run_across_a_390_px_screen(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """At 390 px the plans list was a table scrolled sideways: a plan's number and goal in view,
    its source, subtasks, runs and last run off-screen to the right. Each plan now stacks under
    its number, each number saying what it counts."""
    page = logged_in_page
    page.set_viewport_size(PHONE)
    plan = make_plan(
        {"scope": ("researcher", []), "write": ("writer", ["scope"])},
        goal="Choose a message queue for the billing service and explain the trade-offs to the team",
    )
    runs.launch(plan, require_plan_approval=True)
    page.goto("/plans/")
    row = page.locator(f"#plan-row-{plan.pk}")
    expect(row.get_by_role("link", name="Choose a message queue")).to_be_visible()
    screenshot(page, "plans-390")
    shown = boxes(page, f"#plan-row-{plan.pk} td")
    assert len(shown) == 6 and all(0 <= box["left"] and box["right"] <= PHONE["width"] for box in shown), shown
    assert not scrolls_sideways(page, "#plans-table-wrap")
    cells = row.locator("td")
    for n, label in ((3, "Subtasks: "), (4, "Runs: "), (5, "Last run: ")):  # headings hidden, cells say what they are
        assert cells.nth(n).evaluate("td => getComputedStyle(td, '::before').content") == f'"{label}"'
    expect(cells.nth(3)).to_have_text("2")
    expect(cells.nth(4)).to_have_text("1")
    expect(cells.nth(5)).to_contain_text("UTC")

    # At desktop width it is a table with its headings, on one line a plan.
    page.set_viewport_size({"width": 1400, "height": 900})
    expect(page.get_by_role("columnheader", name="Last run")).to_be_visible()
    tops = {box["top"] for box in boxes(page, f"#plan-row-{plan.pk} td")}
    assert len(tops) == 1, tops
    screenshot(page, "plans-1400")


def test_a_plans_runs_show_each_runs_status_cost_and_settings_across_a_390_px_screen(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    """At 390 px a plan's page listed its runs in a table scrolled sideways: a run's number, status
    and tasks in view, its duration, cost, estimate, settings and launch off-screen to the right."""
    page = logged_in_page
    page.set_viewport_size(PHONE)
    plan = make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}, goal="Pick a queue")
    run = runs.launch(plan, cap=2, budget_usd="1")
    page.goto(f"/plans/{plan.pk}/")
    row = page.locator(f"#plan-run-{run.pk}")
    expect(row.locator(".run-id")).to_be_visible()
    screenshot(page, "plan-runs-390")
    shown = boxes(page, f"#plan-run-{run.pk} td")
    assert len(shown) == 8 and all(0 <= box["left"] and box["right"] <= PHONE["width"] for box in shown), shown
    assert not scrolls_sideways(page, "#plan-runs-wrap")
    cells = row.locator("td")
    labels = ((3, "Duration: "), (4, "Cost: "), (5, "Estimate: "), (6, "Settings: "), (7, "Launched "))
    for n, label in labels:  # headings hidden, cells say what they are
        assert cells.nth(n).evaluate("td => getComputedStyle(td, '::before').content") == f'"{label}"'
    expect(cells.nth(6)).to_contain_text("cap 2")

    # At desktop width it is a table with its headings, on one line a run.
    page.set_viewport_size({"width": 1400, "height": 900})
    expect(page.get_by_role("columnheader", name="Settings")).to_be_visible()
    assert len({box["top"] for box in boxes(page, f"#plan-run-{run.pk} td")}) == 1


def test_the_preflights_team_shows_each_agents_cost_and_its_basis_across_a_390_px_screen(
    logged_in_page, demo_agents, priced_limit, screenshot
):
    """At 390 px the pre-flight's team was a table scrolled sideways: each agent's name, model and
    number of subtasks in view, its estimated cost and what the estimate rests on off-screen to the
    right, squeezed into rows 600 px tall of a word a line."""
    page = logged_in_page
    page.set_viewport_size(PHONE)
    page.goto("/runs/new/")
    page.get_by_label("Plan file", exact=True).set_input_files(str(ROOT / "examples" / "research_brief.yaml"))
    page.get_by_role("button", name="Check the plan").click()
    expect(page.get_by_role("heading", name="The team")).to_be_visible()
    team = page.locator("#preflight-team")
    team.scroll_into_view_if_needed()
    screenshot(page, "preflight-team-390")
    rows = team.locator("tbody tr")
    expect(rows).to_have_count(2)  # researcher, writer
    for selector in ("td", "td:nth-child(5)", "td:nth-child(6)"):
        shown = boxes(page, f"#preflight-team {selector}")
        assert shown and all(0 <= box["left"] and box["right"] <= PHONE["width"] for box in shown), (selector, shown)
    assert not scrolls_sideways(page, "#preflight-team")
    assert max(row.bounding_box()["height"] for row in rows.all()) < 300  # not a word a line
    cost = rows.first.locator("td").nth(4)  # its heading hidden, the cell says what it is
    assert cost.evaluate("td => getComputedStyle(td, '::before').content") == '"Estimated cost: "'
    expect(rows.first.locator("td").nth(5)).to_be_in_viewport()
