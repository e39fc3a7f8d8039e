"""The agent's path in the glass box (issue 12, points 3 and 6): the task panel's steps per
attempt and their live rows, the DAG node's activity, the attempt's page with whole results, the
run's artifacts and their download, the audit export, and nothing secret or unescaped on the page."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard import fragments, frames
from orchestrator import events
from orchestrator.engine import dispatch, runs
from orchestrator.engine.agent_loop import LoopHooks, run_agent_loop
from orchestrator.engine.agent_steps import Decision
from orchestrator.governance.audit_export import iter_export
from orchestrator.models import Attempt, Checkpoint, Event, TaskRun
from orchestrator.readmodels import run_export
from orchestrator.readmodels.steps import NO_STEPS_ENDED, NO_STEPS_KEPT
from orchestrator.tools import sessions, workspace
from orchestrator.tools.toolbox import Toolbox
from tests.orchestrator.engine.test_agent_loop import FakeTools, ScriptedProvider, answer, request, tool_turn
from tests.orchestrator.readmodels.conftest import start
from tests.orchestrator.tools.conftest import grant_of, server_spec
from tests.scripted_agent_path import loop_steps, record_loop, record_step

pytestmark = pytest.mark.django_db

XSS = '<script>alert("x")</script><img src=x onerror="alert(1)">'
VIEWER = fragments.Viewer(can_control=False, can_decide=False)


@pytest.fixture
def run(make_plan, demo_agents, priced_limit, monkeypatch, artifacts_dir):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    return runs.launch(make_plan({"look": ("researcher", []), "write": ("writer", ["look"])}), budget_usd="5")


@pytest.fixture
def viewer(client, personas):
    client.force_login(personas["viewer"])
    return client


def look(run) -> TaskRun:
    return run.tasks.get(subtask__key="look")


def panel(client, run, task) -> str:
    response = client.get(reverse("run_task", args=[run.pk, task.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return response.content.decode()


async def lookup(text: str = "", limit: int = 10) -> str:
    return f"found: {text}"


async def broken(text: str = "") -> str:
    raise RuntimeError("the index is down")


def a_path(task, **options) -> None:
    """Step 1: text, an approved lookup, a refused rm, a failing call; step 2: the answer."""
    tools = FakeTools(lookup=(lookup, True), broken=(broken, False))
    provider = ScriptedProvider(
        tool_turn(("lookup", {"text": "sqlite wal", "limit": 3}), ("rm", {"path": "/"}), ("broken", {})),
        answer("WAL it is."),
    )
    record_loop(task, provider, tools, decisions=[Decision(True, "looks safe", "alice")], **options)


# --- The task panel's path ----------------------------------------------------------------------


def test_the_panel_shows_the_path_text_calls_approvals_results_refusals_and_stops(viewer, run):
    task = look(run)
    a_path(task)
    html = panel(viewer, run, task)
    assert f'id="task-path-{task.pk}"' in html
    assert "Let me check." in html and "WAL it is." in html
    assert "srv:lookup" in html
    assert "&quot;limit&quot;: 3,\n  &quot;text&quot;: &quot;sqlite wal&quot;" in html  # pretty-printed arguments
    assert re.search(r"Approved by <strong>alice</strong> after [\d.]+ s: “looks safe”", html)
    assert "found: sqlite wal" in html and re.search(r"answered in [\d.]+ s", html)
    refused = re.search(r'<li id="path-\d+" class="path-row path-refused is-error".*?</li>', html, re.S)
    assert refused and "rm" in refused.group(0) and "not granted" in refused.group(0)
    failed = re.search(r'<li id="path-\d+" class="path-row path-call is-error".*?</li>', html, re.S)
    assert failed and "the index is down" in failed.group(0) and 'class="path-result is-error"' in failed.group(0)
    assert "asked for tools" in html and "ended its turn" in html  # each model call's stop reason


class StartedTools(FakeTools):
    """Tools whose server took 2.5 s to start before a call of 0.4 s, as the toolbox measures them."""

    async def call(self, name, arguments, *, timeout_s=None):
        result = await super().call(name, arguments, timeout_s=timeout_s)
        return dataclasses.replace(result, duration_s=0.4, server_start_s=2.5)


def test_a_calls_duration_is_its_own_with_its_servers_start_up_apart_everywhere(viewer, run):
    """Panel, attempt page, audit log, JSON and Markdown downloads say the same: the call's own
    0.4 s, not the 2.9 s its server's start-up made of it."""
    task = look(run)
    record_loop(
        task, ScriptedProvider(tool_turn(("lookup", {"text": "x"})), answer("ok")), StartedTools(lookup=(lookup, False))
    )
    said = "answered in 0.4 s · server started in 2.5 s"
    row = re.search(r'<li id="path-\d+" class="path-row path-call".*?</li>', panel(viewer, run, task), re.S)
    assert row and said in row.group(0)
    page = viewer.get(reverse("run_attempt", args=[run.pk, task.pk, 1])).content.decode()
    assert said in page
    result = task.events.get(type="tool.result")
    assert result.message.startswith(f"step 1 · lookup {said}: found: x")
    assert (result.payload["duration_s"], result.payload["server_start_s"]) == (0.4, 2.5)
    exported = viewer.get(reverse("run_download_json", args=[run.pk])).json()
    call = next(step for step in exported["paths"]["look"] if step["kind"] == "call")
    assert (call["duration_s"], call["server_start_s"]) == (0.4, 2.5)
    markdown = viewer.get(reverse("run_download_md", args=[run.pk])).content.decode()
    assert f"→ result: `found: x` ({said})" in markdown


