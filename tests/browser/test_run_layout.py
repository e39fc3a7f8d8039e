"""The run page's boxes in Chromium at 1280 px (and 390 px): what a panel shows stays inside it
and can be read whole. Measured from the elements' boxes, not by eye; screenshots in
test-artifacts/<test>/."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from unittest import mock

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import expect

from orchestrator import events
from orchestrator.engine import runs
from tests.browser.conftest import artifact_dir
from tests.browser.test_narrow import PHONE, overflow
from tests.browser.test_run_page import poll
from tests.finished_run import finish_run
from tests.large_run import cancelled_large_run, finished_large_run

pytestmark = [pytest.mark.browser]

DESKTOP = {"width": 1280, "height": 860}
LONG_NAME = "security_reviewer"


def part_shot(page, request, selector: str, name: str) -> None:
    """One part of the page alone, large enough to read (a full-page screenshot shrinks it)."""
    path = artifact_dir(request.node.name) / f"{name}.png"
    page.locator(selector).screenshot(path=str(path), caret="initial")


def open_page(page, url: str, viewport: dict) -> None:
    page.set_viewport_size(viewport)
    page.goto(url)
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def outside(box: dict, frame: dict) -> bool:
    """Whether `box` sticks out of `frame` on the left or the right (half a pixel of rounding)."""
    return box["x"] < frame["x"] - 0.5 or box["x"] + box["width"] > frame["x"] + frame["width"] + 0.5


def test_the_timelines_axis_labels_stay_inside_its_panel(logged_in_page, demo_agents, make_plan, screenshot):
    """A run of exactly 10 s has a tick at the very end of its timeline: its label "10 s" was
    written to the right of its line, past the panel's edge; now it stands left of its line."""
    page = logged_in_page
    plan = make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])})
    run = runs.launch(plan, budget_usd="1", require_plan_approval=True)
    now = timezone.now()
    finish_run(run, started=now - timedelta(seconds=10), finished=now, spacing_s=4, task_s=4)
    open_page(page, f"/runs/{run.pk}/", DESKTOP)
    ticks = page.locator("#run-gantt .gantt-tick")
    expect(ticks.last).to_have_text("10 s")
    screenshot(page, "timeline")
    # Measured in one pass of the page's script: a live frame may redraw the ticks between two
    # reads (a tick read one by one was once gone, its box None, by the time it was measured).
    timeline, axis, boxes = page.evaluate(
        """() => {
            const box = (el) => { const r = el.getBoundingClientRect(); return {x: r.x, width: r.width}; };
            const gantt = document.querySelector('#run-gantt');
            const ticks = [...gantt.querySelectorAll('.gantt-tick')];
            return [box(gantt), box(gantt.querySelector('.gantt-ticks')),
                    ticks.map((el) => ({...box(el), text: el.innerText}))];
        }"""
    )
    for tick in boxes:
        assert not outside(tick, timeline), f"the label {tick['text']!r} sticks out of the timeline"
    last = boxes[-1]
    assert last["text"] == "10 s"
    assert abs(last["x"] + last["width"] - (axis["x"] + axis["width"])) <= 1  # its line still marks the end

    open_page(page, f"/runs/{run.pk}/", PHONE)
    expect(ticks.last).to_have_text("10 s")
    assert page.locator("#run-gantt").evaluate("el => el.scrollWidth <= el.clientWidth")  # nothing to scroll to
    assert overflow(page) == []


def cut_names(page) -> list[str]:
    """The agents' names (task table, event log, timeline) drawn wider than their cell: cut, or
    covered by the next cell."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.tasks-grid .cell-agent, .event-row .actor, .gantt-lane .gantt-label')]
            .filter(el => el.scrollWidth > el.clientWidth + 1)
            .map(el => el.className + ': ' + el.textContent)"""
    )


