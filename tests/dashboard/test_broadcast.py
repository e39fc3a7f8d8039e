"""The run's broadcaster: each frame rendered once per (events, permission class) and shared.

Through the real ASGI application like tests/dashboard/test_consumers.py; a spy on
`frames.render_run_batch` / `render_watched_panel` counts the renders.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.db import connection, transaction
from django.middleware.csrf import _unmask_cipher_token
from django.utils import timezone

from dashboard import broadcast, fragments, frames
from orchestrator import events
from orchestrator.engine import dispatch, runs
from orchestrator.models import Run, TaskRun
from tests.conftest import in_another_connection

from .test_consumers import communicator, cookies_for, frame_seq, last_seq, receive_until

SECRET_A = "a" * 32
SECRET_B = "b" * 32


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def run(transactional_db, make_plan, demo_agents, priced_limit, monkeypatch):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    plan = make_plan(
        {"scope": ("researcher", []), "a": ("researcher", ["scope"]), "write": ("writer", ["a"], {"gate": "after"})},
        goal="Shared live view",
    )
    return runs.launch(plan, cap=2, budget_usd="5")


@pytest.fixture
def renders(monkeypatch):
    """Every run render the broadcaster asks for: (after_seq, upto, permission class)."""
    calls: list[tuple[int, int, fragments.Viewer]] = []
    real = frames.render_run_batch

    def spy(run_id, after_seq, viewer, upto=None, *, in_step=False):
        calls.append((after_seq, upto, viewer))
        return real(run_id, after_seq, viewer, upto=upto, in_step=in_step)

    monkeypatch.setattr(frames, "render_run_batch", spy)
    return calls


@pytest.fixture
def panel_renders(monkeypatch):
    calls: list[tuple[int, int, fragments.Viewer, int | None]] = []
    real = frames.render_watched_panel

    def spy(run_id, batch, viewer, watched_task):
        calls.append((batch.from_seq, batch.to_seq, viewer, watched_task))
        return real(run_id, batch, viewer, watched_task)

    monkeypatch.setattr(frames, "render_watched_panel", spy)
    return calls


async def connect_and_resume(cookie: bytes, run_id: int, seq: int, *, watch: int | None = None):
    comm = communicator(run_id, cookie)
    connected, _ = await comm.connect()
    assert connected
    if watch is not None:
        await comm.send_to(text_data=json.dumps({"type": "watch", "task": watch}))
    await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": seq}))
    return comm


async def served_a_pause(cookie: bytes, run: Run):
    """A viewer in step: connected at the run's last event, then sent the frame of its pause.
    Returns the websocket and the pause's event."""
    seen = await database_sync_to_async(last_seq)(run)
    comm = await connect_and_resume(cookie, run.pk, seen)
    await database_sync_to_async(runs.pause)(run)
    paused_at = await database_sync_to_async(last_seq)(run)
    await receive_until(comm, paused_at)
    return comm, paused_at


def csrf_values(html: str) -> set[str]:
    return set(re.findall(r'name="csrfmiddlewaretoken" value="([^"]*)"', html))


def test_two_viewers_in_step_get_one_render_per_batch(run, personas, renders):
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        first = await connect_and_resume(cookie, run.pk, seen)
        second = await connect_and_resume(cookie, run.pk, seen)
        assert await first.receive_nothing(timeout=0.6) and await second.receive_nothing(timeout=0.1)
        assert broadcast.broadcaster_for(run.pk).subscribers and len(broadcast.broadcaster_for(run.pk).subscribers) == 2
        await database_sync_to_async(runs.pause)(run)
        await database_sync_to_async(runs.resume)(run)
        target = await database_sync_to_async(last_seq)(run)
        frames_first = await receive_until(first, target)
        frames_second = await receive_until(second, target)
        assert frames_first == frames_second  # the same frames, byte for byte
        assert frame_seq(frames_first[0])[0] == seen + 1
        # One render per frame, whatever the number of viewers.
        assert len(renders) == len(frames_first)
        assert [(after + 1, upto) for after, upto, _ in renders] == [frame_seq(f) for f in frames_first]
        await first.disconnect()
        assert broadcast.broadcaster_for(run.pk) is not None  # the other still watches
        await second.disconnect()
        assert broadcast.broadcaster_for(run.pk) is None  # the last viewer stopped it

    async_to_sync(scenario)()