def test_an_attempt_page_says_its_timeout_does_not_count_the_wait_for_approval(viewer, run):
    """It said "took 1 min 17 s" and "timeout 1 min 00 s", as if the timeout had passed: the 45 s
    the agent waited for a person's decision are not counted, and it now says so beside it."""
    task = look(run)
    provider = ScriptedProvider(tool_turn(("lookup", {"text": "wal"})), answer("ok"))
    steps = loop_steps(provider, FakeTools(lookup=(lookup, True)), decisions=[Decision(True, "", "alice")])
    for step in steps:
        record_step(task, dataclasses.replace(step, duration_s=45.0) if step.kind == "approval" else step)
    ended = timezone.now()
    Attempt.objects.filter(task_run=task).update(
        state=Attempt.State.SUCCEEDED,
        started_at=ended - timedelta(seconds=77),
        finished_at=ended,
        request={"provider": "simulated", "model": "sim-1", "max_tokens": 1024, "timeout_s": 60, "prompt": "p"},
    )
    page = words(viewer.get(reverse("run_attempt", args=[run.pk, task.pk, 1])).content.decode())
    assert "took 1 min 17 s" in page
    assert "timeout 1 min 00 s, not counting 45 s waiting for approval" in page


def test_a_rejected_call_reads_as_rejected_and_not_run_not_as_a_failure(viewer, run):
    task = look(run)
    provider = ScriptedProvider(tool_turn(("lookup", {"text": "x"})), answer("Fine, without it."))
    record_loop(task, provider, FakeTools(lookup=(lookup, True)), decisions=[Decision(False, "not today.", "bob")])
    row = re.search(r'<li id="path-\d+" class="path-row path-call is-error".*?</li>', panel(viewer, run, task), re.S)
    assert row, "the rejected call's row"
    words = re.sub(r"\s+", " ", row.group(0))
    assert "rejected: not run" in words and "failed" not in words
    assert "Rejected by <strong>bob</strong>" in words
    assert "A person rejected this call of lookup: not today. It was not run." in words  # what the model read


def test_a_retried_task_shows_each_attempts_path_the_latest_open(viewer, run):
    task = look(run)
    record_loop(task, ScriptedProvider(answer("First try.")), FakeTools(), attempt=1)
    Attempt.objects.create(task_run=task, number=2)
    TaskRun.objects.filter(pk=task.pk).update(attempt_count=2)
    record_loop(task, ScriptedProvider(answer("Second try.")), FakeTools(), attempt=2)
    html = panel(viewer, run, task)
    first = re.search(rf'<details id="path-attempt-{task.pk}-1" class="path-attempt">.*?</details>', html, re.S)
    second = re.search(rf'<details id="path-attempt-{task.pk}-2" class="path-attempt" open>.*?</details>', html, re.S)
    assert first and "First try." in first.group(0) and "Second try." not in first.group(0)
    assert second and "Second try." in second.group(0)


def test_a_task_without_steps_says_so(viewer, run):
    assert "No steps yet." in panel(viewer, run, run.tasks.get(subtask__key="write"))  # pending: no attempt
    queued = panel(viewer, run, look(run))
    assert f'id="path-attempt-{look(run).pk}-1"' in queued and "No step recorded yet." in queued


def words(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def end_task(task: TaskRun, state: str, attempts: int, attempt_state: str, output: str = "", error: str = "") -> None:
    """`task` ended in `state` after `attempts` attempts, each of them ended in `attempt_state`."""
    for number in range(2, attempts + 1):
        Attempt.objects.get_or_create(task_run=task, number=number)
    Attempt.objects.filter(task_run=task).update(state=attempt_state, worker="host:1")
    TaskRun.objects.filter(pk=task.pk).update(state=state, attempt_count=attempts, output=output, error=error)


def test_a_failed_tasks_panel_says_its_text_is_a_failed_attempts_and_that_no_step_will_come(viewer, run):
    """The panel of a failed task headed the partial text of its last failed attempt "Output", as if
    it were its result, and its path ended "No step recorded yet." although the task was over."""
    task = look(run)
    end_task(task, TaskRun.State.FAILED, 3, Attempt.State.FAILED, "The first half of a sent", "simulated failure")
    Attempt.objects.filter(task_run=task).update(output_tokens=6)  # each wrote its text
    html = panel(viewer, run, task)
    assert "<h3>Partial output of attempt 3 (failed)" in html and "<h3>Output" not in html
    assert "The first half of a sent" in html
    # The output above is attempt 3's: the earlier two say where theirs went, none of them "yet", and
    # none "an agent without tools" (the agent may hold tools: a call cut off part-way records no
    # step either way).
    cut = "No steps were recorded: the attempt ended (failed) during its first model call"
    assert words(html).count(f"{cut} (its text is the output above).") == 1
    assert words(html).count(f"{cut} (its text was not kept).") == 2
    assert NO_STEPS_ENDED not in words(html) and " yet" not in words(html)
    # The result's list of every task's output says the same of it.
    shown = viewer.get(reverse("run_task_output", args=[run.pk, task.pk])).content.decode()
    assert words(shown).startswith("Partial output of attempt 3 (failed): The first half of a sent")


def test_an_earlier_attempts_path_points_to_its_own_text_not_the_output_above(viewer, run):
    """Each attempt of a task without tools said "its text is the output above", where the output
    above is the latest attempt's: an earlier one's text is kept with it after a re-run, or gone."""
    task = look(run)
    end_task(task, TaskRun.State.SUCCEEDED, 3, Attempt.State.SUCCEEDED, "The third answer")
    Attempt.objects.filter(task_run=task).update(output_tokens=6)
    Attempt.objects.filter(task_run=task, number=1).update(state=Attempt.State.FAILED)
    Attempt.objects.filter(task_run=task, number=2).update(output="The second answer")  # kept by a re-run
    paths = re.findall(r'<details id="path-attempt-[^"]*".*?</details>', panel(viewer, run, task), re.S)
    failed_first = (
        "No steps were recorded: the attempt ended (failed) during its first model call (its text was not kept)."
    )
    said = [words(path).split(" whole results ")[1] for path in paths]
    assert said == [failed_first, NO_STEPS_KEPT, NO_STEPS_ENDED]
    # After a re-run the task holds no output: its latest attempt's text is kept with it, not above.
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.PENDING, output="")
    Attempt.objects.filter(task_run=task, number=3).update(output="The third answer")
    assert NO_STEPS_ENDED not in words(panel(viewer, run, task))


