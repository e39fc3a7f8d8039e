"""The live run view: /ws/runs/<id>/ through the real ASGI application (origin check, session auth).

Frames are HTML out-of-band fragments; `frame_seq` reads the range of events a frame covers.
The engine's actions run in a worker thread (`database_sync_to_async`), as they would in a view.
"""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import transaction
from django.test import Client
from django.utils import timezone

from dashboard import broadcast, consumers, fragments
from dashboard import frames as live_frames
from glassbox.asgi import application
from orchestrator import events
from orchestrator.engine import attempt_ends, dispatch, execution, plan_edits, reruns, runs, scheduler
from orchestrator.models import Attempt, Checkpoint, Event, Run, TaskRun
from orchestrator.providers.base import Usage
from tests.conftest import fast_latency, run_here

ORIGIN = (b"origin", b"http://localhost")
RECEIVE_S = 10


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def run(transactional_db, make_plan, demo_agents, priced_limit, monkeypatch):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    plan = make_plan(
        {"scope": ("researcher", []), "a": ("researcher", ["scope"]), "write": ("writer", ["a"], {"gate": "after"})},
        goal="Live view",
    )
    return runs.launch(plan, cap=2, budget_usd="5")


def cookies_for(user, *, csrf: str = "") -> bytes:
    client = Client()
    client.force_login(user)
    cookie = f"sessionid={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    if csrf:
        cookie += f"; {settings.CSRF_COOKIE_NAME}={csrf}"
    return cookie.encode()


def communicator(run_id: int, cookie: bytes | None = None, *, origin=ORIGIN) -> WebsocketCommunicator:
    """A websocket client; `cookie` from `cookies_for(user)`, made before entering async code."""
    headers = [origin] if origin else []
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=headers)


def frame_seq(html: str) -> tuple[int, int]:
    match = re.search(r'id="live-seq"[^>]*data-from="(\d+)" data-to="(\d+)"', html)
    assert match, html[:300]
    return int(match.group(1)), int(match.group(2))


def last_seq(run: Run) -> int:
    return Run.objects.get(pk=run.pk).last_event_seq


async def receive_until(comm: WebsocketCommunicator, seq: int) -> list[str]:
    """Frames until one reaches event `seq`."""
    frames = []
    while True:
        html = await comm.receive_from(timeout=RECEIVE_S)
        frames.append(html)
        if frame_seq(html)[1] >= seq:
            return frames


# --- Who may connect ----------------------------------------------------------------------------


async def refusal_code(comm) -> int:
    """A refused connection completes its handshake, then is closed with the reason's code."""
    connected, _ = await comm.connect()
    assert connected, "refused at the handshake (a bare HTTP 403), not with a close code"
    closing = await comm.receive_output()
    assert closing["type"] == "websocket.close"
    return closing["code"]


def test_anonymous_is_rejected_and_audited(run):
    async def scenario():
        return await refusal_code(communicator(run.pk))

    assert async_to_sync(scenario)() == consumers.CLOSE_UNAUTHENTICATED
    denial = Event.objects.filter(type="access.denied").latest("id")
    assert (denial.actor_name, denial.run_id) == ("anonymous", run.pk)
    assert denial.payload == {"permission": "authentication", "action": f"WEBSOCKET /ws/runs/{run.pk}/"}


def test_user_without_view_permission_is_rejected(run, personas):
    cookie = cookies_for(personas["outsider"])

    async def scenario():
        assert await refusal_code(communicator(run.pk, cookie)) == consumers.CLOSE_FORBIDDEN

    async_to_sync(scenario)()
    denial = Event.objects.filter(type="access.denied").latest("id")
    assert denial.actor_user == personas["outsider"] and denial.run_id == run.pk
    assert denial.payload == {"permission": "orchestrator.view_run", "action": f"WEBSOCKET /ws/runs/{run.pk}/"}


def test_unknown_run_is_rejected(run, personas):
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        assert await refusal_code(communicator(run.pk + 999, cookie)) == consumers.CLOSE_NOT_FOUND

    async_to_sync(scenario)()


# --- Live frames ----------------------------------------------------------------------------------


