"""Every status a person reads stays true through each transition: pause, resume, cancel, reject,
fail, finish. After each one the run page (header, cards, task rows), the runs list and the
plan's page are read as a person reads them.

Nothing is enqueued (no workers): attempts are run in this process with conftest.run_attempt,
so every state comes from the engine's own transitions.
"""

from __future__ import annotations

import html as html_module
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from orchestrator.engine import runs
from orchestrator.models import Attempt, Run, TaskRun
from tests.conftest import fast_latency, run_attempt, run_here

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_broker")]

State = TaskRun.State


@pytest.fixture
def viewer(client, personas):
    client.force_login(personas["viewer"])
    return client


def text_of(html: str) -> str:
    """The page as words: tags dropped, whitespace folded (what a person reads)."""
    return html_module.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def run_page(client, run: Run) -> str:
    """The run page without its event log (the log is history: it rightly keeps what was said)."""
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return re.sub(r'<div id="event-log-rows".*?</div>\s*</div>\s*</div>', "", response.text, flags=re.S)


def runs_row(client, run: Run) -> str:
    html = client.get("/runs/").text
    row = re.search(rf'<tr id="run-row-{run.pk}">(.*?)</tr>', html, re.S)
    assert row, f"run {run.pk} is not in the runs list"
    return row.group(1)


def tasks_card(html: str) -> str:
    """The headline of the run page's Tasks card ("7 of 22 succeeded · 15 cancelled")."""
    match = re.search(r'<div class="stat-label">Tasks <span class="stat-inline">(.*?)</span>', html, re.S)
    assert match, "no Tasks card"
    return html_module.unescape(match.group(1))


def lane_feet(html: str) -> dict[str, str]:
    """Each agent lane's footer and idle line, as words, by agent name."""
    lanes = re.findall(r'<article class="lane[^"]*".*?</article>', html, re.S)
    found = {}
    for lane in lanes:
        name = re.search(r'class="lane-name[^"]*"[^>]*>(.*?)<', lane, re.S)
        found[text_of(name.group(1)).strip() if name else str(len(found))] = text_of(lane)
    return found


def strip_states(html: str) -> list[str]:
    """The states of a state strip's segments, left to right."""
    return re.findall(r'<rect class="state-([a-z_]+)"', html)


def eta_card(html: str) -> tuple[str, str]:
    """The ETA card's value and note, as words."""
    match = re.search(
        r'<div class="stat-value js-eta"[^>]*>(.*?)</div>\s*<div class="stat-note"[^>]*>(.*?)</div>', html, re.S
    )
    assert match, "no ETA card"
    return text_of(match.group(1)).strip(), text_of(match.group(2)).strip()


def task_row(html: str, task: TaskRun) -> str:
    match = re.search(rf'<div id="task-{task.pk}" .*?</div>\s*</div>', html, re.S)
    assert match, f"no row for task {task.pk}"
    return html_module.unescape(match.group(0))


@pytest.fixture
def wide_run(make_agent, make_plan, priced_limit):
    """Six independent tasks under a cap of 2: two are queued, four wait for a slot."""
    make_agent("researcher", provider_options=fast_latency(0.01), max_concurrency=6)
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(6)}, goal="Six probes")
    return runs.launch(plan, cap=2, budget_usd="1.00")


def test_while_running_waiting_tasks_say_the_run_cap_holds_them(viewer, wide_run):
    page = run_page(viewer, wide_run)
    waiting = wide_run.tasks.filter(state=State.READY)
    assert waiting.count() == 4
    for task in waiting:
        assert "run cap reached (2 queued or running)" in task_row(page, task)  # queued: no worker claimed them
    lane = lane_feet(page)["researcher"]
    assert "2 queued, waiting for a worker" in lane and "busy in other runs" not in lane
    assert "reserved in flight" in text_of(page)  # two attempts are queued: their worst case is held
    assert tasks_card(page) == "0 of 6 succeeded"
    # The cap holds queued attempts too: the peak is of those, not of what ran (nothing has yet).
    assert "0 running of 2" in text_of(page) and "peak so far: 2 queued or running at once" in text_of(page)


def test_pause_says_paused_not_run_cap_and_resume_brings_the_cap_back(viewer, wide_run):
    runs.pause(wide_run)
    page = run_page(viewer, wide_run)
    assert "run cap reached" not in page
    for task in wide_run.tasks.filter(state=State.READY):
        assert "run paused: starts when the run is resumed" in task_row(page, task)
    assert eta_card(page) == ("paused", "nothing new starts: no ETA until it resumes")  # no countdown
    assert re.search(r'class="stat-value js-eta" data-eta-at=""', page)
    assert tasks_card(page) == "0 of 6 succeeded"
    assert 'data-run-status="paused"' in page
    assert "Paused" in runs_row(viewer, wide_run)

    runs.resume(wide_run)
    page = run_page(viewer, wide_run)
    assert "run paused" not in page
    assert re.fullmatch(r"[\d.]+ ms|[\d.]+ s|past the estimate", eta_card(page)[0])  # the ETA is back
    assert re.search(r'class="stat-value js-eta" data-eta-at="\d+"', page)
    assert all(
        "run cap reached (2 queued or running)" in task_row(page, t) for t in wide_run.tasks.filter(state=State.READY)
    )


def concurrency_card(html: str) -> tuple[str, str]:
    """The Concurrency card's value and note, as words."""
    match = re.search(
        r'<div class="stat-label">Concurrency</div>\s*<div class="stat-value">(.*?)</div>\s*'
        r'<div class="stat-note"[^>]*>(.*?)</div>',
        html,
        re.S,
    )
    assert match, "no Concurrency card"
    return text_of(match.group(1)).strip(), text_of(match.group(2)).strip()


def test_a_paused_run_does_not_read_as_admitting_work_and_resuming_brings_the_cap_back(viewer, make_agent, make_plan):
    """Paused with nothing running, the card read "0 running of 2" and the idle lane "idle"."""
    make_agent("researcher", provider_options=fast_latency(0.01))
    make_agent("writer", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"])}), cap=2)
    runs.pause(run)
    run_attempt(Attempt.objects.get(task_run__subtask__key="a").pk)  # a finishes: nothing runs now
    page = run_page(viewer, run)
    assert concurrency_card(page) == (
        "0 running · paused",
        "paused: nothing new starts until it is resumed · run cap 2 · peak so far: 1 queued or running at once",
    )
    assert "running of" not in text_of(page)
    writer = lane_feet(page)["writer"]
    assert "paused: nothing new starts until the run is resumed" in writer and "idle" not in writer

    runs.resume(run)
    page = run_page(viewer, run)
    assert concurrency_card(page)[0] == "0 running of 2"  # b is admitted: a worker's to claim
    assert "paused" not in concurrency_card(page)[1]
    assert "paused" not in lane_feet(page)["writer"]


def test_a_paused_lane_still_counts_its_queued_work(viewer, wide_run):
    runs.pause(wide_run)
    lane = lane_feet(run_page(viewer, wide_run))["researcher"]
    assert "paused: nothing new starts until the run is resumed; 2 queued, waiting for a worker" in lane


def test_a_task_that_becomes_ready_while_paused_says_paused(viewer, make_agent, make_plan):
    make_agent("researcher", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}))
    runs.pause(run)
    run_attempt(Attempt.objects.get(task_run__subtask__key="a").pk)  # a finishes while paused
    b = run.tasks.get(subtask__key="b")
    assert (b.state, b.wait_code) == (State.READY, "run_paused")
    assert "run paused: starts when the run is resumed" in task_row(run_page(viewer, run), b)