def test_a_cancelled_tasks_partial_text_is_named_as_its_cancelled_attempts(viewer, run):
    task = look(run)
    end_task(task, TaskRun.State.CANCELLED, 1, Attempt.State.CANCELLED, "Streamed until the cancel", "run cancelled")
    Attempt.objects.filter(task_run=task).update(output_tokens=4)
    html = panel(viewer, run, task)
    assert "<h3>Partial output of attempt 1 (cancelled)" in html
    cut = "No steps were recorded: the attempt ended (cancelled) during its first model call"
    assert f"{cut} (its text is the output above)." in words(html)
    assert " yet" not in words(html)


def result_section(client, run) -> str:
    html = client.get(reverse("run_detail", args=[run.pk])).content.decode()
    return words(html.split('id="run-result"')[1].split("</section>")[0])


def test_the_results_final_task_shows_its_partial_text_as_the_downloads_head_it(viewer, run):
    """The Result said "No output: simulated failure after 130 output tokens" of a final task whose
    downloads gave the text its failed attempt wrote, headed "Partial output of attempt 1 (failed)"."""
    task = run.tasks.get(subtask__key="write")
    Attempt.objects.create(task_run=task, number=1)
    end_task(task, TaskRun.State.FAILED, 1, Attempt.State.FAILED, "Half a report", "simulated failure after 130")
    result = result_section(viewer, run)
    heading = "Partial output of attempt 1 (failed): the text it wrote before it ended, not a result."
    assert "No output" not in result
    assert f"{heading} The task ended: simulated failure after 130 Half a report" in result
    assert f"_{heading}_" in run_export.run_markdown(run)  # the download heads it alike


def test_a_final_task_that_wrote_nothing_says_it_has_no_output(viewer, run):
    task = run.tasks.get(subtask__key="write")
    end_task(task, TaskRun.State.CANCELLED, 1, Attempt.State.CANCELLED, "", "run stopped")
    assert "No output: run stopped" in result_section(viewer, run)


def test_a_succeeded_attempt_without_steps_is_a_plain_agents_one_call(viewer, run):
    task = look(run)
    end_task(task, TaskRun.State.SUCCEEDED, 1, Attempt.State.SUCCEEDED, "The answer")
    Attempt.objects.filter(task_run=task).update(output_tokens=2)
    assert NO_STEPS_ENDED in words(panel(viewer, run, task))


def test_an_attempt_that_ended_before_its_model_wrote_anything_does_not_point_to_an_output(viewer, run):
    """A call that hung until the timeout left no text: its path said "its text is the output
    above" right under "No output."."""
    task = look(run)
    end_task(task, TaskRun.State.FAILED, 1, Attempt.State.TIMED_OUT, error="timed out after 5 s")
    text = words(panel(viewer, run, task))
    assert "No output." in text
    assert "No steps were recorded: the attempt ended (timed out) before its model wrote anything." in text
    assert NO_STEPS_ENDED not in text


def test_a_lost_attempts_text_is_shown_with_it_as_kept_not_applied(viewer, run):
    """A lost attempt's text went nowhere: the row said a late result "was kept" and showed none."""
    task = look(run)
    end_task(task, TaskRun.State.READY, 1, Attempt.State.LOST)
    Attempt.objects.filter(task_run=task).update(late_result_discarded=True, output="Written after the lease ran out")
    text = words(panel(viewer, run, task))
    assert "What this attempt wrote (kept, not applied: it had lost its lease) Written after the lease ran out" in text
    assert "kept when its task started again" not in text


def test_a_skipped_task_that_never_started_says_nothing_will_come(viewer, run):
    end_task(look(run), TaskRun.State.FAILED, 1, Attempt.State.FAILED, error="simulated failure")
    write = run.tasks.get(subtask__key="write")
    TaskRun.objects.filter(pk=write.pk).update(state=TaskRun.State.SKIPPED, error="upstream look did not succeed")
    text = words(panel(viewer, run, write))
    assert "No output." in text
    assert "No steps: this task ran no agent step." in text
    assert "No attempt: this task never started." in text
    assert "Failed: no summary passed on." in text  # its upstream's, which failed
    assert " yet" not in text


