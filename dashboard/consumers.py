"""The live run view: one websocket per run at /ws/runs/<id>/.

LIVE_PROTOCOL
-------------
Client → server (JSON text frames):

* `{"type": "resume", "last_seq": N}` — "I have seen every event up to N; send what follows."
  The page sends it on every (re)connect with the last sequence number it applied (the page
  itself was rendered at a known number), and again whenever it notices a gap. Nothing is sent
  before the first resume.
* `{"type": "watch", "task": ID}` (or `"task": null`) — the task whose panel is open: its
  header, streamed output and attempts come along with its events.
* `{"type": "ping"}` — "are you there?": answered at once with the text frame `pong` (PONG). An
  idle run sends nothing, and a socket may stay open while nothing gets through: the page pings
  every few seconds and, when no word comes back, says so and reconnects (static/dashboard/run/live.js).

Server → client: HTML text frames of htmx out-of-band fragments, swapped by htmx-ext-ws. Each
frame starts with `<div id="live-seq" data-from=A data-to=B data-tasks=...>`: the frame brings
events A..B. Then come the parts those events changed, rendered from the same partial
templates as the page (`#run-header`, `#run-totals`, `#run-checkpoints`, `#agent-lanes`,
`#run-gantt`, `#run-result`, one `#task-<pk>` row per task touched — the row's data-*
attributes are also what static/dashboard/run/graph.js reads to colour the DAG's nodes — `#dag-graph` when the
plan's structure changed), and the log rows of the events themselves (prepended to
`#event-log-rows`), or, when they are more than a page of the log, that page in place of the
rows with `#event-log-more` from there, as a reload shows it. However many events a frame brings
to a viewer in step (a fan-out readies hundreds of tasks in one transaction), it carries only the
rows and parts they changed. A client that resumes farther behind than the log holds gets every
part and the log's page afresh (`data-full="1"`).

Delivery: events are numbered per run and the Event table is the record. The consumer keeps
the number of the last event it sent and sends everything after it, so it never skips one.
The run's broadcaster (dashboard/broadcast.py, one per run per process) does the work for all
of the run's viewers: it wakes up on a doorbell from the channel layer (events.ring_doorbell,
after each commit) and also polls the run's `last_event_seq` every POLL_S: on the embedded
default the in-memory channel layer does not reach across processes, so the workers' events
arrive through the poll. It renders each frame once per range of events and permission class
and hands every viewer its copy (with its own CSRF token); a viewer that is behind gets its own
catch-up frame. Frames go out at most every MIN_FRAME_INTERVAL_S (more apart when rendering
takes long, up to MAX_FRAME_INTERVAL_S), so a fast stream of progress events is coalesced: a
few updates a second per task at most, whatever the workers write or however many watch.

The consumer only reads (its one write is the audit entry of a refused connection): actions
go through the POST views, which check permissions.
"""

from __future__ import annotations

import json
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from orchestrator.governance.audit import record_denial
from orchestrator.models import Run

from . import broadcast, fragments
from .broadcast import MAX_FRAME_INTERVAL_S, MIN_FRAME_INTERVAL_S, POLL_S  # noqa: F401 - part of the protocol's description
from .permissions import VIEW_RUN

log = logging.getLogger(__name__)

# Close codes (4000-4999 are the application's): a refused connection is accepted, then closed with one.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404

# The answer to a client's ping: a text frame that is not HTML (the page drops it before htmx sees it).
PONG = "pong"

# An alias with no entry in CHANNEL_LAYERS: Channels then gives the consumer no channel layer.
NO_CHANNEL_LAYER = "none"


def _viewer_and_run(user, run_id: int, csrf_secret: str | None, path: str):
    """(viewer, None) when `user` may watch run `run_id`, else (None, close code).

    An anonymous caller, or a logged-in user without the permission, is refused like a page
    would refuse them: the denial is written to the audit log (the only write a consumer makes).
    """
    if user is None or not user.is_authenticated:
        record_denial(user, "authentication", action=f"WEBSOCKET {path}", run=run_id)
        return None, CLOSE_UNAUTHENTICATED
    if not user.has_perm(VIEW_RUN):
        record_denial(user, VIEW_RUN, action=f"WEBSOCKET {path}", run=run_id)
        return None, CLOSE_FORBIDDEN
    if not Run.objects.filter(pk=run_id).exists():
        return None, CLOSE_NOT_FOUND
    return fragments.Viewer.for_user(user, fragments.csrf_token_from_cookie(csrf_secret)), None


class RunConsumer(AsyncWebsocketConsumer):
    """One viewer's websocket: its cursor, permissions and watched task; the run's broadcaster
    sends its frames (`send_frame`)."""

    # No channel of its own on the channel layer: the run's broadcaster hears the doorbell for
    # every viewer. With one, Channels would read it for the socket's whole life, and any error
    # of that read (Redis down, a read timeout) would close the websocket with 1011: the live
    # view must go on by polling the event log when the channel layer is away.
    channel_layer_alias = NO_CHANNEL_LAYER

    async def connect(self):
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.cursor: int | None = None
        self.in_step = False  # the broadcaster sets it once it has sent a frame from the cursor
        self.watched: int | None = None
        self.broadcaster: broadcast.RunBroadcaster | None = None
        user = self.scope.get("user")
        cookie = (self.scope.get("cookies") or {}).get(settings.CSRF_COOKIE_NAME)
        self.viewer, refused = await database_sync_to_async(_viewer_and_run)(
            user, self.run_id, cookie, self.scope.get("path", "")
        )
        # Accepted first, then closed with the reason's code: a refusal before the handshake
        # completes reaches the browser as a bare HTTP 403, with no code to tell why.
        await self.accept()
        if refused:
            await self.close(code=refused)
            return
        self.broadcaster = broadcast.subscribe(self.run_id, self)

    async def disconnect(self, code):
        if self.broadcaster is not None:
            self.broadcaster = None
            await broadcast.unsubscribe(self.run_id, self)

    async def receive(self, text_data=None, bytes_data=None):
        try:
            message = json.loads(text_data or "")
            kind = message["type"]
        except (ValueError, TypeError, KeyError):
            log.debug("run %s: ignoring a malformed client message", self.run_id)
            return
        if kind == "resume":
            try:
                self.cursor = max(0, int(message.get("last_seq") or 0))
            except (TypeError, ValueError):
                return
            self.in_step = False  # the page says where it is: it may have missed more than events
            if self.broadcaster is not None:
                self.broadcaster.wake.set()
        elif kind == "ping":
            await self.send(text_data=PONG)
        elif kind == "watch":
            task = message.get("task")
            self.watched = int(task) if isinstance(task, int) or (isinstance(task, str) and task.isdigit()) else None

    async def send_frame(self, html: str) -> None:
        await self.send(text_data=html)