def test_nothing_is_sent_before_resume_then_events_after_it(run, personas):
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        comm = communicator(run.pk, cookie)
        connected, _ = await comm.connect()
        assert connected
        assert await comm.receive_nothing(timeout=0.6)
        seen = await database_sync_to_async(last_seq)(run)
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": seen}))
        assert await comm.receive_nothing(timeout=0.6)  # nothing new yet
        await database_sync_to_async(runs.pause)(run)
        target = await database_sync_to_async(last_seq)(run)
        frames = await receive_until(comm, target)
        first, last = frame_seq(frames[0])[0], frame_seq(frames[-1])[1]
        assert first == seen + 1 and last == target
        html = "".join(frames)
        assert 'id="run-header" class="run-header" hx-swap-oob="true"' in html
        assert 'data-run-status="paused"' in html
        assert 'data-type="run.paused"' in html
        assert 'hx-swap-oob="afterbegin"' in html
        await comm.disconnect()

    async_to_sync(scenario)()


def test_replay_after_reconnect_with_the_last_seq(run, personas):
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        comm = communicator(run.pk, cookie)
        await comm.connect()
        seen = await database_sync_to_async(last_seq)(run)
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": seen}))
        await comm.disconnect()
        # While nobody watches: pause and resume.
        await database_sync_to_async(runs.pause)(run)
        await database_sync_to_async(runs.resume)(run)
        missed = await database_sync_to_async(
            lambda: list(Event.objects.filter(run=run, seq__gt=seen).order_by("seq").values_list("seq", flat=True))
        )()
        comm = communicator(run.pk, cookie)
        await comm.connect()
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": seen}))
        frames = await receive_until(comm, missed[-1])
        html = "".join(frames)
        assert frame_seq(frames[0])[0] == seen + 1
        for seq in missed:
            assert f'id="event-{seq}"' in html
        assert f'id="event-{seen}"' not in html  # nothing already seen is sent again
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_doorbell_ahead_of_the_cursor_triggers_a_catch_up(run, personas, monkeypatch):
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        comm = communicator(run.pk, cookie)
        await comm.connect()
        seen = await database_sync_to_async(last_seq)(run)
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": seen}))
        # Three events whose doorbells are lost (the channel layer is at-most-once) ...
        monkeypatch.setattr(events, "ring_doorbell", lambda run_id, seq: None)
        await database_sync_to_async(runs.pause)(run)
        await database_sync_to_async(runs.resume)(run)
        await database_sync_to_async(runs.pause)(run)
        target = await database_sync_to_async(last_seq)(run)
        # ... then one doorbell for the last: the consumer sends every event since its cursor.
        await get_channel_layer().group_send(events.run_group_name(run.pk), {"type": "run.event", "seq": target})
        frames = await receive_until(comm, target)
        html = "".join(frames)
        assert frame_seq(frames[0])[0] == seen + 1
        for seq in range(seen + 1, target + 1):
            assert f'id="event-{seq}"' in html
        await comm.disconnect()

    async_to_sync(scenario)()


def test_events_from_other_processes_arrive_without_a_doorbell(run, personas, monkeypatch):
    """The embedded channel layer does not reach across processes: the consumer tails the table."""

    cookie = cookies_for(personas["viewer"])

    async def scenario():
        monkeypatch.setattr(events, "ring_doorbell", lambda run_id, seq: None)
        comm = communicator(run.pk, cookie)
        await comm.connect()
        seen = await database_sync_to_async(last_seq)(run)
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": seen}))
        await database_sync_to_async(runs.cancel)(run)
        target = await database_sync_to_async(last_seq)(run)
        frames = await receive_until(comm, target)
        assert 'data-type="run.cancelled"' in "".join(frames)
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_client_asking_again_gets_the_events_again(run, personas):
    """A client that saw a gap sends resume with its last seq: the consumer goes back to it."""

    cookie = cookies_for(personas["viewer"])

    async def scenario():
        comm = communicator(run.pk, cookie)
        await comm.connect()
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 0}))
        latest = await database_sync_to_async(last_seq)(run)
        frames = await receive_until(comm, latest)
        assert frame_seq(frames[0])[0] == 1
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 1}))
        frames = await receive_until(comm, latest)
        assert frame_seq(frames[0])[0] == 2
        assert 'id="event-2"' in "".join(frames)
        await comm.disconnect()

    async_to_sync(scenario)()