def test_cancel_leaves_no_money_in_flight_no_wait_reasons_and_no_green_bar(viewer, wide_run):
    wide_run.refresh_from_db()
    assert wide_run.reserved_usd > 0
    runs.cancel(wide_run)
    wide_run.refresh_from_db()
    assert wide_run.reserved_usd == Decimal("0")
    assert not Attempt.objects.filter(task_run__run=wide_run, state=Attempt.State.QUEUED).exists()
    assert not Attempt.objects.filter(task_run__run=wide_run, reserved_usd__gt=0).exists()
    page = run_page(viewer, wide_run)  # a reload: nothing stale survives
    words = text_of(page)
    assert "reserved in flight" not in words
    assert "run cap reached" not in page and "run paused" not in page
    assert "No attempt ran: the run was cancelled before any started." in words  # its two were only queued
    assert 'data-run-status="cancelled"' in page
    totals = page[page.index('id="run-totals"') :]
    assert strip_states(totals)[:1] == ["cancelled"]
    row = runs_row(viewer, wide_run)
    assert "0 of 6 tasks succeeded" in text_of(row) and "6 cancelled" in text_of(row)
    assert strip_states(row) == ["cancelled"]  # grey, never a full green bar
    assert tasks_card(page) == "0 of 6 succeeded · 6 cancelled"  # never "6 of 6 done"
    (lane,) = lane_feet(page).values()
    assert "0 of 6 succeeded · 6 cancelled" in lane and "ended" in lane and "finished" not in lane
    # It read "0 running of 2", as if it still admitted work up to its cap.
    assert concurrency_card(page) == (
        "0 running · ended",
        "the run has ended: it holds no slot · run cap 2 · peak: 2 queued or running at once",
    )


def cost_and_tokens_notes(html: str) -> tuple[str, str]:
    """The notes under the Cost and the Tokens cards, as words."""
    cost = re.search(r'<div class="stat-label">Cost</div>.*?<div class="stat-note">(.*?)</div>', html, re.S)
    tokens = re.search(r'<div class="stat-label">Tokens</div>.*?<div class="stat-note">(.*?)</div>', html, re.S)
    assert cost and tokens, "no Cost or Tokens card"
    return text_of(cost.group(1)).strip(), text_of(tokens.group(1)).strip()


def test_a_cancelled_runs_totals_say_what_its_stopping_attempts_have_not_added_yet(
    viewer, make_agent, make_plan, priced_limit
):
    """Cancelled, the run read its cost and tokens as final while its running attempt was still
    to stop (at its next beat) and add what it used: "$0.0586" became "$0.0646" 5 s later."""
    from orchestrator.engine import attempt_ends, execution
    from orchestrator.providers.base import Usage

    make_agent("researcher", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", [])}), cap=1)
    claim = execution.claim_attempt(Attempt.objects.get(task_run__subtask__key="a").pk, "host:1")
    runs.cancel(run)
    cost, tokens = cost_and_tokens_notes(run_page(viewer, run))
    assert cost.endswith("used · 1 attempt still stopping: not counted yet")
    assert tokens == "0 in · 0 out · 1 attempt still stopping: not counted yet"

    attempt_ends.cancel_attempt(claim, Usage(input_tokens=120, output_tokens=40))  # its next beat
    page = run_page(viewer, run)
    cost, tokens = cost_and_tokens_notes(page)
    assert "stopping" not in cost + tokens and tokens == "120 in · 40 out"
    run.refresh_from_db()
    assert run.cost_usd > 0


def test_reject_says_the_run_never_started_not_that_it_waits(viewer, personas, make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}), require_plan_approval=True)
    page = run_page(viewer, run)
    assert "waits for the plan's approval" in text_of(page)
    assert "run cap 4" in text_of(page) and "peak" not in text_of(page)  # no peak before a start
    assert concurrency_card(page) == (
        "0 running · not started",
        "nothing starts until the plan is approved · run cap 4",
    )
    for task in run.tasks.all():
        assert (task.wait_code, task.wait_reason) == ("plan_approval", "waits for the plan's approval")
        assert "waits for the plan's approval" in task_row(page, task)

    runs.decide(run.checkpoints.get(), approve=False, user=personas["approver"], comment="wrong agents")
    page = run_page(viewer, run)
    words = text_of(page)
    assert "waits for the plan's approval" not in words
    assert "never started" in words and "plan rejected: wrong agents" in words
    assert eta_card(page) == ("—", "never started")  # not "ended"
    assert "No attempt ran: the plan was rejected." in words and "No attempt has started yet" not in words
    assert "it cost" not in words and "estimated $" not in words  # no price here: no estimate either
    assert not run.tasks.exclude(wait_code="").exists()
    row = text_of(runs_row(viewer, run))
    assert (
        "Plan rejected" in row and "Cancelled" not in row and "0 of 2 tasks succeeded" in row and "2 cancelled" in row
    )
    assert tasks_card(page) == "0 of 2 succeeded · 2 cancelled"
    assert 'data-run-status="cancelled">Plan rejected</span>' in page  # the header: its stored status unchanged
    assert concurrency_card(page) == ("0 running · ended", "the run has ended: it holds no slot · run cap 4")
    # Its lane said "ended" and the Result listed a's output to open, as if a had worked.
    (lane,) = lane_feet(page).values()
    assert "ended before any of its tasks ran" in lane
    assert "Every task's output" not in page and "1 other task never ran, so wrote no output." in words


def test_approving_the_plan_clears_what_the_tasks_waited_for(personas, make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}), require_plan_approval=True)
    runs.decide(run.checkpoints.get(), approve=True, user=personas["approver"])
    assert not run.tasks.filter(wait_code="plan_approval").exists()
    assert run.tasks.get(subtask__key="a").state == State.QUEUED