def test_rounds_read_the_database_on_connections_kept_open_while_anyone_watches(run, personas, monkeypatch):
    """database_sync_to_async closes a non-persistent connection after every call: reopening it
    for each query of each round was most of a round's time on PostgreSQL."""
    import threading

    from django.db import connection

    seen_by: list[tuple[str, int]] = []
    real = frames.latest_seq

    def spy(run_id):
        latest = real(run_id)
        seen_by.append((threading.current_thread().name, id(connection.connection)))
        return latest

    monkeypatch.setattr(frames, "latest_seq", spy)
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        viewer = await connect_and_resume(cookie, run.pk, seen)
        for change in (runs.pause, runs.resume):
            await database_sync_to_async(change)(run)
            await receive_until(viewer, await database_sync_to_async(last_seq)(run))
        threads = broadcast.LiveDatabase.of_loop().threads._workers
        await viewer.disconnect()
        return threads

    threads = async_to_sync(scenario)()
    assert len(seen_by) >= 2 and {name.rsplit("-", 1)[0] for name, _ in seen_by} == {"glassbox-live-db"}
    per_thread: dict[str, set[int]] = {}
    for name, raw in seen_by:
        per_thread.setdefault(name, set()).add(raw)
    assert all(len(raws) == 1 for raws in per_thread.values()), per_thread  # never reopened
    assert not any(thread.is_alive() for thread in threads)  # closed with the last viewer


def test_a_viewer_behind_gets_its_own_catch_up_and_then_shares_the_next_frames(run, personas, renders):
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        in_step, paused_at = await served_a_pause(cookie, run)
        # A second viewer (a reconnect) that has seen nothing yet.
        behind = await connect_and_resume(cookie, run.pk, 0)
        catch_up = await receive_until(behind, paused_at)
        assert frame_seq(catch_up[0])[0] == 1
        html = "".join(catch_up)
        for seq in range(1, paused_at + 1):
            assert f'id="event-{seq}"' in html
        assert await in_step.receive_nothing(timeout=0.6)  # the catch-up is not sent to the other
        # From here both are at the same event: the next frames are rendered once for both.
        renders.clear()
        await database_sync_to_async(runs.resume)(run)
        target = await database_sync_to_async(last_seq)(run)
        frames_in_step = await receive_until(in_step, target)
        frames_behind = await receive_until(behind, target)
        assert frames_in_step == frames_behind
        assert frame_seq(frames_in_step[0])[0] == paused_at + 1
        assert len(renders) == len(frames_in_step)
        await in_step.disconnect()
        await behind.disconnect()

    async_to_sync(scenario)()


def test_a_burst_reaches_a_viewer_in_step_as_a_live_batch_and_one_that_resumed_as_a_full_refresh(
    run, personas, renders, monkeypatch
):
    """More events at once than the log holds (a fan-out): the viewer that had every frame gets
    what they changed; one that has just said where it is (a reconnect) gets every part afresh."""
    from orchestrator.readmodels import log

    monkeypatch.setattr(log, "LOG_LIMIT", 3)
    cookie = cookies_for(personas["viewer"])
    scope = run.tasks.get(subtask__key="scope")

    def burst(count: int) -> None:
        with events.atomic():
            for n in range(count):
                events.record("task.waiting", run=run, task=scope, message=f"held back {n}")

    def full(html: str) -> bool:
        return re.search(r'id="live-seq"[^>]*data-full="(\d)"', html).group(1) == "1"

    async def scenario():
        in_step, paused_at = await served_a_pause(cookie, run)
        resumed = await connect_and_resume(cookie, run.pk, paused_at)  # at the same event, by a resume
        assert await resumed.receive_nothing(timeout=0.6)
        renders.clear()
        await database_sync_to_async(burst)(5)
        target = await database_sync_to_async(last_seq)(run)
        (live,) = await receive_until(in_step, target)
        (refresh,) = await receive_until(resumed, target)
        assert not full(live) and f'id="task-{scope.pk}"' in live and 'id="task-table"' not in live
        assert full(refresh) and 'id="task-table"' in refresh
        assert len(renders) == 2  # one render each: they start from the same event but not alike
        # Once served, the resumed viewer is in step too: the next burst is one live batch for both.
        renders.clear()
        await database_sync_to_async(burst)(5)
        target = await database_sync_to_async(last_seq)(run)
        (live,) = await receive_until(in_step, target)
        assert [live] == await receive_until(resumed, target)
        assert not full(live) and len(renders) == 1
        await in_step.disconnect()
        await resumed.disconnect()

    async_to_sync(scenario)()


