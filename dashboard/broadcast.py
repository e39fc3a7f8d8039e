"""One live feed per run per process: render each frame once, send it to every viewer it fits.

A `RunBroadcaster` serves all the websockets (dashboard/consumers.py) watching one run in this
process. It alone hears the run's doorbell (one channel in the run's group) and polls the run's
`last_event_seq`, and at most every MIN_FRAME_INTERVAL_S it brings every viewer up to the
latest event in one round:

* viewers are grouped by the last event they were sent (their cursor): viewers in step share a
  cursor, a viewer that is behind (it just connected, reconnected or asked again after a gap)
  has its own and gets its own catch-up render. After a round every viewer is at the latest
  event, so viewers that diverged are in step again;
* a viewer in step (its cursor is the last frame this feed sent it) gets a live batch however
  many events the round brings: a fan-out's hundreds of events in one transaction are sent as
  the rows and parts they changed. Only a viewer that resumed far behind (more events than the
  log holds) gets the full refresh (frames.render_run_batch says why);
* for each cursor, the run's parts and log rows are rendered once per permission class
  (`Viewer.shared()`: which controls the viewer may see, and whether its forms carry a CSRF
  token at all), and the panel of a watched task once per (class, task);
* each viewer gets that HTML with its own CSRF token put in (`Viewer.personalise`, a string
  replace) — byte for byte what `frames.render_batch` renders for it alone.

Pacing is per run, as it was per viewer (`Pacing`): frames at least MIN_FRAME_INTERVAL_S apart,
and rounds that take long space the next ones out (as long a pause as they took, up to
MAX_FRAME_INTERVAL_S: at most half of the broadcaster's time goes to rounds), beyond a small
allowance, so that one long round alone (a plan's approval redraws the whole table) does not
hold back the frame after it (the fan-out's burst that follows). The poll counts from the last
round's start, so a round does not also delay the next poll; after a round longer than half
the poll, the poll waits as long as the round, so that an idle run's polls cannot take a loaded
database's time back to back. The broadcaster starts with the run's first viewer and stops with
its last.

The broadcasters of an event loop read the database on threads of their own (`LiveDatabase`),
whose connections stay open while anyone watches: `database_sync_to_async` closes the connection
after every call when connections are not persistent (the advice under ASGI), and reopening a
PostgreSQL connection three times a round was most of a round's time (5 of 7 ms hops, 29 ms in
all for a 7 ms render). A round is one database job: the latest event and the frames.

Running tasks' progress and streamed output are not events (orchestrator/engine/live.py). They
reach the broadcaster two ways: the agent hosts' live messages on the channel layer (progress and
output pieces with their offsets, a few times a second, when the layer is shared), and the poll of
what the hosts saved on the task rows (every few seconds; the only way on the embedded default).
`LiveOutputs` (dashboard/live_outputs.py) merges both; each round also sends a live frame: the
changed percentages (#live-progress) to every viewer and the streamed output to the viewers of
that task's panel.
A save also saved the tokens streamed so far: the frame of a round that read one carries the
rows of the tasks saved and the agent lanes afresh, and the head of such a task's open panel
(once per permission class), so that row, panel and lane say the same tokens.

The agent lanes count the slots other runs hold of each agent ("1/4 +3 in other runs"), which
change with other runs' events, not with this run's. Every OTHER_RUNS_POLL_S the broadcaster
reads those counts (`lanes.slots_elsewhere`) and, when they changed, sends every viewer the lanes
and the totals afresh (the effective cap and the ETA count the slots other runs hold).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol

from channels.layers import get_channel_layer

from orchestrator.db_threads import DatabaseThreads
from orchestrator.engine.live import LIVE_MESSAGE_TYPE
from orchestrator.events import run_group_name
from orchestrator.readmodels import lanes as run_lanes
from orchestrator.readmodels import log as run_log
from orchestrator.readmodels.snapshot import part_of_snapshot, read_snapshot

from . import fragments, frames
from .live_outputs import LiveOutputs

log = logging.getLogger(__name__)

# The embedded default's only news of the workers' events (its channel layer does not reach
# across processes): an event waited for the poll ~60 ms on average at 0.1 s (make bench-live).
# An idle poll is two small indexed reads (the latest event, the saved progress).
POLL_S = 0.05
# At 20 events a second an event waited up to a whole interval for its frame: 0.1 s made the p95
# event-to-screen 135 ms on Redis (docs/benchmarks.md). With a small frame of a 200-task run at
# ~12 ms, 0.05 -> 0.025 s took bench-live's other events' p95 ~115 -> ~90 ms on Redis.
MIN_FRAME_INTERVAL_S = 0.025
# A round that took long to render (a large run, many viewers far behind) spaces the next ones
# out: a pause as long as the round, at most this much, so that the live view takes at most
# half of the server's time. (Twice the round held a fan-out's burst ~250 ms behind the plan's
# approval frame on a 200-task run: bench-live p95 313 -> 124 ms on Redis.)
MAX_FRAME_INTERVAL_S = 2.0
# How far rounds may run ahead of that half-time pace. Paying for every round with a pause as long
# held a 200-task run's fan-out burst behind the plan approval's round (which redraws the whole
# table: 100-250 ms on a loaded machine) for as long again: most of bench-live's p95 on Redis.
PACING_ALLOWANCE_S = 0.25
# How often the broadcaster reads its agents' slots in other runs (the lanes' "+3 in other runs"):
# no event of this run tells when another run of the same agent starts or ends a task. A grouped
# count of the agents' active tasks, twice a second.
OTHER_RUNS_POLL_S = 0.5
# After a render failed: how long to wait before trying again.
RETRY_AFTER_ERROR_S = 1.0
# After the channel layer failed: how long before listening for doorbells again (doubling).
LAYER_RETRY_BASE_S = 1.0
LAYER_RETRY_MAX_S = 30.0
# How often a group membership is renewed on a layer that does not say its group expiry.
GROUP_RENEW_DEFAULT_S = 30.0
# How long stopping waits for the doorbell listener to end by itself before cancelling it.
LISTENER_STOP_TIMEOUT_S = 3.0
STOP_MESSAGE = "broadcaster.stop"


class Subscriber(Protocol):
    """A websocket watching the run (RunConsumer): what the broadcaster reads and calls."""

    viewer: fragments.Viewer
    cursor: int | None  # the last event sent (None until the client's first resume)
    watched: int | None  # the task whose panel is open
    in_step: bool  # the cursor is the last frame the broadcaster sent (False after a resume)

    async def send_frame(self, html: str) -> None: ...


# Where a viewer's frame starts: (its cursor, whether it is in step). Viewers that would get the
# same frame share a start: `in_step` is True also for a viewer that resumed close enough behind
# for a live batch (frames.render_run_batch), so that it shares its cursor's render.
Start = tuple[int, bool]


def start_of(cursor: int, in_step: bool, latest: int) -> Start:
    return cursor, in_step or latest - cursor <= run_log.LOG_LIMIT


@dataclass
class Round:
    """The frames of one round, each rendered once: what to send to whom."""

    latest: int
    # start -> permission class -> the run's parts and log after that start (None: nothing new)
    runs: dict[Start, dict[fragments.Viewer, frames.Batch | None]] = field(default_factory=dict)
    # (start, permission class, task) -> that task's panel parts
    panels: dict[tuple[Start, fragments.Viewer, int], str] = field(default_factory=dict)
    renders: int = 0
    # Running tasks, among those asked for, as of the round's snapshot: task id -> (attempt, saved
    # percent). Their rows are drawn with the saved percent (LiveOutputs.over_saved says why).
    running: dict[int, tuple[int, int]] = field(default_factory=dict)

    def frame_for(self, viewer: fragments.Viewer, start: Start, watched: int | None) -> tuple[str, int] | None:
        """(HTML, last event) for a viewer at `start` watching `watched` (None: nothing)."""
        shared = viewer.shared()
        batch = self.runs.get(start, {}).get(shared)
        if batch is None:
            return None
        panel = self.panels[(start, shared, watched)] if watched else ""
        return viewer.personalise(batch.html + panel), batch.to_seq


def render_round(run_id: int, latest: int, wanted: dict[Start, set[tuple[fragments.Viewer, int | None]]]) -> Round:
    """Render, once each, the frames that bring viewers at these starts up to event `latest`.

    `wanted`: (cursor, in step) -> {(permission class, watched task or None), ...} of the viewers
    there. A render that fails is logged and leaves its viewers out of this round (they are served
    by the next one); the others still get theirs.
    """
    result = Round(latest)
    for start, keys in wanted.items():
        cursor, in_step = start
        per_class = result.runs.setdefault(start, {})
        for shared, watched in sorted(
            keys, key=lambda k: (k[0].can_control, k[0].can_decide, k[0].csrf_token, k[1] or 0)
        ):
            if shared not in per_class:
                try:
                    with part_of_snapshot():
                        per_class[shared] = frames.render_run_batch(
                            run_id, cursor, shared, upto=latest, in_step=in_step
                        )
                    result.renders += 1
                except Exception:  # a bad render must not end the live view: log it, try again later
                    log.exception("run %s: could not render the events after %s", run_id, cursor)
                    per_class[shared] = None
            batch = per_class[shared]
            if batch is None or not watched or (start, shared, watched) in result.panels:
                continue
            try:
                with part_of_snapshot():
                    result.panels[(start, shared, watched)] = frames.render_watched_panel(
                        run_id, batch, shared, watched
                    )
            except Exception:
                log.exception("run %s: could not render the panel of task %s", run_id, watched)
                per_class[shared] = None  # no frame without its panel: the next round tries again
    return result


class Pacing:
    """When a run's next round may start: at least MIN_FRAME_INTERVAL_S after the last frame, and
    late enough that rounds take at most half of the time — each round is paid for with a pause as
    long, of which PACING_ALLOWANCE_S may be owed (a pause is never longer than
    MAX_FRAME_INTERVAL_S). Times are the event loop's clock, in seconds."""

    def __init__(self) -> None:
        self.last_frame = -math.inf
        self.paid_until = -math.inf  # when the round time not yet paid for with a pause is paid

    def pause(self, now: float) -> float:
        """How long to wait before a round that would start at `now` (0: start it now)."""
        owed = self.paid_until - now - PACING_ALLOWANCE_S
        return min(MAX_FRAME_INTERVAL_S, max(0.0, MIN_FRAME_INTERVAL_S - (now - self.last_frame), owed))

    def sent(self, began: float, ended: float) -> None:
        """A round that sent frames ran from `began` to `ended`."""
        owed = max(0.0, self.paid_until - began) + (ended - began)
        self.paid_until = ended + min(owed, MAX_FRAME_INTERVAL_S + PACING_ALLOWANCE_S)
        self.last_frame = ended