def test_a_failure_reads_as_a_failure_everywhere(viewer, make_agent, make_plan, priced_limit):
    make_agent("researcher", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=0)
    make_agent("writer", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"]), "c": ("writer", [])}))
    run_here(run)
    assert run.status == Run.Status.FAILED
    assert re.fullmatch(
        r"1 of 3 tasks failed: a — simulated failure after \d+ output tokens \(failure_rate=1\.0\), after 1 attempt; "
        r"1 skipped because an upstream task did not succeed",
        run.summary,
    ), run.summary
    assert "1 skipped because an upstream task did not succeed" in run.summary
    page = run_page(viewer, run)
    assert 'data-run-status="failed"' in page
    assert strip_states(page[page.index('id="run-totals"') :])[:3] == ["succeeded", "failed", "skipped"]
    assert "upstream a did not succeed" in task_row(page, run.tasks.get(subtask__key="b"))
    row = text_of(runs_row(viewer, run))
    assert "1 of 3 tasks succeeded" in row and "1 failed" in row and "1 skipped" in row
    assert "reserved in flight" not in text_of(page)
    assert tasks_card(page) == "1 of 3 succeeded · 1 failed, 1 skipped"
    assert concurrency_card(page)[0] == "0 running · ended"
    lanes = list(lane_feet(page).values())
    assert any("0 of 1 succeeded · 1 failed" in lane and "ended" in lane for lane in lanes)  # researcher
    assert any("1 of 2 succeeded · 1 skipped" in lane and "ended" in lane for lane in lanes)  # writer


@pytest.mark.parametrize(
    ("keys", "summary"), [(["a"], "the only task succeeded"), (["a", "b"], "all 2 tasks succeeded")]
)
def test_finish_counts_in_words(viewer, make_agent, make_plan, keys, summary):
    make_agent("researcher", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({key: ("researcher", []) for key in keys}))
    run_here(run)
    assert run.status == Run.Status.SUCCEEDED and run.summary == summary
    page = run_page(viewer, run)
    assert summary in page and "all 1 tasks" not in page
    row = text_of(runs_row(viewer, run))
    total = len(keys)
    assert f"{total} of {total} task{'s' if total > 1 else ''} succeeded" in row
    assert tasks_card(page) == f"{total} of {total} succeeded"
    assert concurrency_card(page)[0] == "0 running · ended"
    (lane,) = lane_feet(page).values()
    assert f"{total} of {total} succeeded" in lane and "finished" in lane
    assert strip_states(runs_row(viewer, run)) == ["succeeded"]


def test_a_budget_of_half_a_cent_is_not_called_zero(make_agent, make_plan, priced_limit):
    make_agent("researcher", max_output_tokens=1024)
    plan = make_plan({"a": ("researcher", [])})
    with pytest.raises(runs.LaunchRefused) as refused:
        runs.launch(plan, budget_usd="0.005")
    assert "over the budget of $0.0050" in str(refused.value)
    assert "$0.00 " not in str(refused.value) and "$0.0000" not in str(refused.value)


def test_the_eta_says_a_pending_decision_is_not_counted_until_it_is_taken(viewer, personas, make_agent, make_plan):
    make_agent("researcher", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("researcher", [])}))
    page = run_page(viewer, run)
    assert "1 decision pending: the wait for it is not counted" in text_of(page)
    assert eta_clock(page)[3] == "after the decision"
    runs.decide(run.checkpoints.get(), approve=True, user=personas["approver"])
    page = run_page(viewer, run)
    assert "decision pending" not in text_of(page)
    assert "at the cap and each agent's limit, excluding approvals" in text_of(page)
    assert eta_clock(page)[3] == "past the estimate"


# --- The ETA card through a decision's transitions ----------------------------------------------------


def eta_clock(html: str) -> tuple[str, str, bool, str]:
    """The ETA card as a person reads it and as clocks.js drives it: its value, its note, whether
    it counts down (data-eta-at set) and what it says once the countdown has run out (data-overdue)."""
    value, note = eta_card(html)
    tag = re.search(r'<div class="stat-value js-eta"[^>]*>', html)
    assert tag, "no ETA clock"
    eta_at = re.search(r'data-eta-at="(\d*)"', tag.group(0))
    overdue = re.search(r'data-overdue="([^"]*)"', tag.group(0))
    return value, note, bool(eta_at and eta_at.group(1)), overdue.group(1) if overdue else ""


AFTER_THE_DECISION = r"[\d.]+ (ms|s) after the decision"


@pytest.fixture
def gated_run(make_agent, make_plan, priced_limit) -> Run:
    """`a` waits at its gate for a person's approval; `b`, beside it, is queued and moves on its own."""
    make_agent("researcher", provider_options=fast_latency(0.01))
    return runs.launch(make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("researcher", [])}))


def only_the_gate_left(run: Run) -> Run:
    run_here(run)  # b ends; a still waits for its decision
    assert run.status == Run.Status.RUNNING and run.tasks.get(subtask__key="a").state == State.WAITING_GATE
    return run


def test_when_everything_left_waits_for_a_decision_the_eta_stops_and_says_so(viewer, gated_run):
    """It counted down the work after the decision while nothing could run, and a reload started
    the count again: "1.0 s", then "after the decision", then "1.0 s" again."""
    value, note, counts_down, _ = eta_clock(run_page(viewer, only_the_gate_left(gated_run)))
    assert re.fullmatch(AFTER_THE_DECISION, value) and not counts_down
    assert note == "1 decision pending: nothing runs until a person decides"


def test_a_run_whose_running_task_waits_for_a_tool_calls_approval_says_the_eta_waits_for_it(
    viewer, personas, make_agent, make_plan
):
    """Its ETA ticked down as if the task worked while a person had to approve its call."""
    from orchestrator.engine import execution, tool_approvals

    make_agent("researcher", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "host:1")
    asked = tool_approvals.Asked("c1", "write", "workspace", "write_file", {"path": "notes.md"})
    checkpoint = run.checkpoints.get(pk=tool_approvals.open_checkpoint(claim, asked))
    value, note, counts_down, _ = eta_clock(run_page(viewer, run))
    assert re.fullmatch(AFTER_THE_DECISION, value) and not counts_down
    assert note == "1 decision pending: nothing moves until a person decides"

    runs.decide(checkpoint, approve=True, user=personas["approver"])  # the call goes on
    value, note, counts_down, _ = eta_clock(run_page(viewer, run))
    assert counts_down and "decision" not in value + note


def test_a_run_paused_while_waiting_for_a_decision_says_paused(viewer, gated_run):
    runs.pause(only_the_gate_left(gated_run))
    value, note, counts_down, _ = eta_clock(run_page(viewer, gated_run))
    assert (value, note, counts_down) == ("paused", "nothing new starts: no ETA until it resumes", False)