def test_each_permission_class_sees_its_own_controls_and_each_viewer_its_own_csrf_token(run, personas, renders):
    viewer_cookie = cookies_for(personas["viewer"], csrf=SECRET_A)
    launcher_a = cookies_for(personas["launcher"], csrf=SECRET_A)
    launcher_b = cookies_for(personas["launcher"], csrf=SECRET_B)

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        comms = [await connect_and_resume(c, run.pk, seen) for c in (viewer_cookie, launcher_a, launcher_b)]
        assert await comms[0].receive_nothing(timeout=0.6)
        await database_sync_to_async(runs.pause)(run)
        target = await database_sync_to_async(last_seq)(run)
        viewer_html, a_html, b_html = ["".join(await receive_until(c, target)) for c in comms]
        # The viewer has no run controls; the launchers have them, with a token of their own.
        assert 'data-action="resume"' not in viewer_html and not csrf_values(viewer_html)
        for html, secret in ((a_html, SECRET_A), (b_html, SECRET_B)):
            assert 'data-action="resume"' in html
            tokens = csrf_values(html)
            assert len(tokens) == 1
            assert _unmask_cipher_token(tokens.pop()) == secret
        for html in (viewer_html, a_html, b_html):
            assert fragments.CSRF_PLACEHOLDER not in html
        # Apart from the token, the launchers' frames are the same render.
        assert a_html.replace(csrf_values(a_html).pop(), "T") == b_html.replace(csrf_values(b_html).pop(), "T")
        # One render per permission class and frame: viewer, launcher (with a token).
        classes = {viewer for _, _, viewer in renders}
        assert classes == {
            fragments.Viewer(can_control=False, can_decide=False, csrf_token=fragments.CSRF_PLACEHOLDER),
            fragments.Viewer(
                can_control=True, can_decide=False, csrf_token=fragments.CSRF_PLACEHOLDER, can_launch=True
            ),
        }
        assert len(renders) == len({(after, upto, viewer) for after, upto, viewer in renders})
        for comm in comms:
            await comm.disconnect()

    async_to_sync(scenario)()


def test_a_watched_panel_is_rendered_once_per_task_and_sent_only_to_its_watchers(run, personas, renders, panel_renders):
    cookie = cookies_for(personas["viewer"])
    scope = run.tasks.get(subtask__key="scope")

    def progress():
        TaskRun.objects.filter(pk=scope.pk).update(state=TaskRun.State.RUNNING, output="words streamed so far")
        with transaction.atomic():
            events.record("task.progress", run=run, task=scope, payload={"progress": 1, "output_tokens": 7})

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        watchers = [await connect_and_resume(cookie, run.pk, seen, watch=scope.pk) for _ in range(2)]
        other = await connect_and_resume(cookie, run.pk, seen)
        assert await other.receive_nothing(timeout=0.6)
        await database_sync_to_async(progress)()
        target = await database_sync_to_async(last_seq)(run)
        watched_frames = [await receive_until(c, target) for c in watchers]
        other_frames = await receive_until(other, target)
        assert watched_frames[0] == watched_frames[1]
        assert f'id="task-output-{scope.pk}"' in "".join(watched_frames[0])
        assert "words streamed so far" in "".join(watched_frames[0])
        assert f'id="task-output-{scope.pk}"' not in "".join(other_frames)
        assert len(renders) == len(other_frames)
        assert len(panel_renders) == len(watched_frames[0])
        assert {task for *_, task in panel_renders} == {scope.pk}
        for comm in (*watchers, other):
            await comm.disconnect()

    async_to_sync(scenario)()