def test_agents_names_are_read_whole_in_the_tables_and_the_timeline(
    logged_in_page, demo_agents, make_agent, make_plan, screenshot
):
    """The task table drew "researcher" as "researche" (its column narrower than the name, the
    state badge over the rest) and the event log its actor as "agent:w…"; now every name is whole
    in its cell, a long one wrapped, at 1280 px and at 390 px."""
    page = logged_in_page
    make_agent(LONG_NAME)
    plan = make_plan({"scope": ("researcher", []), "audit": (LONG_NAME, ["scope"]), "write": ("writer", ["audit"])})
    run = runs.launch(plan, budget_usd="1", require_plan_approval=True)
    now = timezone.now()
    finish_run(run, started=now - timedelta(seconds=20), finished=now)
    names = {"researcher", LONG_NAME, "writer"}

    for viewport in (DESKTOP, PHONE):
        open_page(page, f"/runs/{run.pk}/", viewport)
        expect(page.locator("#event-log-rows .event-row").first).to_be_visible()
        screenshot(page, f"names-{viewport['width']}")
        assert set(page.locator(".tasks-grid .cell-agent").all_inner_texts()) == names
        assert {text.replace("\n", "") for text in page.locator(".gantt-lane .gantt-label").all_inner_texts()} == names
        actors = {text.replace("\n", "") for text in page.locator(".event-row .actor").all_inner_texts()}
        assert {f"agent:{name}" for name in names} <= actors
        assert cut_names(page) == [], f"at {viewport['width']} px"
        assert overflow(page) == [], f"at {viewport['width']} px"


INSTRUCTIONS = (
    "Restate the goal as a measurable target (p95 of POST /api/checkout under the normal weekday "
    "traffic mix) and list what we already know: the request path\n"
    "(cart load, pricing, tax, inventory reservation, payment, order write, side effects),\n"
    "the dependencies it calls, and the dashboards available. Each probe that follows examines one "
    "suspected cause; give them a shared vocabulary for the steps of the request so that their "
    "results can be compared.\nUnder 250 words."
)


def test_the_plan_under_review_shows_each_subtasks_instructions_whole(
    logged_in_page, demo_agents, make_plan, screenshot
):
    """The instructions an approver may edit sat in a two-line box, most of them out of sight; now
    the box is as tall as its text (and grows as one types), up to a limit, then scrolls."""
    page = logged_in_page
    plan = make_plan(
        {
            "frame": ("researcher", [], {"instructions": INSTRUCTIONS}),
            "sprawl": ("researcher", ["frame"], {"instructions": "\n".join([INSTRUCTIONS] * 8)}),
        },
        goal="Find out why checkout is slow",
    )
    run = runs.launch(plan, budget_usd="1", require_plan_approval=True)
    open_page(page, f"/runs/{run.pk}/", DESKTOP)
    frame = page.get_by_label("Instructions of frame")
    expect(frame).to_have_value(INSTRUCTIONS)
    screenshot(page, "plan-review")

    def shown(box) -> dict:
        return box.evaluate("el => ({shown: el.clientHeight, text: el.scrollHeight})")

    whole = shown(frame)
    assert whole["text"] <= whole["shown"] + 1, f"part of the instructions is out of sight: {whole}"
    sprawl = shown(page.get_by_label("Instructions of sprawl"))
    assert sprawl["shown"] < sprawl["text"]  # a limit, then it scrolls
    assert sprawl["shown"] > whole["shown"] and sprawl["shown"] <= DESKTOP["height"] / 2

    frame.fill(INSTRUCTIONS + "\nName the owner of each step.\nSay which dashboards are missing.")
    grown = shown(frame)
    assert grown["shown"] > whole["shown"] and grown["text"] <= grown["shown"] + 1

    open_page(page, f"/runs/{run.pk}/", PHONE)
    whole = shown(page.get_by_label("Instructions of frame"))
    assert whole["text"] <= whole["shown"] + 1, f"at 390 px: {whole}"
    screenshot(page, "plan-review-phone")
    assert overflow(page) == []


def cut_event_cells(page) -> list[str]:
    """Event log cells not read whole: a task key clipped (or cut with an ellipsis), an event type
    broken over two lines or clipped."""
    return page.evaluate(
        """() => [...document.querySelectorAll('#event-log-rows .event-row')].flatMap(row => {
            const cut = [];
            const task = row.querySelector('.event-task');
            if (task && task.scrollWidth > task.clientWidth + 1) cut.push('task ' + task.textContent);
            const key = task && task.querySelector('code');
            if (key && key.scrollWidth > key.clientWidth + 1) cut.push('task ' + key.textContent);
            const type = row.querySelector('.event-type');
            const lines = new Set([...type.getClientRects()].map(r => Math.round(r.bottom))).size;
            if (lines > 1 || type.getBoundingClientRect().right > type.parentElement.getBoundingClientRect().right + 1)
                cut.push('type ' + type.textContent);
            return cut;
        })"""
    )