def test_a_run_resumed_while_waiting_for_a_decision_says_after_the_decision_again(viewer, gated_run):
    runs.pause(only_the_gate_left(gated_run))
    runs.resume(gated_run)
    value, _, counts_down, _ = eta_clock(run_page(viewer, gated_run))
    assert re.fullmatch(AFTER_THE_DECISION, value) and not counts_down


def test_once_decided_the_eta_counts_down_again_to_past_the_estimate(viewer, personas, gated_run):
    runs.decide(only_the_gate_left(gated_run).checkpoints.get(), approve=True, user=personas["approver"])
    value, note, counts_down, overdue = eta_clock(run_page(viewer, gated_run))
    assert counts_down and overdue == "past the estimate" and "decision" not in value
    assert note == "at the cap and each agent's limit, excluding approvals"


def test_a_run_cancelled_while_waiting_for_a_decision_has_ended(viewer, gated_run):
    runs.cancel(only_the_gate_left(gated_run))
    value, _, counts_down, _ = eta_clock(run_page(viewer, gated_run))
    assert (value, counts_down) == ("ended", False)


def test_a_run_finished_after_its_decision_has_ended(viewer, personas, gated_run):
    runs.decide(only_the_gate_left(gated_run).checkpoints.get(), approve=True, user=personas["approver"])
    assert run_here(gated_run).status == Run.Status.SUCCEEDED
    value, _, counts_down, _ = eta_clock(run_page(viewer, gated_run))
    assert (value, counts_down) == ("ended", False)


def test_a_review_s_wait_is_not_counted_as_work_once_approved(viewer, personas, make_agent, make_plan, priced_limit):
    """The ETA jumped to 11 s once a review was approved, and the run ended 3 s later: the reviewed
    task's 30 s wait for its reviewer was read as work, five times its estimate (the most the pace
    allows), and every task left was forecast five times slower."""
    make_agent("researcher", provider_options=fast_latency(0.01))
    make_agent("writer", provider_options=fast_latency(2.0))
    run = runs.launch(make_plan({"a": ("researcher", [], {"gate": "after"}), "w": ("writer", ["a"])}))
    run_here(run)  # a ran; its output awaits review
    task = run.tasks.get(subtask__key="a")
    assert task.state == State.AWAITING_REVIEW
    # It worked as long as estimated, then waited 30 s for its reviewer.
    ran_from, ran_to = timezone.now() - timedelta(seconds=30.01), timezone.now() - timedelta(seconds=30)
    Attempt.objects.filter(task_run=task).update(started_at=ran_from, finished_at=ran_to)
    TaskRun.objects.filter(pk=task.pk).update(started_at=ran_from)
    runs.decide(run.checkpoints.get(), approve=True, user=personas["approver"])
    assert run.tasks.get(subtask__key="w").state == State.QUEUED
    value, _, counts_down, _ = eta_clock(run_page(viewer, run))
    assert (value, counts_down) == ("2.0 s", True)  # w's estimate: it said "10 s"


def test_the_budget_used_is_rounded_to_the_nearest_percent_and_never_zero_for_a_spend(viewer, wide_run):
    Run.objects.filter(pk=wide_run.pk).update(cost_usd=Decimal("0.0286"), budget_usd=Decimal("1.00"))
    words = text_of(run_page(viewer, wide_run))
    assert "3% used" in words and "2% used" not in words  # 2.86%
    Run.objects.filter(pk=wide_run.pk).update(cost_usd=Decimal("0.0001"))
    assert "<1% used" in text_of(run_page(viewer, wide_run))
    assert 'aria-label="&lt;1% of the budget spent"' in runs_row(viewer, wide_run)


def elapsed_card(html: str) -> tuple[str, str]:
    """The Elapsed card's value and note, as words."""
    match = re.search(
        r'<div class="stat-value js-elapsed"[^>]*>(.*?)</div>\s*<div class="stat-note">(.*?)</div>', html, re.S
    )
    assert match, "no Elapsed card"
    return text_of(match.group(1)).strip(), text_of(match.group(2)).strip()


def test_elapsed_says_how_much_of_it_the_run_spent_paused(viewer, stopped_clock, wide_run):
    """Elapsed is wall-clock time: after a ten-minute pause it read "11 min 00 s" with nothing to
    say that ten of them nothing could start."""
    wide_run.refresh_from_db()
    since = f"since {wide_run.started_at:%H:%M:%S} UTC"
    assert elapsed_card(run_page(viewer, wide_run)) == ("0.0 s", since)
    stopped_clock(60)
    runs.pause(wide_run)
    paused_at = Run.objects.get(pk=wide_run.pk).paused_at
    assert elapsed_card(run_page(viewer, wide_run)) == (
        "1 min 00 s",
        f"{since} · paused since {paused_at:%H:%M:%S} UTC",
    )
    stopped_clock(600)
    runs.resume(wide_run)
    assert elapsed_card(run_page(viewer, wide_run)) == ("11 min 00 s", f"{since} · 10 min 00 s of it paused")
    assert "11 min 00 s 10 min 00 s of it paused" in text_of(runs_row(viewer, wide_run))  # the runs list
    plan_row = re.search(r'<tr id="plan-run-\d+">.*?</tr>', viewer.get(f"/plans/{wide_run.plan_id}/").text, re.S)
    assert plan_row and "11 min 00 s 10 min 00 s of it paused" in text_of(plan_row.group(0))  # the plan's runs
    stopped_clock(120)
    runs.pause(wide_run)
    paused_again = Run.objects.get(pk=wide_run.pk).paused_at
    assert elapsed_card(run_page(viewer, wide_run)) == (
        "13 min 00 s",
        f"{since} · paused since {paused_again:%H:%M:%S} UTC · 10 min 00 s paused before that",
    )
    stopped_clock(30)
    runs.cancel(wide_run)  # the cancel ends the pause: the clock and the paused time stop together
    stopped_clock(300)
    assert elapsed_card(run_page(viewer, wide_run)) == ("13 min 30 s", f"{since} · 10 min 30 s of it paused")


def test_a_run_never_paused_says_only_since_when(viewer, make_agent, make_plan):
    make_agent("researcher", provider_options=fast_latency(0.01))
    run = run_here(runs.launch(make_plan({"a": ("researcher", [])})))
    assert run.status == Run.Status.SUCCEEDED
    assert elapsed_card(run_page(viewer, run))[1] == f"since {run.started_at:%H:%M:%S} UTC"