def test_progress_bursts_are_coalesced_and_stream_to_a_watched_panel(run, personas):
    cookie = cookies_for(personas["viewer"])

    def burst():
        task = run.tasks.get(subtask__key="scope")
        TaskRun.objects.filter(pk=task.pk).update(
            state=TaskRun.State.RUNNING, output="streamed words so far", attempt_count=1
        )
        # What the host last saved of the stream (execution.save_progress).
        Attempt.objects.update_or_create(
            task_run=task, number=1, defaults={"state": Attempt.State.RUNNING, "output_tokens": 39}
        )
        for n in range(40):
            with transaction.atomic():
                events.record("task.progress", run=run, task=task, payload={"progress": n, "output_tokens": n})
        return task.pk

    async def scenario():
        comm = communicator(run.pk, cookie)
        await comm.connect()
        seen = await database_sync_to_async(last_seq)(run)
        scope_pk = await database_sync_to_async(lambda: run.tasks.get(subtask__key="scope").pk)()
        await comm.send_to(text_data=json.dumps({"type": "watch", "task": scope_pk}))
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": seen}))
        await database_sync_to_async(burst)()
        target = await database_sync_to_async(last_seq)(run)
        frames = await receive_until(comm, target)
        assert len(frames) < 40  # coalesced: far fewer frames than events
        last = frames[-1]
        assert last.count(f'id="task-{scope_pk}"') == 1  # one row per task per frame
        html = "".join(frames)
        assert f'id="task-output-{scope_pk}"' in html
        assert "streamed words so far" in html
        assert 'data-tokens="39"' in html  # the node's token burn, as its host last saved it
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_ping_is_answered_at_once_even_on_an_idle_run(run, personas):
    """The page pings to learn that the socket still gets through: an idle run sends nothing else."""
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        comm = communicator(run.pk, cookie)
        await comm.connect()
        for _ in range(2):  # before any resume, and again: every ping gets its answer
            await comm.send_to(text_data=json.dumps({"type": "ping"}))
            assert await comm.receive_from(timeout=RECEIVE_S) == consumers.PONG
        assert await comm.receive_nothing(timeout=0.6)  # and nothing else: no events were asked for
        await comm.disconnect()

    async_to_sync(scenario)()


def test_malformed_messages_are_ignored(run, personas):
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        comm = communicator(run.pk, cookie)
        await comm.connect()
        for text in ("not json", "{}", json.dumps({"type": "resume", "last_seq": "x"}), json.dumps({"type": "other"})):
            await comm.send_to(text_data=text)
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 0}))
        html = await comm.receive_from(timeout=RECEIVE_S)
        assert frame_seq(html)[0] == 1
        await comm.disconnect()

    async_to_sync(scenario)()


def test_forms_in_frames_carry_a_csrf_token(run, personas):
    cookie = cookies_for(personas["launcher"], csrf="a" * 32)

    async def scenario():
        comm = communicator(run.pk, cookie)
        await comm.connect()
        await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 0}))
        html = await comm.receive_from(timeout=RECEIVE_S)
        assert 'data-action="pause"' in html
        assert 'name="csrfmiddlewaretoken"' in html
        await comm.disconnect()

    async_to_sync(scenario)()


async def group_size(layer, group: str) -> int:
    """How many channels are in a channel-layer group, on the in-memory layer or channels_redis."""
    if hasattr(layer, "groups"):
        return len(layer.groups.get(group, {}))
    connection = layer.connection(layer.consistent_hash(group))
    return await connection.zcard(layer._group_key(group))


def test_the_viewers_of_a_run_share_one_doorbell_and_one_poll(run, personas, monkeypatch):
    """However many viewers watch a run, the process hears its doorbell and polls it once."""

    cookie = cookies_for(personas["viewer"])
    polls = []
    real_latest = live_frames.latest_seq
    monkeypatch.setattr(live_frames, "latest_seq", lambda run_id: polls.append(run_id) or real_latest(run_id))

    async def scenario():
        layer = get_channel_layer()
        group = events.run_group_name(run.pk)
        comms = [communicator(run.pk, cookie) for _ in range(3)]
        for comm in comms:
            assert (await comm.connect())[0]
            await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 0}))
        latest = await database_sync_to_async(last_seq)(run)
        for comm in comms:
            frames = await receive_until(comm, latest)
            assert frame_seq(frames[0])[0] == 1
        assert await group_size(layer, group) == 1  # one channel for the run, not one per viewer
        polls.clear()
        assert await comms[0].receive_nothing(timeout=1.0)
        # One broadcaster polls (every POLL_S at most); three per-viewer loops would poll three times as often.
        assert len(polls) <= 1.0 / consumers.POLL_S + 2
        assert len(broadcast.broadcaster_for(run.pk).subscribers) == 3
        for comm in comms:
            await comm.disconnect()
        assert await group_size(layer, group) == 0  # the last viewer leaving left the group

    async_to_sync(scenario)()


# --- Which fragments each kind of event brings (render_batch, no socket) ---------------------------


VIEWER = fragments.Viewer(can_control=True, can_decide=True)


