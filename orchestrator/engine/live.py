"""Live progress: what viewers see of running attempts, sent without the database (DESIGN §9).

Streamed output and progress are live-only: they are not events and never touch the run row.
An agent host's `Publisher` sends, a few times a second, one message per run with the progress
and the new text of each of the run's attempts it runs, to the run's channel group (the viewers'
broadcaster in daphne picks it up: dashboard/broadcast.py). Each text piece carries its offset in
the output, so a viewer that missed a message (the channel layer is at-most-once) notices and
reads the output saved on the task row instead, which the host saves every few seconds
(GLASSBOX_PROGRESS_SAVE_S).

Where the channel layer cannot reach daphne (the embedded default's in-memory layer), nothing is
sent: the broadcaster polls the saved progress of the runs people watch.

The publisher also rings the run's doorbell for new events, coalesced: one message per run per
beat at most, carrying the last event number.

Messages, to the group of the run:

* ``{"type": "run.live", "tasks": [[task id, progress %, offset, text, attempt number], ...]}``:
  progress and output (the attempt's number: a viewer never shows an attempt's progress going
  back, and a new attempt's starting again).

An agent loop's steps (engine/tool_attempt.py) are not sent here: each is an Event of its task,
written in small batches, and viewers read it after the doorbell like any other event.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from orchestrator import events

if TYPE_CHECKING:
    from orchestrator.engine.agent_runner import AttemptRun
    from orchestrator.engine.host import AgentHost

log = logging.getLogger(__name__)

LIVE_S = 0.25
# How long closing waits for a send under way to give up (a channel layer that does not answer).
CLOSE_S = 2.0
LIVE_MESSAGE_TYPE = "run.live"


class Publisher:
    """Sends a host's live progress and doorbells from its event loop."""

    def __init__(self, host: AgentHost):
        self.host = host
        self.enabled = events.layer_reaches_viewers()
        self.doorbells: dict[int, int] = {}
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._loop(), name="glassbox-live") if self.enabled else None

    def doorbell(self, run_id: int, seq: int) -> None:
        if not self.enabled:
            return
        self.doorbells[run_id] = max(seq, self.doorbells.get(run_id, 0))
        self._wake.set()

    def forget(self, attempt: AttemptRun) -> None:
        """Nothing to do: an ended attempt simply stops appearing in messages."""

    async def close(self) -> None:
        """Stop sending. Bounded: a send stuck on the channel layer is left to the loop's end."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=CLOSE_S)

    async def _loop(self) -> None:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is None:
            return
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=LIVE_S)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._send(layer)
            except Exception:  # best effort: viewers also read the saved progress and the event log
                log.debug("live progress not sent", exc_info=True)
            await asyncio.sleep(0.02)  # coalesce what arrives together

    async def _send(self, layer) -> None:
        bells, self.doorbells = self.doorbells, {}
        for run_id, seq in bells.items():
            await layer.group_send(events.run_group_name(run_id), {"type": "run.event", "seq": seq})
        attempts = list(self.host.attempts.values())
        for run_id, pieces in changes(attempts).items():
            await layer.group_send(events.run_group_name(run_id), {"type": LIVE_MESSAGE_TYPE, "tasks": pieces})


def changes(attempts: list[AttemptRun]) -> dict[int, list[list]]:
    """Per run, the progress and new text of the attempts that changed since they were last sent
    (and marks them sent)."""
    by_run: dict[int, list[list]] = {}
    for attempt in attempts:
        output, progress = attempt.progress.output, attempt.progress.progress
        if len(output) == attempt.published_length and progress == attempt.published_progress:
            continue
        offset = attempt.published_length if len(output) >= attempt.published_length else 0
        piece = [attempt.task_id, progress, offset, output[offset:], attempt.number]
        by_run.setdefault(attempt.run_id, []).append(piece)
        attempt.published_length, attempt.published_progress = len(output), progress
    return by_run