# --- The shared render itself (no socket) -------------------------------------------------------


def test_a_shared_render_personalised_equals_a_render_for_the_viewer_alone(run, monkeypatch):
    scope = run.tasks.get(subtask__key="scope")
    token = fragments.csrf_token_from_cookie(SECRET_A)
    runs.pause(run)
    latest = Run.objects.get(pk=run.pk).last_event_seq
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)  # the parts show times relative to now
    for viewer in (
        fragments.Viewer(can_control=True, can_decide=True, csrf_token=token),
        fragments.Viewer(can_control=True, can_decide=False, csrf_token=""),
        fragments.Viewer(can_control=False, can_decide=False, csrf_token=token),
    ):
        for after, watched in ((0, scope.pk), (latest - 1, None), (0, None)):
            alone = frames.render_batch(run.pk, after, viewer, watched)
            start = broadcast.start_of(after, False, latest)
            result = broadcast.render_round(run.pk, latest, {start: {(viewer.shared(), watched)}})
            html, to_seq = result.frame_for(viewer, start, watched)
            assert html == alone.html and to_seq == alone.to_seq == latest
            assert fragments.CSRF_PLACEHOLDER not in html


def test_a_failed_render_leaves_its_viewers_for_the_next_round_and_serves_the_others(run, monkeypatch):
    latest = Run.objects.get(pk=run.pk).last_event_seq
    real = frames.render_run_batch
    launcher = fragments.Viewer(can_control=True, can_decide=False)
    viewer = fragments.Viewer(can_control=False, can_decide=False)

    def failing_for_launchers(run_id, after_seq, shared, upto=None, *, in_step=False):
        if shared.can_control:
            raise RuntimeError("template broke")
        return real(run_id, after_seq, shared, upto=upto, in_step=in_step)

    monkeypatch.setattr(frames, "render_run_batch", failing_for_launchers)
    start = (0, True)
    result = broadcast.render_round(run.pk, latest, {start: {(launcher.shared(), None), (viewer.shared(), None)}})
    assert result.frame_for(launcher, start, None) is None
    html, to_seq = result.frame_for(viewer, start, None)
    assert to_seq == latest and 'id="event-1"' in html


def test_a_render_whose_query_fails_leaves_the_rounds_snapshot_readable_for_the_others(run, monkeypatch):
    """On PostgreSQL a failed query aborts its transaction: each render has a savepoint of its own."""
    latest = Run.objects.get(pk=run.pk).last_event_seq
    real = frames.render_run_batch
    launcher = fragments.Viewer(can_control=True, can_decide=False)
    viewer = fragments.Viewer(can_control=False, can_decide=False)

    def query_failing_for_viewers(run_id, after_seq, shared, upto=None, *, in_step=False):
        if not shared.can_control:  # rendered first: the launchers' render comes after it
            with connection.cursor() as cursor:
                cursor.execute("SELECT no_such_column FROM orchestrator_run")
        return real(run_id, after_seq, shared, upto=upto, in_step=in_step)

    monkeypatch.setattr(frames, "render_run_batch", query_failing_for_viewers)
    viewers = [(0, launcher.shared(), None, True), (0, viewer.shared(), None, True)]
    _, result = broadcast.catch_up(run.pk, viewers)
    assert result.frame_for(viewer, (0, True), None) is None
    html, to_seq = result.frame_for(launcher, (0, True), None)
    assert to_seq == latest and 'id="event-1"' in html