def test_the_event_logs_task_keys_and_event_types_are_read_whole(logged_in_page, browser_user, request):
    """At 1280 px the Task column cut "probe_11_19" short and the Type column broke "task.progress"
    as "task.prog|ress"; now a key wraps at its "_" (its whole key in its title) and a type is one line."""
    page = logged_in_page
    run = finished_large_run(launched_by=browser_user)
    probe = run.tasks.get(subtask__key="probe_11_19")
    with transaction.atomic():
        for event_type in ("task.retry_scheduled", "checkpoint.requested", "task.output_ready"):
            events.record(event_type, run=run, task=probe, actor_name="agent:researcher", payload={"progress": 40})

    for viewport in (DESKTOP, PHONE):
        open_page(page, f"/runs/{run.pk}/", viewport)
        expect(page.locator("#event-log-rows .event-row").first).to_be_visible()
        page.locator(".event-grid").scroll_into_view_if_needed()
        part_shot(page, request, "section:has(#log-title)", f"event-log-{viewport['width']}")
        keys = page.locator("#event-log-rows .event-task code")
        assert "probe_11_19" in [key.inner_text().replace("\n", "") for key in keys.all()]
        assert cut_event_cells(page) == [], f"at {viewport['width']} px"
        assert page.locator('#event-log-rows .event-task a[title="probe_11_19"]').count() == 3
        assert overflow(page) == [], f"at {viewport['width']} px"
    # At 1280 px the Time column's heading broke as "Time" / "(UTC)": one line, clear of "Type".
    open_page(page, f"/runs/{run.pk}/", DESKTOP)
    time_head, type_head = (page.get_by_role("columnheader", name=name, exact=True) for name in ("Time (UTC)", "Type"))
    line = float(time_head.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
    time_box, type_box = time_head.bounding_box(), type_head.bounding_box()
    assert time_box["height"] < 1.5 * line
    text_right = time_head.evaluate(
        "e => { const r = document.createRange(); r.selectNodeContents(e); return r.getBoundingClientRect().right; }"
    )
    assert text_right <= type_box["x"], (text_right, type_box)


def crowded_ticks(page) -> list[str]:
    """The timeline's axis labels that overlap another or stick out of the timeline, read at one
    moment (the axis is redrawn every second)."""
    return page.evaluate(
        """() => {
            const frame = document.getElementById('run-gantt').getBoundingClientRect();
            const ticks = [...document.querySelectorAll('#run-gantt .gantt-tick')];
            const boxes = ticks.map(t => t.getBoundingClientRect());
            const found = [];
            boxes.forEach((a, i) => {
                if (a.left < frame.left - 0.5 || a.right > frame.right + 0.5) found.push(ticks[i].textContent + ' outside');
                boxes.slice(i + 1).forEach((b, j) => {
                    if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
                        found.push(ticks[i].textContent + ' / ' + ticks[i + 1 + j].textContent);
                });
            });
            return found;
        }"""
    )


def bars_outside_their_lane(page) -> list[str]:
    """Timeline bars drawn past either end of their lane (px past it)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('#run-gantt .gantt-bars')].flatMap(lane => {
            const r = lane.getBoundingClientRect();
            return [...lane.querySelectorAll('.gantt-bar')].map(bar => [bar, bar.getBoundingClientRect()])
                .filter(([, b]) => b.right > r.right + 0.5 || b.left < r.left - 0.5)
                .map(([bar, b]) => bar.textContent + ' ' + Math.round(Math.max(b.right - r.right, r.left - b.left)));
        })"""
    )


def crowded_group_labels(page, margin_px: float = 4) -> list[str]:
    """The graph's groups whose label comes within `margin_px` of their box's border (or past it)."""
    return page.evaluate(
        """(margin) => window.glassboxRun.cy.nodes('.group:visible').map(n => {
            const body = n.renderedBoundingBox({includeLabels: false, includeOverlays: false});
            const label = n.renderedBoundingBox({includeNodes: false, includeEdges: false, includeLabels: true,
                                                 includeOverlays: false});
            const room = Math.min(label.x1 - body.x1, body.x2 - label.x2, label.y1 - body.y1, body.y2 - label.y2);
            return room < margin ? n.data('name') + ': ' + room.toFixed(1) + ' px' : null;
        }).filter(Boolean)""",
        margin_px,
    )