def test_a_long_result_is_cut_in_the_panel_and_whole_on_the_attempts_page(viewer, run):
    task = look(run)

    async def long(text: str = "") -> str:
        return "".join(f"row {i:04d}\n" for i in range(900))

    record_loop(task, ScriptedProvider(tool_turn(("long", {})), answer("ok")), FakeTools(long=(long, False)))
    html = panel(viewer, run, task)
    assert "row 0000" in html and "row 0899" not in html
    link = re.search(r'<a href="([^"]+)#(path-\d+)">Whole result</a>', html)
    assert link and link.group(1) == reverse("run_attempt", args=[run.pk, task.pk, 1])
    page = viewer.get(link.group(1)).content.decode()
    assert "row 0000" in page and "row 0899" in page and f'id="{link.group(2)}"' in page
    assert "Whole result</a>" not in page  # the page shows it, no link to itself


def test_the_attempts_page_is_for_viewers_of_the_run_only(client, personas, run):
    task = look(run)
    a_path(task)
    url = reverse("run_attempt", args=[run.pk, task.pk, 1])
    assert client.get(url).status_code == 302  # to the login
    client.force_login(personas["outsider"])
    assert client.get(url).status_code == 403
    client.force_login(personas["viewer"])
    assert client.get(url).status_code == 200
    assert client.get(reverse("run_attempt", args=[run.pk, task.pk, 7])).status_code == 404
    folder = client.get(reverse("run_task_attempts", args=[run.pk, task.pk]))
    assert folder.status_code == 302 and folder["Location"].endswith(f"?task={task.pk}")