class RunBroadcaster:
    def __init__(self, run_id: int):
        self.run_id = run_id
        self.subscribers: set[Subscriber] = set()
        self.wake = asyncio.Event()
        self.rounds = 0  # rounds that sent something (for tests and logs)
        self.live = LiveOutputs()
        self._saved_since = None  # the newest saved progress seen (the poll's cursor)
        self._seeded: set[int] = set()  # watched tasks whose saved output was read once
        self._elsewhere: dict[int, int] | None = None  # the agents' slots in other runs, as last read
        self._elsewhere_read_at = -math.inf
        self.layer_failures = 0  # failed attempts to hear the doorbell since it last worked
        self._task: asyncio.Task | None = None
        self._doorbell: asyncio.Task | None = None
        self._channel: str | None = None  # the doorbell listener's channel on the layer
        self._stopped = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._serve(), name=f"live-run-{self.run_id}")
        self._doorbell = asyncio.create_task(self._listen(), name=f"live-run-{self.run_id}-doorbell")

    async def stop(self) -> None:
        self._stopped = True
        await self._stop_listening()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # stopping: nothing to report to
                pass

    async def _stop_listening(self) -> None:
        """End the doorbell listener by a message on its own channel rather than by cancelling it.

        A cancellation that lands in channels_redis's blocking read can be lost (the read goes on
        forever, and `stop` with it); the message ends the read normally, the listener sees
        `_stopped` and leaves the group. Cancelling is the fallback when the layer does not answer.
        """
        task, layer, channel = self._doorbell, get_channel_layer(), self._channel
        if task is None or task.done():
            return
        if layer is not None and channel is not None:
            try:
                await asyncio.wait_for(layer.send(channel, {"type": STOP_MESSAGE}), LISTENER_STOP_TIMEOUT_S)
            except Exception:  # the layer is down: the listener is between retries, cancelling works
                log.debug("run %s: could not send the stop message", self.run_id, exc_info=True)
            done, _ = await asyncio.wait({task}, timeout=LISTENER_STOP_TIMEOUT_S)
            if done:
                return
        task.cancel()
        await asyncio.wait({task}, timeout=LISTENER_STOP_TIMEOUT_S)

    async def _listen(self) -> None:
        """Ring `wake` on every doorbell of the run (events.ring_doorbell, after each commit).

        The doorbell only hastens what the poll brings anyway, so a channel layer that fails
        (Redis down or restarting) is retried with backoff, said once in the log, and meanwhile
        the viewers are served by the poll alone.
        """
        layer = get_channel_layer()
        if layer is None:
            return  # no channel layer: the poll alone brings the events
        while not self._stopped:
            try:
                await self._hear_doorbells(layer)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.layer_failures += 1
                if self.layer_failures == 1:
                    log.warning(
                        "run %s: the channel layer is unreachable (%s); live viewers are served by polling",
                        self.run_id,
                        type(error).__name__,
                    )
                await asyncio.sleep(min(LAYER_RETRY_MAX_S, LAYER_RETRY_BASE_S * 2 ** (self.layer_failures - 1)))

    async def _hear_doorbells(self, layer) -> None:
        """Join the run's group with a new channel and listen on it, renewing the membership
        every third of the layer's group expiry (a dead daphne's channels then leave the group)."""
        group = run_group_name(self.run_id)
        channel = self._channel = await layer.new_channel()
        await layer.group_add(group, channel)
        if self.layer_failures:
            log.warning("run %s: the channel layer is reachable again", self.run_id)
            self.layer_failures = 0
        renew = asyncio.create_task(self._renew_membership(layer, group, channel))
        try:
            while not self._stopped:
                message = await layer.receive(channel)
                if message.get("type") == "run.event":
                    self.wake.set()
                elif message.get("type") == LIVE_MESSAGE_TYPE:
                    self.live.add_pieces(message.get("tasks") or [], self.watched())
                    self.wake.set()
        finally:
            renew.cancel()
            try:
                await asyncio.shield(self._leave_group(layer, group, channel, renew))
            except Exception:  # the layer is down: the membership expires by itself
                log.debug("run %s: could not leave the group", self.run_id, exc_info=True)

    @staticmethod
    async def _leave_group(layer, group: str, channel: str, renew: asyncio.Task) -> None:
        """Leave the group once the renewal has stopped: a renewal still on its way to Redis,
        on another connection of the layer's pool, could otherwise add the channel back after
        it left (it would then stay until the group expiry)."""
        await asyncio.wait({renew}, timeout=LISTENER_STOP_TIMEOUT_S)
        await layer.group_discard(group, channel)

    @staticmethod
    async def _renew_membership(layer, group: str, channel: str) -> None:
        interval = max(1.0, getattr(layer, "group_expiry", GROUP_RENEW_DEFAULT_S * 3) / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await layer.group_add(group, channel)
            except Exception:  # the receive fails too and the listener starts afresh
                log.debug("could not renew %s in %s", channel, group, exc_info=True)

    def _check_stop(self) -> None:
        """End the loop when stopped. A cancellation that arrives while a database call runs in
        its thread is swallowed by asgiref (it waits for the call and returns its result), so
        the loop also looks at the flag and at the task's pending cancellations."""
        task = asyncio.current_task()  # None only outside a task, where nothing can cancel it
        if self._stopped or (task is not None and task.cancelling()):
            raise asyncio.CancelledError

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        began = took = 0.0
        pacing = Pacing()
        while True:
            self._check_stop()
            # The poll counts from the last round's start, so a round does not also delay it; after
            # a round longer than half the poll (a loaded database) it waits as long as the round.
            next_poll = began + max(POLL_S, 2 * took)
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=max(0.0, next_poll - loop.time()))
            except TimeoutError:
                pass
            self.wake.clear()
            if not any(s.cursor is not None for s in self.subscribers):
                began, took = loop.time(), 0.0
                continue
            pause = pacing.pause(loop.time())
            if pause > 0:
                await asyncio.sleep(pause)
            began = loop.time()
            try:
                sent = await self._round()
                sent = await self._live_round() or sent
                sent = await self._other_runs_round(began) or sent
            except Exception:  # a failed poll must not end the live view: log it, try again later
                log.exception("run %s: live round failed", self.run_id)
                await asyncio.sleep(RETRY_AFTER_ERROR_S)
                continue
            took = loop.time() - began
            if sent:
                pacing.sent(began, began + took)

    async def _round(self) -> bool:
        """Bring every viewer that is behind up to the latest event; whether anything was sent."""
        viewers = {s: (s.cursor, s.in_step, s.watched) for s in self.subscribers if s.cursor is not None}
        if not viewers:
            return False
        found = await LiveDatabase.of_loop().run(
            catch_up,
            self.run_id,
            [(cursor, s.viewer.shared(), watched, in_step) for s, (cursor, in_step, watched) in viewers.items()],
            tasks=set(self.live.shown),
        )
        self._check_stop()
        if found is None:
            return False
        latest, result = found
        # The rows this round redraws show the saved percentages: put back what viewers were sent.
        ahead = frames.render_live_progress(self.live.over_saved(result.running))
        behind = {s: v for s, v in viewers.items() if v[0] < latest}
        sent = False
        for subscriber, (cursor, in_step, watched) in behind.items():
            if subscriber not in self.subscribers or subscriber.cursor != cursor:
                continue  # gone, or a resume arrived while rendering: the next round starts from it
            frame = result.frame_for(subscriber.viewer, start_of(cursor, in_step, latest), watched)
            if frame is None:
                continue
            html, to_seq = frame
            try:
                await subscriber.send_frame(html + ahead)
            except Exception:  # one closed socket must not stop the others' frames
                log.debug("run %s: could not send a frame to a viewer", self.run_id, exc_info=True)
                continue
            if subscriber.cursor == cursor:
                subscriber.cursor = to_seq
                subscriber.in_step = True
            sent = True
        if sent:
            self.rounds += 1
        return sent

    def watched(self) -> set[int]:
        return {s.watched for s in self.subscribers if s.watched}

    async def _live_round(self) -> bool:
        """Send running tasks' progress, and the streamed output to their panels' viewers."""
        watched = self.watched()
        seed = watched - self._seeded
        saved = await LiveDatabase.of_loop().run(
            frames.saved_progress, self.run_id, self._saved_since, watched, seed=seed
        )
        self._check_stop()
        self._seeded = (self._seeded & watched) | seed
        self._saved_since = saved.latest
        self.live.add_saved(saved)
        progress, outputs = self.live.take(watched)
        if not progress and not outputs:
            return False
        # A save also saved the tokens streamed so far: the rows and the lanes (and the heads of
        # the panels open on those tasks) show them, before the percentages put on top of them.
        saved_tasks = set(saved.progress)
        rows = await LiveDatabase.of_loop().run(frames.render_saved_rows, self.run_id, saved_tasks)
        heads: dict[tuple[fragments.Viewer, int], str] = {}
        for subscriber in list(self.subscribers):
            key = (subscriber.viewer.shared(), subscriber.watched or 0)
            if subscriber.cursor is not None and key[1] in saved_tasks and key not in heads:
                heads[key] = await LiveDatabase.of_loop().run(frames.render_task_head, self.run_id, key[1], key[0])
        shared = frames.render_live_progress(progress)
        panels = {
            task_id: await LiveDatabase.of_loop().run(frames.render_live_output, self.run_id, task_id, text)
            for task_id, text in outputs.items()
        }
        self._check_stop()

        def html_for(subscriber: Subscriber) -> str:
            head = heads.get((subscriber.viewer.shared(), subscriber.watched or 0), "")
            return rows + subscriber.viewer.personalise(head) + shared + panels.get(subscriber.watched or 0, "")

        return await self._send_live(html_for)

    async def _other_runs_round(self, now: float) -> bool:
        """Every OTHER_RUNS_POLL_S: when the agents' slots in other runs changed since the last
        read, send every viewer the lanes and the totals afresh (their "+N in other runs", the
        effective cap and the ETA would otherwise wait for this run's next event). The first read only sets what later ones compare with."""
        if now - self._elsewhere_read_at < OTHER_RUNS_POLL_S:
            return False
        self._elsewhere_read_at = now
        elsewhere = await LiveDatabase.of_loop().run(run_lanes.slots_elsewhere, self.run_id)
        self._check_stop()
        known, self._elsewhere = self._elsewhere, elsewhere
        if known is None or known == elsewhere:
            return False
        html = await LiveDatabase.of_loop().run(frames.render_slots_elsewhere, self.run_id)
        self._check_stop()
        return await self._send_live(lambda subscriber: html)

    async def _send_live(self, html_for: Callable[[Subscriber], str]) -> bool:
        """Send a frame that is not events (no #live-seq) to every viewer that has resumed:
        `html_for` each one ("" sends nothing). Whether anything was sent."""
        sent = False
        for subscriber in list(self.subscribers):
            if subscriber.cursor is None:
                continue
            html = html_for(subscriber)
            if not html:
                continue
            try:
                await subscriber.send_frame(html)
                sent = True
            except Exception:  # one closed socket must not stop the others' frames
                log.debug("run %s: could not send a live frame to a viewer", self.run_id, exc_info=True)
        return sent