def task_row_whole(html: str, task: TaskRun) -> str:
    """A task's whole row (`task_row` stops at the end of its first cell with a line under it)."""
    whole = re.search(rf'<div id="task-{task.pk}" .*?<div role="cell">\d+</div></div>', html, re.S)
    assert whole, f"no row for task {task.pk}"
    return whole.group(0)


def row_figures(html: str, task: TaskRun) -> tuple[str, str, str, str]:
    """A task row's tokens, cost and attempts cells, and the last line under its state, as words."""
    row = task_row_whole(html, task)
    cells = re.search(
        r'class="cell-tokens">(.*?)</div><div role="cell">(.*?)</div><div role="cell">(.*?)</div>', row, re.S
    )
    assert cells, "no figures in the row"
    lines = re.findall(r'<div class="wait-reason[^"]*">(.*?)</div>', row, re.S)
    return (*(text_of(cell).strip() for cell in cells.groups()), text_of(lines[-1]).strip() if lines else "")


def test_a_rerun_task_shows_what_this_start_spends_and_says_what_came_before(
    viewer, make_agent, make_plan, priced_limit
):
    """After "Re-run from here" a task that started over showed its earlier attempt's tokens and
    cost as its own; the run's totals must keep them (the money was spent), the row must not."""
    from dashboard.formatting import format_tokens
    from orchestrator import wording
    from orchestrator.engine import reruns

    make_agent("researcher", provider_options=fast_latency(0.01))
    run = run_here(runs.launch(make_plan({"scope": ("researcher", []), "write": ("researcher", ["scope"])})))
    scope, write = run.tasks.get(subtask__key="scope"), run.tasks.get(subtask__key="write")
    first = {t.key: Attempt.objects.get(task_run=t, number=1) for t in (scope, write)}
    spent = run.cost_usd
    before = {
        key: f"before the re-run: 1 attempt, {format_tokens(a.input_tokens + a.output_tokens)} tokens, "
        f"{wording.usd(a.cost_usd)}"
        for key, a in first.items()
    }

    reruns.rerun_from(scope)
    page = run_page(viewer, run)
    assert row_figures(page, scope) == ("0", "$0.00", "2", before["scope"])  # attempt 2 is queued
    assert row_figures(page, write) == ("0", "$0.00", "1", before["write"])  # pending
    run.refresh_from_db()
    assert run.cost_usd == spent  # the run still counts what was spent
    assert f"{wording.usd(spent)} of" in text_of(page[page.index('id="run-totals"') :])
    panel = viewer.get(f"/runs/{run.pk}/tasks/{scope.pk}/", HTTP_HX_REQUEST="true").text
    assert (
        f"{before['scope'][0].upper()}{before['scope'][1:]}: counted in the run's totals, not in this start's "
        "tokens and cost." in text_of(panel)
    )

    run_here(run)  # both run again and succeed
    page = run_page(viewer, run)
    for task in (scope, write):
        again = Attempt.objects.get(task_run=task, number=2)
        assert row_figures(page, task) == (
            format_tokens(again.input_tokens + again.output_tokens),
            wording.usd(again.cost_usd),
            "2",
            before[task.key],
        )
    run.refresh_from_db()
    assert run.cost_usd == spent + sum(a.cost_usd for a in Attempt.objects.filter(task_run__run=run, number=2))
    lane = lane_feet(page)["researcher"]
    assert wording.usd(run.cost_usd) in lane  # the agent's lane counts every attempt it made


def test_elapsed_says_how_long_a_reopened_run_lay_ended(viewer, stopped_clock, make_agent, make_plan, priced_limit):
    """A retry a day after a run failed reopens it: its elapsed time ran on through that day."""
    make_agent("breaker", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=0)
    run = run_here(runs.launch(make_plan({"a": ("breaker", [])})))
    since = f"since {run.started_at:%H:%M:%S} UTC"
    assert elapsed_card(run_page(viewer, run)) == ("0.0 s", since)
    stopped_clock(2 * 3600)
    runs.retry_task(run.tasks.get())
    assert elapsed_card(run_page(viewer, run)) == (
        "2 h 00 min",
        f"{since} · 2 h 00 min of it ended, until it was reopened",
    )


def test_a_rerun_task_that_ends_otherwise_says_why_and_what_came_before(viewer, make_agent, make_plan, priced_limit):
    """Cancelled after a re-run, a task read "0 tokens, $0.00, 1 attempt" beside only the cancel's
    reason: its one attempt was of the start before, and the row did not say so."""
    from dashboard.formatting import format_tokens
    from orchestrator import wording
    from orchestrator.engine import reruns

    make_agent("researcher", provider_options=fast_latency(0.01))
    run = run_here(runs.launch(make_plan({"scope": ("researcher", []), "write": ("researcher", ["scope"])})))
    write = run.tasks.get(subtask__key="write")
    first = Attempt.objects.get(task_run=write, number=1)
    reruns.rerun_from(run.tasks.get(subtask__key="scope"))
    runs.cancel(run)
    tokens, cost, attempts, _ = row_figures(run_page(viewer, run), write)
    assert (tokens, cost, attempts) == ("0", "$0.00", "1")
    lines = re.findall(r'<div class="wait-reason">(.*?)</div>', task_row_whole(run_page(viewer, run), write))
    assert [html_module.unescape(line) for line in lines] == [
        "run cancelled",
        f"before the re-run: 1 attempt, {format_tokens(first.input_tokens + first.output_tokens)} tokens, "
        f"{wording.usd(first.cost_usd)}",
    ]


@pytest.mark.parametrize(
    ("tasks", "summary", "skipped"),
    [
        (  # a rejection alone read "0 of 3 tasks failed; 2 skipped because an upstream task did not succeed"
            {"a": ("researcher", [], {"gate": "before"}), "b": ("researcher", ["a"]), "c": ("researcher", [])},
            "a rejected at its gate; 1 skipped because an upstream task did not succeed",
            2,
        ),
        (  # beside a failure it read "… 3 skipped because an upstream task did not succeed"
            {
                "a": ("researcher", [], {"gate": "before"}),
                "b": ("researcher", ["a"]),
                "f": ("breaker", []),
                "g": ("researcher", ["f"]),
            },
            r"1 of 4 tasks failed: f — simulated failure .*, after 1 attempt; a rejected at its gate; "
            "2 skipped because an upstream task did not succeed",
            3,
        ),
    ],
)
def test_a_gate_rejected_by_a_person_is_not_called_an_upstream_that_did_not_succeed(
    viewer, personas, make_agent, make_plan, tasks, summary, skipped
):
    from orchestrator.models import Checkpoint

    make_agent("researcher", provider_options=fast_latency(0.01))
    make_agent("breaker", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=0)
    run = runs.launch(make_plan(tasks))
    runs.decide(Checkpoint.objects.get(run=run), approve=False, comment="not this week", user=personas["approver"])
    run = run_here(run)
    assert run.status == Run.Status.FAILED
    assert re.fullmatch(summary, run.summary), run.summary
    page = run_page(viewer, run)
    header = re.search(r'<p class="run-summary">(.*?)</p>', page, re.S)
    assert header and re.fullmatch(summary, html_module.unescape(header.group(1)))
    # Where its tasks are counted, "Failed" beside no failed task says why, in the summary's words:
    # the Tasks card and the runs list said "2 skipped" alone.
    assert f"{skipped} skipped (a rejected at its gate)" in tasks_card(page)
    row = runs_row(viewer, run)
    assert f"{skipped} skipped (a rejected at its gate)" in text_of(row)
    assert re.search(r'<span class="over">[^<]*rejected at its gate', row)  # bad news, as a failure is