def attempt_page(client, run, task, number: int) -> str:
    response = client.get(reverse("run_attempt", args=[run.pk, task.pk, number]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_cancelled_plain_agents_attempt_page_shows_its_text_and_its_cut_off_call(viewer, run):
    """An agent without tools answers in one model call and records no step: its cancelled
    attempt's page said "0 model calls" and "No step recorded for this attempt." under a header of
    "361 in / 69 out · $0.0021", and showed none of the text the run page showed for it."""
    task = look(run)
    end_task(task, TaskRun.State.CANCELLED, 1, Attempt.State.CANCELLED, "Streamed until the cancel", "run cancelled")
    Attempt.objects.filter(task_run=task).update(input_tokens=361, output_tokens=69, cost_usd="0.0021")
    text = words(attempt_page(viewer, run, task, 1))
    assert "361 in / 69 out · $0.0021" in text
    assert "Partial output of attempt 1 (cancelled) Streamed until the cancel" in text  # as the panel heads it
    assert "Path 1 model call, cut off when the attempt ended (cancelled) · 0 tool calls" in text
    assert "Model call · 361 in / 69 out · cut off when the attempt ended (cancelled)" in text
    assert "0 model calls" not in text and "No step recorded" not in text


def test_an_attempts_page_shows_the_text_kept_on_it_and_the_latest_its_tasks_output(viewer, run):
    task = look(run)
    end_task(task, TaskRun.State.SUCCEEDED, 2, Attempt.State.SUCCEEDED, "The second answer")
    Attempt.objects.filter(task_run=task, number=1).update(state=Attempt.State.FAILED, output="Half of a first")
    Attempt.objects.filter(task_run=task, number=2).update(input_tokens=300, output_tokens=40)
    first = words(attempt_page(viewer, run, task, 1))
    assert "Partial output of attempt 1 (failed) kept when its task started again Half of a first" in first
    assert "The second answer" not in first
    assert "No step recorded for this attempt." in first and "0 model calls · 0 tool calls" in first  # no tokens
    second = words(attempt_page(viewer, run, task, 2))
    assert "Output The second answer" in second and "Half of a first" not in second
    assert "Path 1 model call · 0 tool calls" in second and "cut off" not in second  # its one call, answered


def test_an_attempts_page_without_output_says_why_there_is_none(viewer, run):
    """An earlier attempt whose text was kept nowhere showed no Output card at all: a reader could
    not tell an attempt that wrote nothing from one whose text is gone, or from a broken page."""
    task = look(run)
    end_task(task, TaskRun.State.SUCCEEDED, 3, Attempt.State.FAILED, "The third answer")
    Attempt.objects.filter(task_run=task, number=2).update(output_tokens=12)  # cleared when attempt 3 started
    Attempt.objects.filter(task_run=task, number=3).update(state=Attempt.State.SUCCEEDED, output_tokens=6)
    first = words(attempt_page(viewer, run, task, 1))
    assert "Output This attempt wrote no output: it ended (failed) before its model wrote anything." in first
    second = words(attempt_page(viewer, run, task, 2))
    assert "Output No output of this attempt was kept." in second
    assert "The third answer" not in first + second
    third = words(attempt_page(viewer, run, task, 3))
    assert "Output The third answer" in third and "no output" not in third.lower()


def test_a_lost_or_running_attempts_page_does_not_say_it_wrote_nothing(viewer, run):
    """A lost attempt never reports its tokens: no count proves that it wrote nothing."""
    task = look(run)
    end_task(task, TaskRun.State.READY, 1, Attempt.State.LOST)
    text = words(attempt_page(viewer, run, task, 1))
    assert "Output No output of this attempt was kept." in text and "wrote no output" not in text
    Attempt.objects.filter(task_run=task).update(state=Attempt.State.RUNNING)
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.RUNNING)
    assert "Output No output yet." in words(attempt_page(viewer, run, task, 1))


def test_an_attempts_times_say_utc_as_the_run_pages_other_times(viewer, run):
    """The attempts table and the attempt's page gave "10:31:07" where every other time of the run
    page says "10:31:07 UTC"."""
    task = look(run)
    started = datetime(2026, 11, 28, 10, 31, 7, tzinfo=UTC)
    Attempt.objects.filter(task_run=task, number=1).update(
        state=Attempt.State.SUCCEEDED, worker="host:1", started_at=started, finished_at=started + timedelta(seconds=2)
    )
    Attempt.objects.create(task_run=task, number=2)  # queued
    Attempt.objects.filter(task_run=task, number=2).update(queued_at=started + timedelta(minutes=1))
    text = words(panel(viewer, run, task))
    assert "succeeded host:1 10:31:07 UTC 2.0 s" in text
    assert "queued 10:32:07 UTC" in text
    assert "started 10:31:07 UTC · took 2.0 s" in words(attempt_page(viewer, run, task, 1))


def test_a_tool_agents_call_cut_off_by_the_cancel_is_counted_on_its_attempts_page(viewer, run):
    task = look(run)
    provider = ScriptedProvider(tool_turn(("lookup", {"text": "x"})), answer("Found it."))
    record_loop(task, provider, FakeTools(lookup=(lookup, False)))
    recorded = [event.payload for event in Event.objects.filter(task_run=task, type="agent.model_call")]
    end_task(task, TaskRun.State.CANCELLED, 1, Attempt.State.CANCELLED, "", "run cancelled")
    Attempt.objects.filter(task_run=task).update(  # and a third call, cut off by the cancel
        input_tokens=sum(call["input_tokens"] for call in recorded) + 500,
        output_tokens=sum(call["output_tokens"] for call in recorded) + 12,
    )
    text = words(attempt_page(viewer, run, task, 1))
    assert "3 model calls, the last cut off when the attempt ended (cancelled) · 1 tool call" in text
    assert "Model call · 500 in / 12 out · cut off when the attempt ended (cancelled)" in text


# --- Live: rows, not the whole panel ------------------------------------------------------------


def test_step_events_send_the_panel_head_and_their_rows_not_the_whole_panel(run):
    task = look(run)
    start(task)
    steps = loop_steps(
        ScriptedProvider(tool_turn(("lookup", {"text": "q"})), answer("Done.")),
        FakeTools(lookup=(lookup, False)),
    )
    record_step(task, steps[0])  # the first step of the attempt: the attempt is sent whole
    after_first = events.latest_seq(run.pk)
    first = frames.render_batch(run.pk, after_first - 1, VIEWER, task.pk)
    assert (
        f'id="path-attempt-{task.pk}-1"' in first.html and f'data-upsert="#task-path-{task.pk}-attempts"' in first.html
    )
    for step in steps[1:3]:  # model call, tool call
        record_step(task, step)
    call_seq = events.latest_seq(run.pk)
    batch = frames.render_batch(run.pk, after_first, VIEWER, task.pk)
    assert f'id="task-head-{task.pk}"' in batch.html
    assert f'id="task-output-{task.pk}"' not in batch.html and f'id="task-attempts-{task.pk}"' not in batch.html
    assert f'id="path-attempt-{task.pk}-1"' not in batch.html
    call_row = f'<li id="path-{call_seq}" class="path-row path-call is-open"'
    assert call_row in batch.html and f'data-upsert="#path-attempt-{task.pk}-1-rows"' in batch.html
    assert "calling…" in batch.html and "step 1 · calling lookup" in batch.html  # the head says it too
    record_step(task, steps[3])  # its result: the same row again, complete
    result = frames.render_batch(run.pk, call_seq, VIEWER, task.pk)
    assert f'<li id="path-{call_seq}" class="path-row path-call"' in result.html and "found: q" in result.html


def test_a_task_event_sends_the_whole_panel_with_its_path(run):
    task = look(run)
    a_path(task)
    before = events.latest_seq(run.pk)
    events.record("task.started", task=task, payload={"attempt": 1})
    batch = frames.render_batch(run.pk, before, VIEWER, task.pk)
    assert f'id="task-attempts-{task.pk}"' in batch.html and f'id="task-path-{task.pk}"' in batch.html


def test_the_dag_node_reads_the_activity_from_the_task_row_while_it_runs(run):
    task = look(run)
    start(task)
    before = events.latest_seq(run.pk) or 0
    events.record("tool.call", task=task, payload={"step": 3, "call_id": "c", "tool": "lookup", "attempt": 1})
    batch = frames.render_batch(run.pk, before, VIEWER)
    row = re.search(rf'<div id="task-{task.pk}" [^>]*>', batch.html).group(0)
    assert 'data-activity="step 3 · calling lookup"' in row
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.SUCCEEDED)
    done = events.latest_seq(run.pk)
    events.record("task.succeeded", task=task)
    row = re.search(rf'<div id="task-{task.pk}" [^>]*>', frames.render_batch(run.pk, done, VIEWER).html).group(0)
    assert "data-activity" not in row