def test_a_cancelled_large_runs_timeline_and_graph_fit_their_panels_on_a_phone(
    logged_in_page, browser_user, request, screenshot
):
    """A 293-task run cancelled after 126 tasks, at 390 px: the timeline wrote "2 min 00 s" and
    "3 min 00 s" over each other, its cancelled bars ran past its right edge, and the graph's group
    labels touched their boxes' borders (2 px, or over them). Now the axis takes a longer step when
    its labels would not fit, a bar at the end of the axis ends there, and a group's box is as
    tall as its label needs at every zoom; the same at 1280 px."""
    page = logged_in_page
    run = cancelled_large_run(launched_by=browser_user)
    assert run.tasks.filter(state="cancelled").count() == 167

    for viewport in (PHONE, DESKTOP):
        open_page(page, f"/runs/{run.pk}/", viewport)
        poll(
            page,
            "() => !!window.glassboxRun && window.glassboxRun.cy.nodes('.group:visible').length > 0",
            what="the graph",
        )
        expect(page.locator("#run-gantt .gantt-tick").first).to_have_text("0 s")
        width = viewport["width"]
        screenshot(page, f"page-{width}")
        part_shot(page, request, "section:has(#gantt-title)", f"timeline-{width}")
        part_shot(page, request, ".dag-card", f"graph-{width}")
        assert page.locator("#run-gantt .gantt-tick").count() >= 2, f"at {width} px"
        assert crowded_ticks(page) == [], f"at {width} px"
        assert bars_outside_their_lane(page) == [], f"at {width} px"
        assert crowded_group_labels(page) == [], f"at {width} px"
        assert overflow(page) == [], f"at {width} px"


def pause_labels(page) -> list[dict]:
    """Each band on the timeline's "paused" row: its title, whether its label is shown, whether it
    is read whole (not clipped by its band), the label's left and right edges and the band's."""
    return page.evaluate(
        """() => [...document.querySelectorAll('#run-gantt .gantt-paused-row .gantt-pause')].map(band => {
            const label = band.querySelector('.gantt-pause-label');
            const l = label.getBoundingClientRect(), b = band.getBoundingClientRect();
            const clips = getComputedStyle(band).overflow !== 'visible';
            const seen = clips ? Math.min(l.right, b.right) - Math.max(l.left, b.left) : l.width;
            return {title: band.title, shown: label.checkVisibility(), whole: seen >= l.width - 0.5,
                    text: label.textContent, left: l.left, right: l.right, band: [b.left, b.right]};
        })"""
    )


def test_a_short_pauses_label_is_read_whole_or_left_to_its_title(logged_in_page, demo_agents, make_plan, request):
    """A 3 s pause in a 10 min run is a band a few pixels wide: its label read "pa", clipped by the
    band. Now a label too wide for its band stands beside it where nothing else is drawn, or is
    left out; the band's title says how long the run was paused."""
    page = logged_in_page
    plan = make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])})
    run = runs.launch(plan, budget_usd="1", require_plan_approval=True)
    now = timezone.now()
    finish_run(run, started=now - timedelta(minutes=10), finished=now, spacing_s=300, task_s=250)
    # A 3 s pause at 4 min, a 2 min one from 6 min, and a 2 s one that ends a second before the run.
    spans = [(now - timedelta(minutes=6), 3), (now - timedelta(minutes=4), 120), (now - timedelta(seconds=3), 2)]
    for paused_at, seconds in spans:
        for event_type, at in (("run.paused", paused_at), ("run.resumed", paused_at + timedelta(seconds=seconds))):
            with mock.patch.object(timezone, "now", return_value=at), transaction.atomic():
                events.record(event_type, run=run)  # written at `at` (events are append-only)

    for viewport in (DESKTOP, PHONE):
        open_page(page, f"/runs/{run.pk}/", viewport)
        page.locator("#run-gantt").scroll_into_view_if_needed()
        part_shot(page, request, "#run-gantt", f"timeline-pauses-{viewport['width']}")
        bands = pause_labels(page)
        assert [band["title"].split(":")[0] for band in bands] == [
            "Paused for 3.0 s",
            "Paused for 2 min 00 s",
            "Paused for 2.0 s",
        ]
        shown = [band for band in bands if band["shown"]]
        assert all(band["whole"] and band["text"] == "paused" for band in shown), f"at {viewport['width']} px: {bands}"
        edges = sorted((band["left"], band["right"]) for band in shown)
        assert all(a[1] <= b[0] for a, b in pairwise(edges)), f"labels overlap at {viewport['width']} px: {bands}"
        for band in shown:  # nor is a label drawn over another band
            others = [other["band"] for other in bands if other is not band]
            assert all(band["right"] <= left or right <= band["left"] for left, right in others), bands
        row = page.locator("#run-gantt .gantt-pauses").bounding_box()
        assert all(row["x"] - 0.5 <= band["left"] and band["right"] <= row["x"] + row["width"] + 0.5 for band in shown)
        assert bands[1]["shown"]  # the long pause is labelled inside its band
        if viewport is DESKTOP:
            assert bands[0]["shown"]  # room beside the short one at 1280 px
        assert overflow(page) == []