@pytest.mark.parametrize(
    ("tasks", "summary"),
    [
        (  # it read "g rejected at its gate; 1 skipped because an upstream task did not succeed": s unsaid
            {
                "g": ("researcher", [], {"gate": "before"}),
                "h": ("researcher", ["g"]),
                "s": ("researcher", [], {"gate": "before"}),
            },
            "g rejected at its gate; 1 skipped by a person; 1 skipped because an upstream task did not succeed",
        ),
        (  # it read "1 of 3 tasks failed: f — …" beside a Tasks card saying "1 skipped"
            {"f": ("breaker", []), "s": ("researcher", [], {"gate": "before"}), "t": ("researcher", [])},
            r"1 of 3 tasks failed: f — simulated failure .*, after 1 attempt; 1 skipped by a person",
        ),
    ],
)
def test_a_failed_runs_summary_counts_the_tasks_a_person_skipped(
    viewer, personas, make_agent, make_plan, tasks, summary
):
    from orchestrator.models import Checkpoint

    make_agent("researcher", provider_options=fast_latency(0.01))
    make_agent("breaker", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=0)
    run = runs.launch(make_plan(tasks))
    runs.skip_task(run.tasks.get(subtask__key="s"), user=personas["approver"])
    for gate in Checkpoint.objects.filter(run=run, status=Checkpoint.Status.PENDING):
        runs.decide(gate, approve=False, comment="not this week", user=personas["approver"])
    run = run_here(run)
    assert run.status == Run.Status.FAILED
    assert re.fullmatch(summary, run.summary), run.summary
    page = run_page(viewer, run)
    header = re.search(r'<p class="run-summary">(.*?)</p>', page, re.S)
    assert header and re.fullmatch(summary, html_module.unescape(header.group(1)))
    skipped = re.search(r"(\d+) skipped", tasks_card(page))
    said = sum(int(n) for n in re.findall(r"(\d+) skipped", run.summary))
    said += len(re.findall(r"\w+ rejected at its gate", run.summary))
    assert skipped and int(skipped.group(1)) == said  # the header accounts for every skipped task


def run_below_a_failure(make_agent, make_plan, below: dict) -> Run:
    """A run still running (g waits at its gate) in which b failed: a -> b -> c, and the tasks
    `below` (make_plan's form; the agent "breaker" fails). Its breaker works again from now on."""
    from orchestrator.models import Agent

    make_agent("researcher", provider_options=fast_latency(0.01))
    make_agent("breaker", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=0)
    plan = {"a": ("researcher", []), "b": ("breaker", ["a"]), "c": ("researcher", ["b"]), **below}
    run = run_here(runs.launch(make_plan({**plan, "g": ("researcher", [], {"gate": "before"})})))
    assert run.status == Run.Status.RUNNING  # g waits at its gate
    Agent.objects.filter(name="breaker").update(provider_options=fast_latency(0.01))
    return run


@pytest.mark.parametrize("action", ["retry", "skip"])
def test_tasks_that_wait_again_in_a_running_run_stop_saying_skipped_on_the_live_page(
    personas, make_agent, make_plan, action
):
    """A retry (or a person's skip) of a failed task sends the tasks skipped below it back to
    waiting. In a run still running (a gate keeps it open) the live frame must redraw their rows
    (the DAG's nodes follow the rows) and the final task's entry in the Result: they said
    "skipped · upstream c did not succeed" until a reload, beside lanes saying "1 pending"."""
    from dashboard import fragments, frames
    from orchestrator import events
    from orchestrator.models import Event

    run = run_below_a_failure(make_agent, make_plan, {"d": ("researcher", ["c"])})
    b, c, d = (run.tasks.get(subtask__key=key) for key in "bcd")
    assert [t.state for t in (b, c, d)] == [State.FAILED, State.SKIPPED, State.SKIPPED]
    seen = events.latest_seq(run.pk)
    if action == "retry":
        runs.retry_task(b, user=personas["approver"])
    else:
        runs.skip_task(b, user=personas["approver"])
    assert run.tasks.get(pk=d.pk).state == State.PENDING

    batch = frames.render_batch(run.pk, seen, fragments.Viewer(can_control=True, can_decide=True))
    assert batch is not None
    for task in (c, d):
        row = text_of(task_row(batch.html, task))
        assert "skipped" not in row and "did not succeed" not in row, row
    final = re.search(rf'<article class="final-output" id="final-{d.pk}">.*?</article>', batch.html, re.S)
    assert final and "did not succeed" not in text_of(final.group(0))
    # The log says why each went back to waiting.
    why = "b retried" if action == "retry" else "b skipped by a person"
    said = dict(Event.objects.filter(run=run, seq__gt=seen, task_run=d).values_list("type", "message"))
    assert said.get("task.reset") == f"waits again: {why}", said


def panel_progress(client, run: Run, task: TaskRun) -> tuple[str, str | None]:
    """The task panel head's Progress figure, and its bar's value (None without a bar)."""
    html = client.get(f"/runs/{run.pk}/tasks/{task.pk}/", HTTP_HX_REQUEST="true").text
    head = re.search(rf'<header id="task-head-{task.pk}".*?</header>', html, re.S)
    assert head, f"no panel head for task {task.pk}"
    figure = re.search(r"<dd data-progress-text>(.*?)</dd>", head.group(0))
    bar = re.search(r'<progress [^>]*value="(\d+)"', head.group(0))
    assert figure
    return html_module.unescape(figure.group(1)), bar.group(1) if bar else None