def test_a_call_held_by_the_providers_budget_is_a_row_while_it_waits_and_after(viewer, run):
    """Live: the row appears open when the wait starts and is sent again, closed, when it ends;
    the node's activity says what holds the call meanwhile. The panel and the download keep it."""
    task = look(run)
    start(task)
    before = events.latest_seq(run.pk) or 0
    hold = {"step": 2, "wait": "rate_limit_requests", "attempt": 1}
    events.record("agent.rate_wait", task=task, payload=hold)
    wait_seq = events.latest_seq(run.pk)
    batch = frames.render_batch(run.pk, before, VIEWER, task.pk)
    row = re.search(rf'<li id="path-{wait_seq}" class="path-row path-wait is-open".*?</li>', batch.html, re.S)
    assert row and "waiting for the provider&#x27;s request budget…" in row.group(0)
    node = re.search(rf'<div id="task-{task.pk}" [^>]*>', batch.html).group(0)
    assert 'data-activity="step 2 · waiting for the provider&#x27;s request budget"' in node
    events.record("agent.rate_waited", task=task, payload={**hold, "duration_s": 12.04})
    ended = frames.render_batch(run.pk, wait_seq, VIEWER, task.pk)
    row = re.search(rf'<li id="path-{wait_seq}" class="path-row path-wait".*?</li>', ended.html, re.S)
    assert row and "Waited 12 s for the provider&#x27;s request budget" in row.group(0)
    assert "Waited 12 s for the provider&#x27;s request budget" in panel(viewer, run, task)
    assert "- Step 2, model call held by the provider's request budget (12.0 s)" in run_export.run_markdown(run)


def test_a_wait_its_lost_attempt_never_ended_reads_as_over(viewer, run):
    task = look(run)
    attempt = start(task)
    events.record("agent.rate_wait", task=task, payload={"step": 2, "wait": "provider_backoff", "attempt": 1})
    assert "waiting for the provider&#x27;s backoff…" in panel(viewer, run, task)
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.LOST)
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.READY)
    html = panel(viewer, run, task)
    assert "Waited for the provider&#x27;s backoff until the attempt ended" in html and "backoff…" not in html


@pytest.mark.parametrize("ending", [Attempt.State.CANCELLED, Attempt.State.LOST])
def test_a_call_its_attempts_end_cut_off_is_not_said_to_be_calling(viewer, run, ending):
    """The run was cancelled, or the worker was lost, while a tool ran: no result was ever
    recorded. Once the attempt has ended, neither the panel nor the download says it still runs."""
    task = look(run)
    attempt = start(task)
    call = {"step": 1, "call_id": "c1", "tool": "lookup", "arguments": {"text": "wal"}, "attempt": 1}
    events.record("tool.call", task=task, payload=call)
    asked = {**call, "call_id": "c2", "tool": "deploy", "approval_required": True}
    events.record("tool.call", task=task, payload=asked)
    html = panel(viewer, run, task)
    assert "calling…" in html and "waiting for approval" in html  # true while the attempt runs
    Attempt.objects.filter(pk=attempt.pk).update(state=ending)
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.READY)
    html = panel(viewer, run, task)
    assert "calling…" not in html and "waiting for approval" not in html and "is-open" not in html
    assert html.count("cut off: the attempt ended") == 1  # lookup ran: what it did is unknown
    assert html.count("not run: the attempt ended before anyone decided") == 1  # deploy never ran
    markdown = run_export.run_markdown(run)
    assert '- Step 1, called `lookup` `{"text": "wal"}`, cut off: the attempt ended with no result' in markdown
    assert "awaiting approval" not in markdown
    assert 'called `deploy` `{"text": "wal"}`, not decided, not run: the attempt ended first' in markdown
    exported = run_export.run_export(run)["paths"]["look"]
    assert [(step["tool"], step["cut_off"]) for step in exported] == [("lookup", True), ("deploy", True)]


# --- Artifacts ----------------------------------------------------------------------------------


def write_artifact(run, name: str, content: bytes) -> None:
    path = workspace.run_directory(run.pk) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def test_the_page_lists_the_runs_files_with_sizes_and_links(viewer, run):
    page = viewer.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert 'id="run-artifacts"' in page and "No files yet" in page
    write_artifact(run, "report.md", b"# Report\n" * 100)
    write_artifact(run, "notes/a b.txt", b"x")
    page = viewer.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert f'href="/runs/{run.pk}/artifacts/report.md" download' in page and "900\xa0bytes" in page
    assert f'href="/runs/{run.pk}/artifacts/notes/a%20b.txt"' in page


def test_an_ended_run_without_files_says_it_wrote_none_not_none_yet(viewer, run):
    """An ended run said "No files yet", as if more could come."""
    runs.cancel(run, actor_name="cli:alice")
    page = words(viewer.get(reverse("run_detail", args=[run.pk])).content.decode())
    assert "Artifacts files the agents left in the run's workspace This run wrote no files." in page
    assert "No files yet" not in page