def batch_after(run: Run, seq: int, watched: int | None = None) -> str:
    batch = live_frames.render_batch(run.pk, seq, VIEWER, watched)
    assert batch is not None
    return batch.html


def oob_ids(html: str) -> set[str]:
    return set(re.findall(r'id="([^"]+)"[^>]*hx-swap-oob=', html))


def test_no_batch_when_nothing_is_new(run):
    assert live_frames.render_batch(run.pk, last_seq(run), VIEWER) is None


def test_task_events_bring_the_row_lanes_totals_bars_and_log(run):
    seen = last_seq(run)
    task = run.tasks.get(subtask__key="scope")
    attempt = task.attempts.get()
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.RUNNING, started_at=timezone.now(), worker="w:1")
    with transaction.atomic():
        events.record("task.started", run=run, task=task, payload={"attempt": 1})
    html = batch_after(run, seen)
    ids = oob_ids(html)
    assert {
        f"task-{task.pk}",
        "agent-lanes",
        "run-totals",
        f"attempt-{attempt.pk}",
        "event-log-rows",
        "live-seq",
    } <= ids
    # The new bar joins its agent's lane if the page does not show it yet.
    assert f'data-upsert="#gantt-lane-{task.agent_id}"' in html
    assert "run-header" not in ids and "run-gantt" not in ids


def test_an_attempt_ending_after_its_runs_cancellation_brings_its_bar_row_and_the_new_totals(run):
    """A cancel marks the tasks cancelled at once; a running attempt stops at its host's next beat,
    after the run's last event. Its end (what it used, its bar no longer running) must still reach
    the page: the live view would otherwise show the run's totals without it for good."""
    task = run.tasks.get(subtask__key="scope")
    claim = execution.claim_attempt(task.attempts.get().pk, "w:1")
    runs.cancel(run)
    seen = last_seq(run)
    assert attempt_ends.cancel_attempt(claim, Usage(input_tokens=1200, output_tokens=340)) == "cancelled"
    html = batch_after(run, seen)
    assert {f"task-{task.pk}", "run-totals", f"attempt-{claim.attempt.pk}", "agent-lanes"} <= oob_ids(html)
    assert "1,540" in html  # the run's tokens now count the stopped attempt's
    assert Event.objects.filter(run=run, type="attempt.cancelled").get().payload["output_tokens"] == 340


def test_progress_events_bring_only_rows_lanes_and_the_watched_output(run):
    seen = last_seq(run)
    task = run.tasks.get(subtask__key="scope")
    with transaction.atomic():
        events.record("task.progress", run=run, task=task, payload={"progress": 5, "output_tokens": 3})
    ids = oob_ids(batch_after(run, seen, watched=task.pk))
    assert {f"task-{task.pk}", "agent-lanes", f"task-head-{task.pk}", f"task-output-{task.pk}"} <= ids
    assert not ids & {"run-totals", "run-gantt", f"task-attempts-{task.pk}", "run-result-final"}


def test_run_events_bring_the_header_checkpoints_timeline_and_final_output(run):
    seen = last_seq(run)
    runs.pause(run)
    ids = oob_ids(batch_after(run, seen))
    assert {"run-header", "run-checkpoints", "run-result-final", "run-totals", "run-gantt"} <= ids
    assert "run-result" not in ids  # the list of every task's output does not change


def test_only_a_final_task_brings_the_final_output_again(run):
    seen = last_seq(run)
    scope = run.tasks.get(subtask__key="scope")
    with transaction.atomic():
        events.record("task.succeeded", run=run, task=scope)
    assert "run-result-final" not in oob_ids(batch_after(run, seen))
    seen = last_seq(run)
    write = run.tasks.get(subtask__key="write")
    with transaction.atomic():
        events.record("task.output_ready", run=run, task=write)
    assert "run-result-final" in oob_ids(batch_after(run, seen))


def test_a_final_tasks_start_brings_its_result_entry_with_its_state(run):
    """The Result's entry of a final task said "queued" all the while the task ran."""
    write = run.tasks.get(subtask__key="write")
    TaskRun.objects.filter(pk=write.pk).update(state=TaskRun.State.RUNNING)
    seen = last_seq(run)
    with transaction.atomic():
        events.record("task.started", run=run, task=write, payload={"attempt": 1})
    html = batch_after(run, seen)
    final = re.search(r'<div id="run-result-final".*', html, re.S)
    assert final and "running" in final.group(0) and "queued" not in final.group(0)