def test_every_part_of_a_frame_shows_the_same_moment_of_the_run(run, monkeypatch):
    """The run cancelled by someone else while a frame renders: the frame, which read the run (its
    header) before, must not show the cancelled tasks beside a running header. The next frame
    brings the cancellation, header and tasks together."""
    before = Run.objects.get(pk=run.pk).last_event_seq
    real = frames.render_parts
    cancelled_meanwhile: list[int] = []

    def cancel_then_render(*args, **kwargs):
        if not cancelled_meanwhile:
            in_another_connection(lambda: runs.cancel(Run.objects.get(pk=run.pk)))
            cancelled_meanwhile.append(run.pk)
        return real(*args, **kwargs)

    monkeypatch.setattr(frames, "render_parts", cancel_then_render)
    viewer = fragments.Viewer(can_control=False, can_decide=False)
    latest, result = broadcast.catch_up(run.pk, [(0, viewer.shared(), None, False)])
    html, to_seq = result.frame_for(viewer, broadcast.start_of(0, False, latest), None)
    assert cancelled_meanwhile and latest == to_seq == before
    assert 'data-run-status="running"' in html
    assert "task-row state-queued" in html and "task-row state-cancelled" not in html

    latest, result = broadcast.catch_up(run.pk, [(to_seq, viewer.shared(), None, True)])
    html, to_seq = result.frame_for(viewer, (before, True), None)
    assert to_seq == latest == Run.objects.get(pk=run.pk).last_event_seq > before
    assert 'data-run-status="cancelled"' in html
    assert "task-row state-cancelled" in html and "task-row state-queued" not in html


# --- Live progress (not events) ----------------------------------------------------------------------


async def receive_live(comm, predicate, frames: int = 10) -> str:
    """The first live frame (one without #live-seq) that satisfies `predicate`."""
    for _ in range(frames):
        html = await comm.receive_from(timeout=5)
        if 'id="live-seq"' not in html and predicate(html):
            return html
    raise AssertionError("no such live frame")


def running_task(run: Run) -> TaskRun:
    """The run's first task, claimed by a (pretend) host."""
    from orchestrator.engine import execution
    from orchestrator.models import Attempt

    attempt = Attempt.objects.get(task_run__run=run, state="queued")
    return execution.claim_attempt(attempt.pk, "host:1")


def test_saved_progress_reaches_every_viewer_and_the_output_its_panel(run, personas):
    from orchestrator.engine import execution
    from orchestrator.providers.base import Usage

    claim = running_task(run)
    task_id = claim.task.pk
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        watcher = await connect_and_resume(cookie, run.pk, seen, watch=task_id)
        other = await connect_and_resume(cookie, run.pk, seen)
        await database_sync_to_async(execution.save_progress)(
            [(claim, execution.Progress("The first findings are in", 40, Usage(30, 9)))]
        )
        # One frame, or two: a round reads the progress, then the outputs; a save committed
        # between the two reads reaches the next round's progress (production CI once split it).
        frame = await receive_live(watcher, lambda html: "The first findings are in" in html)
        assert f'id="task-output-{task_id}"' in frame
        if f'data-tasks="{task_id}:40"' not in frame:
            await receive_live(watcher, lambda html: f'data-tasks="{task_id}:40"' in html)
        elsewhere = await receive_live(other, lambda html: "live-progress" in html)
        assert f'data-tasks="{task_id}:40"' in elsewhere and "task-output" not in elsewhere
        events_now = await database_sync_to_async(last_seq)(run)
        assert events_now == seen  # progress wrote no event
        await watcher.disconnect()
        await other.disconnect()

    async_to_sync(scenario)()