def catch_up(
    run_id: int, viewers: list[tuple[int, fragments.Viewer, int | None, bool]], *, tasks: AbstractSet[int] = frozenset()
) -> tuple[int, Round] | None:
    """One round's database work: the run's latest event and the frames of the viewers (their
    cursors, permission classes, watched tasks and whether they are in step) that are behind it,
    with the attempt and saved percent of those of `tasks` still running (`Round.running`);
    None when nobody is behind. Its reads share one snapshot (readmodels.snapshot): every part
    of a frame, and the event number it ends at, show the same moment of the run."""
    with read_snapshot():
        latest = frames.latest_seq(run_id)
        if latest is None:
            return None
        wanted: dict[Start, set] = defaultdict(set)
        for cursor, shared, watched, in_step in viewers:
            if cursor < latest:
                wanted[start_of(cursor, in_step, latest)].add((shared, watched))
        if not wanted:
            return None
        result = render_round(run_id, latest, dict(wanted))
        result.running = frames.running_progress(run_id, tasks) if tasks else {}
        return latest, result


class LiveDatabase:
    """The database threads of one event loop's broadcasters: started with its first broadcaster,
    shut down (their connections closed) with its last."""

    THREADS = 2  # one run's long render does not hold up another's round
    _of_loop: dict[asyncio.AbstractEventLoop, LiveDatabase] = {}

    def __init__(self) -> None:
        self.threads = DatabaseThreads(self.THREADS, name="glassbox-live-db")

    @classmethod
    def of_loop(cls) -> LiveDatabase:
        loop = asyncio.get_running_loop()
        found = cls._of_loop.get(loop)
        if found is None:
            found = cls._of_loop[loop] = cls()
        return found

    async def run(self, fn, /, *args, **kwargs):
        return await asyncio.wrap_future(self.threads.submit(fn, *args, **kwargs))

    @classmethod
    async def close_if_unused(cls) -> None:
        loop = asyncio.get_running_loop()
        if any(key[0] is loop for key in _broadcasters):
            return
        found = cls._of_loop.pop(loop, None)
        if found is not None:
            await asyncio.to_thread(found.threads.shutdown)