def test_a_runs_end_brings_the_result_listing_only_the_tasks_that_ran(run):
    """The Result's "Every task's output" is drawn once: at the end it kept listing tasks the run
    cancelled before they started, each opening on nothing."""
    seen = last_seq(run)
    runs.cancel(run)
    html = batch_after(run, seen)
    assert "run-result" in oob_ids(html)
    result = re.search(r'<section id="run-result".*?</section>', html, re.S).group(0)
    assert "Every task's output" not in result and "never ran, so wrote no output." in result


def test_checkpoint_events_bring_the_checkpoints(run):
    task = run.tasks.get(subtask__key="write")
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.AWAITING_REVIEW, output="Out")
    seen = last_seq(run)
    with transaction.atomic():
        cp = scheduler.open_gate(TaskRun.objects.select_related("subtask").get(pk=task.pk), Checkpoint.Kind.AFTER)
    html = batch_after(run, seen)
    assert {"run-checkpoints", "run-header", f"task-{task.pk}"} <= oob_ids(html)
    assert f'id="checkpoint-{cp.pk}"' in html


def panel_checkpoints(html: str, task: TaskRun) -> str:
    """The words of an open panel's Checkpoints section in a frame ("" when the frame has none)."""
    section = re.search(rf'<section id="task-checkpoints-{task.pk}"[^>]*hx-swap-oob=.*?</section>', html, re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", section.group(0))).strip() if section else ""


def test_an_open_panels_checkpoints_follow_their_decision_and_a_rerun(
    transactional_db, make_agent, make_plan, priced_limit, personas, no_broker
):
    """The panel said "After checkpoint: pending" after the review was approved, and "approved by
    approver" once a re-run had opened it again, while the top of the page asked for it."""
    make_agent("writer", provider_options=fast_latency(0.01))
    run = run_here(runs.launch(make_plan({"design": ("writer", [], {"gate": "after"})}), budget_usd="5"))
    design = run.tasks.get()
    review = run.checkpoints.get(kind=Checkpoint.Kind.AFTER)
    seen = last_seq(run)
    runs.decide(review, approve=True, user=personas["approver"], comment="fine")
    words = panel_checkpoints(batch_after(run, seen, watched=design.pk), design)
    assert words.startswith("Checkpoints Review checkpoint: approved by approver at ") and words.endswith("“fine”")
    seen = last_seq(run)
    reruns.rerun_from(design, user=personas["launcher"])
    run_here(run)
    # The re-run asks with a new review: the approval stays listed above it, as it was decided.
    words = panel_checkpoints(batch_after(run, seen, watched=design.pk), design)
    assert words.startswith("Checkpoints Review checkpoint: approved by approver at ")
    assert "“fine”" in words and words.endswith("Review checkpoint: pending")
    seen = last_seq(run)
    runs.cancel(run)
    words = panel_checkpoints(batch_after(run, seen, watched=design.pk), design)
    assert words.startswith("Checkpoints Review checkpoint: approved by approver at ")
    assert "“fine”" in words and "Review checkpoint: closed without a decision: the run was cancelled (" in words
    assert panel_checkpoints(batch_after(run, seen), design) == ""  # only to a viewer with its panel open


def test_plan_events_bring_the_graph_and_the_task_table(transactional_db, make_plan, demo_agents, priced_limit):
    plan = make_plan({"scope": ("researcher", []), "a": ("researcher", ["scope"]), "b": ("writer", ["a"])})
    run = runs.launch(plan, budget_usd="5", require_plan_approval=True)
    seen = last_seq(run)
    plan_edits.remove_subtask(run.checkpoints.get(), "a")
    html = batch_after(run, seen)
    assert {"dag-graph", "task-table", "task-count", "run-checkpoints"} <= oob_ids(html)
    assert re.search(r'id="task-count"[^>]*>2 in plan order<', html)  # it said 3, the plan's count before
    graph = json.loads(html_lib.unescape(re.search(r"id=\"dag-graph\" hidden data-graph='([^']*)'", html).group(1)))
    remaining = set(run.tasks.values_list("pk", flat=True))
    assert {node[0] for node in graph["nodes"]} == remaining and len(remaining) == 2
    assert graph["edges"] == []  # a lost its upstream scope and its downstream b: nothing reconnects


def test_a_client_far_behind_gets_everything_afresh(run, monkeypatch):
    from orchestrator.readmodels import log

    monkeypatch.setattr(log, "LOG_LIMIT", 3)
    html = batch_after(run, 0)
    assert 'data-full="1"' in html
    assert 'hx-swap-oob="innerHTML"' in html  # the log is replaced, not prepended to
    assert {"run-header", "run-totals", "task-table", "agent-lanes", "run-gantt", "run-result"} <= oob_ids(html)