def test_a_workspace_of_many_files_lists_the_first_and_counts_the_rest(viewer, run, monkeypatch):
    monkeypatch.setattr(fragments, "ARTIFACTS_LISTED", 3)
    for i in range(5):
        write_artifact(run, f"f{i}.txt", b"x")
    page = viewer.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "f2.txt" in page and "f3.txt" not in page and "And 2 more files, not listed here." in page


def test_a_file_is_downloaded_whole(viewer, run):
    write_artifact(run, "notes/a b.txt", b"hello \x00 bytes")
    response = viewer.get(reverse("run_artifact", args=[run.pk, "notes/a b.txt"]))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"hello \x00 bytes"
    assert response["Content-Disposition"].startswith("attachment;") and "a b.txt" in response["Content-Disposition"]


@pytest.mark.parametrize(
    "name",
    ["../secret.txt", "notes/../../secret.txt", "%2e%2e/secret.txt", "/etc/passwd", "//etc/passwd", ".hidden", "nope"],
)
def test_nothing_outside_the_runs_directory_is_served(viewer, run, artifacts_dir, name):
    write_artifact(run, "notes/ok.txt", b"ok")
    write_artifact(run, ".hidden", b"hidden")
    (artifacts_dir / "secret.txt").write_bytes(b"secret")
    response = viewer.get(f"/runs/{run.pk}/artifacts/{name}")
    assert response.status_code == 404 and b"secret" not in response.content


def test_a_symbolic_link_out_of_the_directory_is_not_followed(viewer, run, artifacts_dir, tmp_path):
    (tmp_path / "outside.txt").write_bytes(b"outside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.txt").write_bytes(b"outside")
    root = workspace.run_directory(run.pk)
    os.symlink(tmp_path / "outside.txt", root / "link.txt")
    os.symlink(tmp_path / "outside", root / "dir")
    for name in ("link.txt", "dir/f.txt"):
        assert viewer.get(reverse("run_artifact", args=[run.pk, name])).status_code == 404


def test_another_runs_file_is_not_served_through_this_run(viewer, run, make_plan):
    other = runs.launch(make_plan({"x": ("researcher", [])}), budget_usd="5")
    write_artifact(other, "theirs.txt", b"theirs")
    assert viewer.get(reverse("run_artifact", args=[run.pk, "theirs.txt"])).status_code == 404
    assert viewer.get(reverse("run_artifact", args=[other.pk, "theirs.txt"])).status_code == 200


def test_downloading_needs_the_permission_to_view_the_run(client, personas, run):
    write_artifact(run, "report.md", b"r")
    url = reverse("run_artifact", args=[run.pk, "report.md"])
    assert client.get(url).status_code == 302
    client.force_login(personas["outsider"])
    assert client.get(url).status_code == 403
    assert Event.objects.filter(type="access.denied").exists()


def test_the_artifacts_are_sent_again_after_a_tool_result_and_when_the_run_ends(run, personas):
    task = look(run)
    before = events.latest_seq(run.pk)
    write_artifact(run, "figures.csv", b"a,b\n")
    record_loop(
        task, ScriptedProvider(tool_turn(("lookup", {"text": "x"})), answer("ok")), FakeTools(lookup=(lookup, False))
    )
    batch = frames.render_batch(run.pk, before, VIEWER)
    assert (
        'id="run-artifacts" class="card artifacts" aria-labelledby="artifacts-title" hx-swap-oob="true"' in batch.html
    )
    assert "figures.csv" in batch.html
    before = events.latest_seq(run.pk)
    runs.cancel(run, user=personas["launcher"])
    assert 'id="run-artifacts"' in frames.render_batch(run.pk, before, VIEWER).html
    before = events.latest_seq(run.pk)
    events.record("task.progress", task=task, payload={"progress": 5})
    assert 'id="run-artifacts"' not in frames.render_batch(run.pk, before, VIEWER).html


# --- The audit export ---------------------------------------------------------------------------


def test_the_audit_export_has_the_tool_calls_and_results_with_their_payloads(run):
    task = look(run)
    a_path(task)
    lines = [json.loads(line) for line in iter_export(Event.objects.filter(run=run).order_by("seq"), "jsonl")]
    by_type = {}
    for line in lines:
        by_type.setdefault(line["type"], []).append(line)
    call = next(c for c in by_type["tool.call"] if c["payload"]["tool"] == "lookup")
    assert call["payload"]["arguments"] == {"text": "sqlite wal", "limit": 3} and call["payload"]["attempt"] == 1
    assert call["actor"] == "agent:researcher" and call["task"] == "look"
    result = next(r for r in by_type["tool.result"] if r["payload"]["tool"] == "lookup")
    assert result["payload"]["result"] == "found: sqlite wal" and "duration_s" in result["payload"]
    assert by_type["tool.approval"][0]["payload"]["decided_by"] == "alice"
    assert by_type["tool.refused"][0]["payload"]["tool"] == "rm"
    assert {"agent.text", "agent.model_call"} <= set(by_type)
    csv = "".join(iter_export(Event.objects.filter(run=run, type="tool.call"), "csv"))
    assert "sqlite wal" in csv


# --- Nothing unescaped, nothing secret ----------------------------------------------------------