def test_the_task_panel_gives_no_percentage_to_a_task_that_ended_without_success(viewer, make_agent, make_plan):
    """A skipped task's panel said "PROGRESS 5%", a rejected (failed) one "100%" beside a full bar,
    as if done: a task that ended otherwise shows "—" and no bar (run_status says the same); a
    succeeded one 100%, whatever its last streamed value was."""
    make_agent("writer")
    keys = ("ok", "failed", "skipped", "cancelled", "runs")
    run = runs.launch(make_plan({key: ("writer", []) for key in keys}))
    for key, state, progress in [
        ("ok", State.SUCCEEDED, 90),
        ("failed", State.FAILED, 100),
        ("skipped", State.SKIPPED, 5),
        ("cancelled", State.CANCELLED, 40),
        ("runs", State.RUNNING, 40),
    ]:
        run.tasks.filter(subtask__key=key).update(state=state, progress=progress, wait_code="", wait_reason="")
    shown = {key: panel_progress(viewer, run, run.tasks.get(subtask__key=key)) for key in keys}
    assert shown == {
        "ok": ("100%", "100"),
        "failed": ("—", None),
        "skipped": ("—", None),
        "cancelled": ("—", None),
        "runs": ("40%", "40"),
    }
    # The table's rows say the same: a bar (and a progress for the DAG's fill) only while under way;
    # the rejected (failed) task's row drew a full red bar beside a panel saying "—".
    page = run_page(viewer, run)
    rows = {key: task_row_whole(page, run.tasks.get(subtask__key=key)) for key in keys}
    bars = {key: re.search(r'<progress [^>]*value="(\d+)"', row) for key, row in rows.items()}
    assert {key: bar.group(1) if bar else None for key, bar in bars.items()} == {
        "ok": None,
        "failed": None,
        "skipped": None,
        "cancelled": None,
        "runs": "40",
    }
    assert [key for key, row in rows.items() if "data-progress=" in row] == ["runs"]


@pytest.mark.parametrize(("action", "key"), [("retry", "x"), ("skip", "x"), ("skip", "s")])
def test_a_task_below_another_failure_stays_skipped_when_a_person_retries_or_skips_one_upstream(
    personas, make_agent, make_plan, action, key
):
    """d is below two branches: b failed (so c, d and e were skipped) and x (or s, waiting at its
    gate). A retry or skip of x, or a skip of s, leaves d below a branch that still failed: d (and
    e below it) stays skipped, and the log says nothing about it. It said "waits again: s skipped
    by a person" then "upstream c did not succeed" in the same second, and d's row flipped. y, below
    x alone, does wait again."""
    from orchestrator import events
    from orchestrator.models import Event

    run = run_below_a_failure(
        make_agent,
        make_plan,
        {
            "x": ("breaker", []),
            "s": ("researcher", [], {"gate": "before"}),
            "d": ("researcher", ["c", "x", "s"]),
            "e": ("researcher", ["d"]),
            "y": ("researcher", ["x"]),
        },
    )
    tasks = {t.subtask.key: t for t in run.tasks.select_related("subtask")}
    assert {k: tasks[k].state for k in "bxcdey"} == {
        "b": State.FAILED,
        "x": State.FAILED,
        **dict.fromkeys("cdey", State.SKIPPED),
    }
    seen = events.latest_seq(run.pk)
    if action == "retry":
        runs.retry_task(tasks[key], user=personas["approver"])
    else:
        runs.skip_task(tasks[key], user=personas["approver"])

    for below in "de":
        task = run.tasks.get(pk=tasks[below].pk)
        assert task.state == State.SKIPPED and "did not succeed" in task.error, (below, task.state, task.error)
        said = list(Event.objects.filter(run=run, seq__gt=seen, task_run=task).values_list("type", "message"))
        assert said == [], (below, said)
    if key == "x":
        assert run.tasks.get(pk=tasks["y"].pk).state not in (State.SKIPPED, State.FAILED)
        why = "x retried" if action == "retry" else "x skipped by a person"
        said = dict(Event.objects.filter(run=run, seq__gt=seen, task_run=tasks["y"]).values_list("type", "message"))
        assert said.get("task.reset") == f"waits again: {why}", said


@pytest.mark.parametrize(
    ("decision", "heading"),
    [("reject", "Output of attempt 1, rejected in review"), ("skip", "Output of attempt 1, not approved in review")],
)
def test_an_output_its_review_did_not_approve_is_headed_as_such_not_as_a_partial_one(
    viewer, personas, make_agent, make_plan, decision, heading
):
    """A design whose review was rejected (then skipped), or skipped while in review: its output
    is whole but not a result. The panel and the downloads headed it "Partial output of attempt 1
    (succeeded)": neither partial nor a result."""
    from orchestrator.readmodels.run_export import below_heading, run_export, run_markdown

    make_agent("researcher", provider_options=fast_latency(0.01))
    run = runs.launch(
        make_plan(
            {
                "spec": ("researcher", []),
                "design": ("researcher", ["spec"], {"gate": "after"}),
                "build": ("researcher", ["design"]),
            }
        )
    )
    run_here(run)
    design = run.tasks.get(subtask__key="design")
    assert design.state == State.AWAITING_REVIEW
    if decision == "reject":
        runs.decide(design.checkpoints.get(), approve=False, user=personas["approver"], comment="too vague")
    runs.skip_task(design, user=personas["approver"])
    design.refresh_from_db()
    assert design.state == State.SKIPPED and design.output

    panel = text_of(viewer.get(f"/runs/{run.pk}/tasks/{design.pk}/", HTTP_HX_REQUEST="true").text)
    assert heading in panel and "Partial output" not in panel
    task = next(t for t in run_export(run)["tasks"] if t["key"] == "design")
    assert task["output"] is None
    assert task["partial_output"] == {
        "attempt": 1,
        "attempt_state": "succeeded",
        "heading": heading,
        "text": design.output,
    }
    text = below_heading(design.output.rstrip(), "###")  # its headings under the task's
    assert f"_{heading}: not a result._\n\n{text}\n" in run_markdown(run)


# --- What a tool call's wait holds up ------------------------------------------------------------


def tool_call_waiting(run: Run, key: str):
    """`key`'s running attempt asks to call workspace:write_file (as engine/tool_approvals opens it)."""
    from orchestrator.engine import execution, tool_approvals

    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run, task_run__subtask__key=key).pk, "host:1")
    asked = tool_approvals.Asked("c1", "write_file", "workspace", "write_file", {"path": "notes.md"})
    return run.checkpoints.get(pk=tool_approvals.open_checkpoint(claim, asked))


def tool_wait_note(html: str) -> str:
    found = re.search(r"\(task (.*?) waits; (.*?)\)", text_of(html))
    assert found, "no tool call waiting on the page"
    return found.group(2)


def test_a_tool_call_waiting_says_the_rest_of_the_run_goes_on_only_while_it_does(viewer, demo_agents, make_plan):
    """The card said "the rest of the run goes on" in a paused run, where nothing new starts."""
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", [])}))
    tool_call_waiting(run, "a")
    assert tool_wait_note(run_page(viewer, run)) == "the rest of the run goes on"
    runs.pause(run)
    assert tool_wait_note(run_page(viewer, run)) == "the run is paused: nothing new starts until it is resumed"
    runs.resume(run)
    assert tool_wait_note(run_page(viewer, run)) == "the rest of the run goes on"