def test_a_save_brings_the_rows_and_lanes_its_tokens_and_the_open_panels_head_to_each_class(run, personas):
    from orchestrator.engine import execution
    from orchestrator.providers.base import Usage

    claim = running_task(run)
    task_id = claim.task.pk
    launcher = cookies_for(personas["launcher"], csrf=SECRET_A)
    viewer = cookies_for(personas["viewer"], csrf=SECRET_B)

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        watcher = await connect_and_resume(launcher, run.pk, seen, watch=task_id)
        reader = await connect_and_resume(viewer, run.pk, seen, watch=task_id)
        other = await connect_and_resume(viewer, run.pk, seen)
        await database_sync_to_async(execution.save_progress)(
            [(claim, execution.Progress("Halfway", 40, Usage(30, 53)))]
        )
        saved = lambda html: f'data-tasks="{task_id}:40"' in html  # noqa: E731
        frames_seen = [await receive_live(comm, saved) for comm in (watcher, reader, other)]
        for html in frames_seen:
            # The row and the lanes show the 83 tokens used so far (30 in, known from the stream's
            # start, and 53 streamed out), as saved with the progress, before the percentages
            # (applied on top of the row by run/progress.js).
            row = re.search(rf'<div id="task-{task_id}" [^>]*>', html)
            assert row and 'data-tokens="83"' in row.group(0)
            assert 'id="agent-lanes"' in html and "83 tok" in html
            assert html.index(f'id="task-{task_id}"') < html.index('id="live-progress"')
        watcher_html, reader_html, other_html = frames_seen
        # The panel's head, once per permission class: the launcher's with its Skip form and its own
        # token, the viewer's without controls; none for a viewer without the panel open.
        for html in (watcher_html, reader_html):
            head = html[html.index(f'id="task-head-{task_id}"') :]
            assert "<dd data-progress-text>40%</dd>" in head and ">83</dd>" in head
            # and its attempts table: the running attempt's tokens as saved (it said 0 / 0)
            attempts = html[html.index(f'id="task-attempts-{task_id}"') :]
            assert re.search(r'<td class="num">30 / 53</td>', attempts), attempts[:2000]
        assert 'data-action="skip"' in watcher_html and 'data-action="skip"' not in reader_html
        assert _unmask_cipher_token(csrf_values(watcher_html).pop()) == SECRET_A
        assert not csrf_values(reader_html) and fragments.CSRF_PLACEHOLDER not in watcher_html + reader_html
        assert "task-head" not in other_html
        assert await database_sync_to_async(last_seq)(run) == seen  # progress wrote no event
        for comm in (watcher, reader, other):
            await comm.disconnect()

    async_to_sync(scenario)()


def test_live_pieces_from_a_host_reach_viewers_without_the_database(run, personas):
    from channels.layers import get_channel_layer

    from orchestrator.engine.live import LIVE_MESSAGE_TYPE

    task_id = running_task(run).task.pk
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        watcher = await connect_and_resume(cookie, run.pk, seen, watch=task_id)
        assert await watcher.receive_nothing(timeout=0.5)
        layer = get_channel_layer()
        group = events.run_group_name(run.pk)
        await layer.group_send(group, {"type": LIVE_MESSAGE_TYPE, "tasks": [[task_id, 20, 0, "Streaming "]]})
        await layer.group_send(group, {"type": LIVE_MESSAGE_TYPE, "tasks": [[task_id, 35, 10, "as it comes"]]})
        frame = await receive_live(watcher, lambda html: "Streaming as it comes" in html)
        assert f'data-tasks="{task_id}:35"' in frame
        await watcher.disconnect()

    async_to_sync(scenario)()


def test_a_save_older_than_what_viewers_were_sent_never_takes_the_bar_back(run, personas):
    """On the production profile the host publishes its progress every 0.25 s and saves it every
    few seconds: a save's frame re-rendered the task's row with the saved percentage and put that
    on top of it, so the bar stepped back (60% → 40%) until the next live message."""
    from channels.layers import get_channel_layer

    from orchestrator.engine import execution
    from orchestrator.engine.live import LIVE_MESSAGE_TYPE
    from orchestrator.providers.base import Usage

    claim = running_task(run)
    task_id, number = claim.task.pk, claim.attempt.number
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        watcher = await connect_and_resume(cookie, run.pk, seen)
        assert await watcher.receive_nothing(timeout=0.5)
        group = events.run_group_name(run.pk)
        pieces = [[task_id, 60, 0, "Sixty per cent", number]]
        await get_channel_layer().group_send(group, {"type": LIVE_MESSAGE_TYPE, "tasks": pieces})
        await receive_live(watcher, lambda html: f'data-tasks="{task_id}:60"' in html)
        # The host's save of a moment before: 40%, with the tokens streamed by then.
        await database_sync_to_async(execution.save_progress)([(claim, execution.Progress("Forty", 40, Usage(9, 21)))])
        frame = await receive_live(watcher, lambda html: f'id="task-{task_id}"' in html)
        assert 'data-tokens="30"' in frame  # the save's tokens reach the row …
        # … and the percentage put on top of the row is still the newest the viewer had.
        assert f'data-tasks="{task_id}:60"' in frame and f'data-tasks="{task_id}:40"' not in frame
        await watcher.disconnect()

    async_to_sync(scenario)()