# The Tasks box: how far it scrolls down, where its last row ends and where the box ends.
TASKS_BOX = """() => {
    const box = document.querySelector('.tasks-box');
    const rows = box.querySelectorAll('#task-table .grid-row');
    return {
        hidden: box.scrollHeight - box.clientHeight,
        last: rows[rows.length - 1].getBoundingClientRect().bottom,
        bottom: box.getBoundingClientRect().bottom,
    };
}"""


def test_a_small_task_table_shows_its_last_task_and_a_long_one_says_it_scrolls(
    logged_in_page, demo_agents, make_plan, request
):
    """A 6-task run's table was a 430 px box that cut its final row off, with no scrollbar in sight;
    now a small table shows every row, and a long one scrolls in a box whose bottom edge says so."""
    page = logged_in_page
    titles = {  # examples/research_brief.yaml's
        "frame": "Frame the decision",
        "operations": "Operations and tooling",
        "performance": "Performance and concurrency",
        "durability": "Durability and recovery",
        "switching_cost": "Cost of switching and of switching back",
        "decision_brief": "Write the decision brief",
    }
    tasks = {
        key: ("researcher", ["frame"] if i else [], {"title": title}) for i, (key, title) in enumerate(titles.items())
    }
    small = runs.launch(make_plan(tasks, goal="Six tasks"), budget_usd="1", require_plan_approval=True)
    now = timezone.now()
    finish_run(small, started=now - timedelta(seconds=30), finished=now)
    for viewport in (DESKTOP, PHONE):
        open_page(page, f"/runs/{small.pk}/", viewport)
        expect(page.locator("#task-table .grid-row")).to_have_count(6)
        part_shot(page, request, "#tasks-title >> xpath=../..", f"six-tasks-{viewport['width']}")
        box = page.evaluate(TASKS_BOX)
        assert box["hidden"] <= 1, f"at {viewport['width']} px the box hides {box['hidden']} px of the table"
        assert box["last"] <= box["bottom"] + 0.5, f"at {viewport['width']} px the final task is cut: {box}"
        expect(page.locator(".table-scroll-cue")).to_have_count(0)

    many = {f"step_{i:02}": ("researcher", [f"step_{i - 1:02}"] if i else []) for i in range(20)}
    large = runs.launch(make_plan(many, goal="Twenty tasks"), budget_usd="1", require_plan_approval=True)
    for viewport in (DESKTOP, PHONE):
        open_page(page, f"/runs/{large.pk}/", viewport)
        cue = page.locator(".tasks-box .table-scroll-cue")
        expect(cue).to_have_text("20 tasks in all: scroll the table to see every one")
        part_shot(page, request, "#tasks-title >> xpath=../..", f"twenty-tasks-{viewport['width']}")
        box = page.evaluate(TASKS_BOX)
        assert box["hidden"] > 0, "a 20-task table scrolls in its box"
        cue_box, frame = cue.bounding_box(), page.locator(".tasks-box").bounding_box()
        assert abs(cue_box["y"] + cue_box["height"] - (frame["y"] + frame["height"])) <= 2, (
            "the cue is at the bottom edge"
        )
        assert not outside(cue_box, frame), f"at {viewport['width']} px the cue sticks out of its box"