def test_a_tool_call_that_everything_left_depends_on_says_what_waits_for_it(viewer, demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"]), "c": ("writer", ["b"])}))
    tool_call_waiting(run, "a")
    assert tool_wait_note(run_page(viewer, run)) == "2 tasks after it wait for it"


def test_the_last_task_s_tool_call_says_nothing_else_is_left(viewer, demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    tool_call_waiting(run, "a")
    assert tool_wait_note(run_page(viewer, run)) == "no other task of the run is left"


def test_a_task_whose_call_waits_for_approval_says_which_call_in_its_row_until_it_is_decided(
    viewer, personas, demo_agents, make_plan
):
    """Its row read "needs approval · step 1 · thinking": what its agent did before it asked."""
    from dashboard import fragments, frames

    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", [])}))
    checkpoint = tool_call_waiting(run, "a")
    task = run.tasks.get(subtask__key="a")
    assert "needs approval step 1 · waiting for approval of write_file" in text_of(
        task_row(run_page(viewer, run), task)
    )

    seen = Run.objects.get(pk=run.pk).last_event_seq
    runs.decide(checkpoint, approve=True, user=personas["approver"])
    batch = frames.render_batch(run.pk, seen, fragments.Viewer(can_control=False, can_decide=False), in_step=True)
    assert batch is not None
    row = text_of(task_row(batch.html, task))
    assert "running step 1 · thinking" in row and "approval" not in row
    assert text_of(task_row(run_page(viewer, run), task)) == row


def cost_card(html: str) -> str:
    """The Cost card's words."""
    card = re.search(
        r'<div class="stat[^"]*">\s*<div class="stat-label">Cost</div>(.*?)</div>\s*<div class="stat">', html, re.S
    )
    assert card, "no Cost card"
    return text_of(card.group(1))


def test_the_cost_card_says_which_models_have_no_price_and_how_many_tokens_it_leaves_out(
    viewer, make_agent, make_plan, priced_limit
):
    """A run whose agent's model had no price read "$0.00 of $10.00 · 0% used" after it used 1,212
    tokens: its spend is unknown, not zero, and the budget cannot stop those calls."""
    make_agent("researcher", model="sim-unpriced")
    make_agent("writer")  # sim-1, priced
    run = run_here(runs.launch(make_plan({"a": ("researcher", []), "w": ("writer", ["a"])}), budget_usd="10"))
    assert run.status == Run.Status.SUCCEEDED
    a = run.tasks.get(subtask__key="a")
    assert a.input_tokens + a.output_tokens > 0
    words = cost_card(run_page(viewer, run))
    assert (
        f"simulated:sim-unpriced has no price: its {a.input_tokens + a.output_tokens:,} tokens are not in the cost,"
        " and the budget cannot stop them (set prices in the admin under provider limits)"
    ) in words
    assert "sim-1" not in words  # the priced model's tokens are in the cost


def test_the_cost_card_of_a_run_on_priced_models_says_nothing_of_prices(viewer, make_agent, make_plan, priced_limit):
    make_agent("writer")
    run = run_here(runs.launch(make_plan({"w": ("writer", [])}), budget_usd="10"))
    assert run.input_tokens + run.output_tokens > 0
    words = cost_card(run_page(viewer, run))
    assert "used" in words and "no price" not in words


def test_a_run_stopped_over_budget_says_the_next_task_would_exceed_it_beside_the_budget_used(
    viewer, make_agent, make_plan, priced_limit
):
    """The header said "Over budget" beside a Cost card at "83% used", nothing saying why: the run
    stopped short of its budget because the next task's worst case would have passed it."""
    make_agent("researcher", max_output_tokens=100)
    plan = make_plan({f"t{i}": ("researcher", [], {"instructions": "Compare in depth. " * 450}) for i in range(6)})
    run = run_here(runs.launch(plan, budget_usd="0.02", cap=6))
    assert run.status == Run.Status.OVER_BUDGET and run.cost_usd < run.budget_usd
    card = cost_card(run_page(viewer, run))
    used = re.search(r"(\d+)% used", card)
    assert used and int(used.group(1)) < 100, card
    assert "stopped: the next task would exceed the budget" in card
    assert "then retry a cancelled task" in text_of(run_page(viewer, run))


# --- A retry's wait, and a tool call's approval, in their own words --------------------------------


def state_counts(html: str) -> list[str]:
    """The Tasks card's counts by state ("1 retrying", "1 running")."""
    counts = re.search(r'<ul class="state-counts">(.*?)</ul>', html, re.S)
    assert counts, "no counts on the Tasks card"
    return [text_of(item).strip() for item in re.findall(r"<li>(.*?)</li>", counts.group(1), re.S)]


def test_a_task_waiting_for_its_retry_is_retrying_not_held_back(viewer, demo_agents, make_plan):
    """Tasks waiting for a retry read "3 held back" beside "0 running of 4", the words of tasks a
    cap or an agent's limits hold; the row said "retrying from 17:57:16 UTC"."""
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", [])}))
    run.tasks.filter(subtask__key="a").update(
        state=State.READY, wait_code="retry_backoff", wait_reason="retrying from 17:57:16 UTC after: boom"
    )
    run.tasks.filter(subtask__key="b").update(
        state=State.READY, wait_code="run_cap", wait_reason="run cap reached (1 queued or running)"
    )
    html = run_page(viewer, run)
    assert state_counts(html) == ["1 held back", "1 retrying"]
    a, b = (run.tasks.get(subtask__key=key) for key in "ab")
    assert 'data-state="retrying"' in task_row_whole(html, a) and ">retrying</span>" in task_row_whole(html, a)
    assert 'data-state="waiting"' in task_row_whole(html, b)
    assert '<li data-state="retrying"><span class="dot state-retrying"></span>retrying</li>' in html  # the legend


def test_a_task_whose_tool_call_waits_for_approval_is_drawn_needing_approval(viewer, demo_agents, make_plan):
    """Its graph node (which reads its row's data-state) was drawn running, in blue."""
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", [])}))
    tool_call_waiting(run, "a")
    html = run_page(viewer, run)
    row = task_row_whole(html, run.tasks.get(subtask__key="a"))
    assert 'data-state="waiting_gate"' in row and ">needs approval</span>" in row
    assert "1 needs approval" in state_counts(html)
    assert concurrency_card(html)[0].startswith("1 running of 4")  # it keeps its slot while it waits