def test_an_event_frame_that_redraws_a_running_row_keeps_the_percentage_viewers_had(run, personas):
    """An agent's step events redraw its row from the saved progress (40%), which is behind what the
    live messages brought (60%): the frame puts the newer percentage back on top of the row."""
    from channels.layers import get_channel_layer

    from orchestrator.engine.live import LIVE_MESSAGE_TYPE

    claim = running_task(run)
    task_id, number = claim.task.pk, claim.attempt.number
    TaskRun.objects.filter(pk=task_id).update(progress=40)
    cookie = cookies_for(personas["viewer"])

    def step():
        with events.atomic():
            events.record("agent.text", run=run, task=claim.task, payload={"attempt": number, "step": 1})

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        watcher = await connect_and_resume(cookie, run.pk, seen)
        assert await watcher.receive_nothing(timeout=0.5)  # (the broadcaster has joined the group)
        group = events.run_group_name(run.pk)
        pieces = [[task_id, 60, 0, "Sixty per cent", number]]
        await get_channel_layer().group_send(group, {"type": LIVE_MESSAGE_TYPE, "tasks": pieces})
        await receive_live(watcher, lambda html: f'data-tasks="{task_id}:60"' in html)
        await database_sync_to_async(step)()
        html = (await receive_until(watcher, seen + 1))[-1]
        row = re.search(rf'<div id="task-{task_id}" [^>]*>', html)
        assert row and 'data-progress="40"' in row.group(0)  # drawn as saved …
        assert f'data-tasks="{task_id}:60"' in html  # … with what the viewer had put on top
        assert html.index(f'id="task-{task_id}"') < html.index('id="live-progress"')
        await watcher.disconnect()

    async_to_sync(scenario)()


# --- Pacing (no database: the loop's clock in seconds) --------------------------------------------


def test_frames_are_at_least_the_minimum_interval_apart():
    pacing = broadcast.Pacing()
    assert pacing.pause(10.0) == 0  # the first round starts at once
    pacing.sent(10.0, 10.01)
    assert pacing.pause(10.01) == pytest.approx(broadcast.MIN_FRAME_INTERVAL_S)
    assert pacing.pause(10.01 + broadcast.MIN_FRAME_INTERVAL_S) == 0


def test_one_long_round_does_not_hold_back_the_next_frame():
    """A plan's approval redraws the whole table; the fan-out's burst right after it must not wait
    as long again."""
    pacing = broadcast.Pacing()
    pacing.sent(10.0, 10.0 + broadcast.PACING_ALLOWANCE_S * 0.9)
    ended = 10.0 + broadcast.PACING_ALLOWANCE_S * 0.9
    assert pacing.pause(ended) == pytest.approx(broadcast.MIN_FRAME_INTERVAL_S)


def test_long_rounds_in_a_row_take_at_most_half_of_the_time():
    pacing = broadcast.Pacing()
    now, busy = 0.0, 0.0
    for _ in range(40):
        now += pacing.pause(now)
        pacing.sent(now, now + 0.3)
        now += 0.3
        busy += 0.3
    # Beyond the allowance, every 0.3 s round is paid for with a 0.3 s pause (the last one's included).
    assert pacing.pause(now) == pytest.approx(0.3)
    assert busy <= (now + pacing.pause(now) + broadcast.PACING_ALLOWANCE_S) / 2 + 1e-9