# One broadcaster per (event loop, run): daphne has one loop; tests run each scenario in a new one.
_broadcasters: dict[tuple[asyncio.AbstractEventLoop, int], RunBroadcaster] = {}


def subscribe(run_id: int, subscriber: Subscriber) -> RunBroadcaster:
    """Add a websocket to the run's broadcaster, starting it for the run's first viewer."""
    key = (asyncio.get_running_loop(), run_id)
    broadcaster = _broadcasters.get(key)
    if broadcaster is None:
        broadcaster = _broadcasters[key] = RunBroadcaster(run_id)
        broadcaster.start()
    broadcaster.subscribers.add(subscriber)
    return broadcaster


async def unsubscribe(run_id: int, subscriber: Subscriber) -> None:
    """Remove a websocket; the run's last viewer leaving stops its broadcaster."""
    key = (asyncio.get_running_loop(), run_id)
    broadcaster = _broadcasters.get(key)
    if broadcaster is None:
        return
    broadcaster.subscribers.discard(subscriber)
    if not broadcaster.subscribers:
        del _broadcasters[key]  # before awaiting: a viewer arriving meanwhile starts a new one
        await broadcaster.stop()
        await LiveDatabase.close_if_unused()


def broadcaster_for(run_id: int) -> RunBroadcaster | None:
    """The running broadcaster of a run in this event loop, if any viewer watches it."""
    return _broadcasters.get((asyncio.get_running_loop(), run_id))