def test_a_steps_payload_is_rendered_escaped_everywhere(viewer, run):
    task = look(run)
    start(task)
    payload = {"step": 1, "call_id": XSS, "tool": XSS, "server": XSS, "server_tool": XSS, "attempt": 1}
    events.record("agent.text", task=task, payload={"step": 1, "text": XSS, "attempt": 1})
    events.record("tool.call", task=task, payload={**payload, "arguments": {XSS: XSS}, "approval_required": True})
    events.record("tool.approval", task=task, payload={**payload, "approved": False, "comment": XSS, "decided_by": XSS})
    events.record(
        "tool.result", task=task, payload={**payload, "result": XSS * 200, "result_chars": 20000, "error": True}
    )
    events.record("tool.refused", task=task, payload={**payload, "arguments": [XSS], "text": XSS})
    events.record("agent.stopped", task=task, payload={"step": 2, "text": XSS, "stop_reason": XSS, "attempt": 1})
    pages = [
        panel(viewer, run, task),
        viewer.get(reverse("run_detail", args=[run.pk]) + f"?task={task.pk}").content.decode(),
        viewer.get(reverse("run_attempt", args=[run.pk, task.pk, 1])).content.decode(),
        frames.render_batch(run.pk, 0, VIEWER, task.pk).html,
    ]
    for html in pages:
        assert "<script>alert" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html


def test_a_servers_secret_never_reaches_the_page(viewer, run, tmp_path):
    """A real MCP round trip: the server repeats its declared environment; the toolbox masks the
    secret value before the step exists, so no event, page, panel, export or kept file has it."""
    secret = "declared-token-value-7f3a"
    spec = server_spec(SERVICE_TOKEN=secret)
    tools = asyncio.run(sessions.discover(spec))
    task = look(run)

    async def steps_of():
        async with Toolbox([grant_of(spec, tools)], cwd=tmp_path) as box:
            provider = ScriptedProvider(
                tool_turn(("environment", {}), ("big", {"chars": 5000}), ("leak_and_die", {})), answer("ok")
            )
            found = []

            async def on_step(step):
                found.append(step)

            async def on_usage(usage):
                pass

            await run_agent_loop(provider, request(), box, LoopHooks(on_step=on_step, on_usage=on_usage), max_steps=3)
            return found

    for step in asyncio.run(steps_of()):
        record_step(task, step)
    environment = next(e for e in task.events.filter(type="tool.result") if e.payload["tool"] == "environment")
    assert "SERVICE_TOKEN" in environment.payload["result"]  # the server did repeat it, masked
    pages = [
        panel(viewer, run, task),
        viewer.get(reverse("run_detail", args=[run.pk]) + f"?task={task.pk}").content.decode(),
        viewer.get(reverse("run_attempt", args=[run.pk, task.pk, 1])).content.decode(),
        viewer.get(reverse("run_download_json", args=[run.pk])).content.decode(),
        "".join(iter_export(Event.objects.filter(run=run), "jsonl")),
    ]
    assert "SERVICE_TOKEN" in pages[0]
    for html in pages:
        assert secret not in html
    kept = list((workspace.run_directory(run.pk).parent / "tool-results").rglob("*"))
    assert all(secret not in p.read_text() for p in kept if p.is_file())


def test_a_long_text_and_long_arguments_say_how_much_of_them_was_kept(viewer, run):
    """The "…" that marks a cut is not the agent's: "The first 2,001 of 2,040 characters" was one
    more than the row held of the agent's text, and the arguments' count likewise."""
    from orchestrator.engine.agent_steps import ARGUMENTS_CHARS, PREVIEW_CHARS, Step

    task = look(run)
    start(task)
    said = "x" * (PREVIEW_CHARS + 40)
    record_step(task, Step(kind="text", step=1, text=said))
    arguments = {"text": "y" * ARGUMENTS_CHARS}
    record_step(task, Step(kind="tool_call", step=1, call_id="c1", tool="lookup", arguments=arguments))
    text = words(panel(viewer, run, task))
    assert f"The first {PREVIEW_CHARS:,} of {PREVIEW_CHARS + 40:,} characters" in text
    chars = len(json.dumps(arguments))
    assert f"(the first {ARGUMENTS_CHARS:,} of {chars:,} characters)" in text


def test_the_times_of_a_tasks_attempts_decisions_and_events_say_they_are_utc(viewer, run):
    """The panel's attempts table ("15:00:25"), its checkpoints ("approved by … at 15:00:26"), the
    attempt's page ("started 15:00:25") and the event log's "Time" column gave a bare time of day,
    where the cards beside them say "since 14:59:06 UTC"."""
    task = look(run)
    started = timezone.now().replace(hour=15, minute=0, second=25, microsecond=0)
    end_task(task, TaskRun.State.SUCCEEDED, 1, Attempt.State.SUCCEEDED, "Done.")
    Attempt.objects.filter(task_run=task).update(started_at=started, finished_at=started + timedelta(seconds=2))
    Checkpoint.objects.create(
        run=run,
        task_run=task,
        kind=Checkpoint.Kind.AFTER,
        status=Checkpoint.Status.APPROVED,
        decided_by_name="approver",
        decided_at=started + timedelta(seconds=3),
    )
    text = words(panel(viewer, run, task))
    assert "15:00:25 UTC" in text
    assert "by approver at 15:00:28 UTC" in text
    assert "started 15:00:25 UTC" in words(attempt_page(viewer, run, task, 1))
    page = words(viewer.get(reverse("run_detail", args=[run.pk])).content.decode())
    assert "Time (UTC)" in page and "Newest first; times in UTC." in page