def test_a_pause_is_never_longer_than_the_maximum_and_debt_does_not_pile_up():
    pacing = broadcast.Pacing()
    now = 0.0
    for _ in range(5):  # rounds far longer than the longest pause
        now += pacing.pause(now)
        pacing.sent(now, now + 5.0)
        now += 5.0
        assert pacing.pause(now) == pytest.approx(broadcast.MAX_FRAME_INTERVAL_S)
    now += broadcast.MAX_FRAME_INTERVAL_S
    pacing.sent(now, now + 0.01)  # rounds are quick again: the pace follows within one pause
    now += 0.01
    assert pacing.pause(now) <= broadcast.MAX_FRAME_INTERVAL_S
    now += pacing.pause(now)
    pacing.sent(now, now + 0.01)
    now += 0.01
    assert pacing.pause(now) == pytest.approx(broadcast.MIN_FRAME_INTERVAL_S)


def test_rounds_of_any_length_and_idle_gaps_stay_within_the_allowance_of_half_the_time():
    """At every round's start, the time spent in rounds exceeds the time spent outside them by at
    most the allowance (rounds no longer than the longest pause), whatever their mix."""
    rng = random.Random(7)
    for _ in range(200):
        pacing = broadcast.Pacing()
        now = busy = idle = 0.0
        for _ in range(100):
            gap = rng.choice([0.0, 0.0, rng.uniform(0, 0.5)])  # waiting for news
            pause = pacing.pause(now + gap)
            assert 0 <= pause <= broadcast.MAX_FRAME_INTERVAL_S
            idle += gap + pause
            now += gap + pause
            assert busy - idle <= broadcast.PACING_ALLOWANCE_S + 1e-9
            took = rng.choice([0.005, 0.03, rng.uniform(0, broadcast.MAX_FRAME_INTERVAL_S)])
            pacing.sent(now, now + took)
            busy += took
            now += took


def test_the_lanes_and_the_eta_follow_another_run_of_the_agent_without_an_event_of_this_run(run, personas, make_plan):
    """The other run's cancellation is not an event of this run: the poll of the agents' slots in
    other runs sends the lanes and the totals afresh (before, they read "+3 in other runs" until
    this run moved, and the ETA did not count the other run's slots at all)."""
    other = runs.launch(
        make_plan({k: ("researcher", []) for k in ("x", "y", "z")}, goal="Another run"), cap=3, budget_usd="5"
    )
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        viewer = await connect_and_resume(cookie, run.pk, seen)
        assert await viewer.receive_nothing(timeout=2 * broadcast.OTHER_RUNS_POLL_S)  # nothing changed yet
        await database_sync_to_async(runs.cancel)(other)
        lanes = await receive_live(viewer, lambda html: 'id="agent-lanes"' in html, frames=3)
        assert "1/4" in lanes and "in other runs" not in lanes
        assert 'id="run-totals"' in lanes and "busy in other runs for now" not in lanes
        assert await database_sync_to_async(last_seq)(run) == seen  # no event of this run
        await viewer.disconnect()

    page = fragments.render_parts(Run.objects.get(pk=run.pk), fragments.Viewer(False, False), {"lanes", "totals"})
    assert "1/4 +3 in other runs" in page  # what the page said before the other run ended
    assert "(3 slots busy in other runs for now)" in page
    async_to_sync(scenario)()


def test_the_frames_of_a_pause_and_a_resume_say_whether_the_run_admits_work(run, personas):
    """The pause's frame read "0 running of 2" and the writer's lane "idle" before."""
    cookie = cookies_for(personas["viewer"])

    async def scenario():
        seen = await database_sync_to_async(last_seq)(run)
        viewer = await connect_and_resume(cookie, run.pk, seen)
        await database_sync_to_async(runs.pause)(run)
        paused = await receive_until(viewer, await database_sync_to_async(last_seq)(run))
        await database_sync_to_async(runs.resume)(run)
        resumed = await receive_until(viewer, await database_sync_to_async(last_seq)(run))
        await viewer.disconnect()
        return "".join(paused), "".join(resumed)

    paused, resumed = async_to_sync(scenario)()
    assert "running · paused" in paused and "running of 2" not in paused
    assert "paused: nothing new starts until the run is resumed" in paused  # the writer's lane, not "idle"
    assert "running of 2" in resumed and "nothing new starts" not in resumed
