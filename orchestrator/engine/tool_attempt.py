"""An attempt of an agent that holds tool grants: the agent loop, wired to the engine (DESIGN §10).

``agent_runner`` hands such an attempt here instead of streaming one completion. It runs
``agent_loop.run_agent_loop`` inside the attempt's :class:`~orchestrator.tools.toolbox.Toolbox`
(the run's workspace as the servers' working directory), with the agent's ``max_steps`` and the
task's timeout as the deadline (time spent waiting for people does not count), and answers the
loop's hooks:

* ``on_step``: each step becomes a durable audit event of the task (``Step.event_type``, its
  ``payload()`` and the attempt's number), written behind the loop in batches by
  :class:`StepLog` (one transaction a batch, numbered through the run's event sequence: never the
  run row); viewers read it after the run's doorbell like any other event (engine/live.py sends
  progress and text, not steps).
* ``on_text``: the streamed text feeds the live output, as a plain completion's does, the turns'
  texts apart as the outcome joins them; an end without success keeps it as the task's partial
  output (``agent_runner`` hands it to every end, the cut turn's text too).
* ``on_usage``: every model call's usage is added to the attempt's, which the heartbeat saves and
  every end records, so nothing is dropped on failure, timeout or cancellation.
* ``reserve``: before every model call after the first, the run's budget must cover another
  call's worst case (``settlement.reserve_call``), and the call takes its share of the provider's
  per-minute budgets (``settlement.take_call_rate``), waiting while they are used up; admission
  reserved both for the first. What a call took is corrected to what it used when its usage
  arrives (``settlement.settle_call_rate``). A call that waits is a step of the path: a
  ``rate_wait`` step when the wait starts (which budget holds it), a ``rate_waited`` step when it
  ends, however it ends (with how long); a call that does not wait writes nothing.
* ``approve``: a call of a tool granted with approval opens a tool checkpoint and waits for a
  person's decision (engine/tool_approvals.py), polling it on the database threads; the task's
  cancellation (seen by the host's heartbeat, or by the poll itself) ends the wait.
* ``on_feedback``: a provider's rate-limit report is applied as for any attempt.

The caller records the attempt's end from the :class:`~orchestrator.engine.agent_loop.LoopOutcome`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from orchestrator import events
from orchestrator.db_threads import run as db
from orchestrator.engine import execution, feedback, settlement, tool_approvals
from orchestrator.engine.admission import THROTTLE_RECHECK_S, TokenReservation
from orchestrator.engine.agent_loop import LoopHooks, LoopOutcome, StreamingProvider, run_agent_loop
from orchestrator.engine.agent_steps import Decision, ModelCallUsage, Step, ToolCall, capped_arguments
from orchestrator.engine.context import own_tokens_bound
from orchestrator.engine.execution import Claim
from orchestrator.models import Checkpoint
from orchestrator.providers.base import AgentRequest, ProviderFeedback, TextDelta, Usage, get_provider
from orchestrator.tools import full_results
from orchestrator.tools.servers import ServerGrant
from orchestrator.tools.toolbox import Toolbox
from orchestrator.tools.workspace import run_directory

if TYPE_CHECKING:
    from orchestrator.engine.agent_runner import AttemptRun

log = logging.getLogger(__name__)

# How often a call awaiting approval reads its checkpoint (and whether its task still runs).
APPROVAL_POLL_S = 1.0


class StepLog:
    """An attempt's steps as audit events, written behind the loop: a step waits only for the
    write under way, and whatever arrived meanwhile is written next, in one transaction."""

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        self._pending: list[Step] = []
        self._writer: asyncio.Task[None] | None = None

    def add(self, step: Step) -> None:
        self._pending.append(step)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name=f"steps-{self.claim.attempt.pk}")

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await db(record_steps, self.claim, batch)
            except Exception:  # the audit trail must not fail the attempt; the log says what was lost
                log.exception("attempt %s: %s step event(s) not written", self.claim.attempt.pk, len(batch))

    async def flush(self) -> None:
        """Every step so far is written (also when the caller is being cancelled)."""
        while self._writer is not None and not self._writer.done():
            writer = self._writer
            try:
                await asyncio.shield(writer)
            except asyncio.CancelledError:
                await writer
                raise


def record_steps(claim: Claim, steps: list[Step]) -> None:
    """Write steps of an attempt as events of its task, in one transaction. A tool result too long
    for its event is first kept whole (tools/full_results.py) for the attempt's page."""
    task = claim.task
    for step in steps:
        if step.kind == "tool_result":
            try:
                full_results.keep(task.run_id, task.pk, claim.attempt.number, step.call_id, step.result_full)
            except (OSError, ValueError):  # the event keeps its preview; the page says only that was kept
                log.exception("attempt %s: the whole result of call %s not kept", claim.attempt.pk, step.call_id)
    with events.atomic():
        for step in steps:
            events.record(
                step.event_type,
                run=task.run_id,
                task=task,
                actor_name=f"agent:{task.agent.name}",
                message=step.sentence(),
                payload={"attempt": claim.attempt.number, **step.payload()},
            )


def input_tokens_bound(request: AgentRequest) -> int:
    """A bound of the input tokens of a request with its conversation and tools (4 chars a token)."""
    tools = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in request.tools]
    conversation = json.dumps(request.conversation(), ensure_ascii=False, default=str)
    return own_tokens_bound(request.system_prompt, conversation, json.dumps(tools, default=str))


class Hooks:
    """The loop's hooks for one attempt (see the module docstring)."""

    def __init__(self, current: AttemptRun, deadline: float = float("inf")) -> None:
        self.current = current
        self.claim = current.claim
        self.steps = StepLog(current.claim)
        self.calls: list[Usage] = []
        self.model_calls = 0
        self.text_step = 0
        # The loop's deadline (monotonic), later by the time spent waiting for people (summed, so
        # never earlier than the loop's own): a call held by a rate budget waits no longer.
        self.deadline = deadline
        self.call_rate: TokenReservation | None = None  # what the call under way took (after the first)

    def loop_hooks(self) -> LoopHooks:
        return LoopHooks(
            on_step=self.on_step,
            on_usage=self.on_usage,
            reserve=self.reserve,
            approve=self.approve,
            on_text=self.on_text,
            on_feedback=self.on_feedback,
        )

    async def on_step(self, step: Step) -> None:
        self.steps.add(step)

    async def on_text(self, step: int, delta: TextDelta) -> None:
        # The turns' texts apart as the outcome joins them; a turn's empty deltas (usage only) start nothing.
        # The call's output so far counts as used on top of the calls that ended, as on the plain
        # path: the panel, the lanes and the Tokens card said "0" beside a first answer streaming;
        # the progress is the attempt's whole output so far against its expected output.
        written = sum(u.output_tokens for u in self.calls) + delta.output_tokens
        if delta.text and step != self.text_step:
            if self.current.progress.output:
                self.current.add_text(TextDelta("\n\n", delta.output_tokens), written)
            self.text_step = step
        self.current.add_text(delta, written)
        self.current.count_output(written)

    async def on_usage(self, call: ModelCallUsage) -> None:
        self.calls.append(call.usage)
        self.current.set_usage(total(self.calls))
        taken, self.call_rate = self.call_rate, None
        if taken is not None and call.complete:  # cut short: what it took stays taken (never under)
            await db(settlement.settle_call_rate, self.claim, taken, call.usage)

    async def reserve(self, request: AgentRequest) -> bool:
        self.model_calls += 1
        if self.model_calls == 1:
            return True  # admission reserved the first call
        input_tokens = input_tokens_bound(request)
        if not await db(settlement.reserve_call, self.claim, input_tokens, self.current.progress.usage):
            return False
        held: Step | None = None  # the wait's first step, once a budget holds the call
        held_at = 0.0
        try:
            while True:
                why, wait_s, taken = await db(settlement.take_call_rate, self.claim, input_tokens)
                if why is None:
                    self.call_rate = taken
                    return True
                if held is None:  # one step when the wait starts, not one per recheck
                    held, held_at = Step(kind="rate_wait", step=self.model_calls, wait=why.code), time.monotonic()
                    self.steps.add(held)
                left = self.deadline - time.monotonic()
                if left <= 0:  # the loop's clock has run out too: it ends the attempt (timed out), no call
                    return True
                await asyncio.sleep(min(wait_s, THROTTLE_RECHECK_S, left))
        finally:
            if held is not None:  # however the wait ended: the call went out, time ran out, or cancelled
                self.steps.add(replace(held, kind="rate_waited", duration_s=time.monotonic() - held_at))

    async def on_feedback(self, report: ProviderFeedback) -> None:
        await db(feedback.apply, report)

    async def approve(self, call: ToolCall) -> Decision:
        if call.tool is None:  # the loop asks only for granted tools
            return Decision(False, "not granted")
        asked = tool_approvals.Asked(
            call_id=call.id,
            name=call.name,
            server=call.tool.server,
            tool=call.tool.tool,
            arguments=capped_arguments(call.arguments),
        )
        await self.steps.flush()  # the call is in the audit log before anyone is asked about it
        checkpoint_id = await db(tool_approvals.open_checkpoint, self.claim, asked)
        decided = False
        asked_at = time.monotonic()
        try:
            while True:
                answer = await db(tool_approvals.read, checkpoint_id)
                # Checked first: a run's cancellation closes its checkpoints, which is no rejection.
                await self._still_ours()
                if not answer.pending:
                    decided = True
                    return Decision(answer.status == Checkpoint.Status.APPROVED, answer.comment, answer.decided_by)
                await asyncio.sleep(APPROVAL_POLL_S)
        finally:
            self.deadline += time.monotonic() - asked_at
            if not decided:
                why = f"the attempt ended while waiting ({self.current.stop_reason or 'stopped'})"
                closing = asyncio.ensure_future(db(tool_approvals.close, checkpoint_id, why))
                try:
                    await asyncio.shield(closing)
                except asyncio.CancelledError:
                    await closing
                    raise

    async def _still_ours(self) -> None:
        """Stop the attempt when its task was cancelled or lost meanwhile (the host's heartbeat
        says so too; this also holds where no heartbeat runs)."""
        gone = await db(execution.still_ours, [self.claim])
        if self.claim.task.pk in gone:
            from orchestrator.engine.agent_runner import CANCELLED, LOST

            self.current.stop(CANCELLED if gone[self.claim.task.pk] == "cancelled" else LOST)
            await asyncio.sleep(0)  # the cancellation lands here


def total(usages: list[Usage]) -> Usage:
    return Usage(
        input_tokens=sum(u.input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        cache_read_tokens=sum(u.cache_read_tokens for u in usages),
        cache_creation_tokens=sum(u.cache_creation_tokens for u in usages),
    )


async def run_loop(current: AttemptRun, request: AgentRequest, grants: list[ServerGrant]) -> LoopOutcome:
    """Run the agent loop for this attempt; every step written before it returns or raises."""
    claim = current.claim
    deadline = time.monotonic() + request.timeout_s
    hooks = Hooks(current, deadline)
    try:
        async with Toolbox(grants, cwd=run_directory(claim.task.run_id)) as toolbox:
            # Every provider's stream is an async generator (closed with aclose), as the loop needs.
            provider = cast(StreamingProvider, get_provider(request.provider))
            return await run_agent_loop(
                provider,
                request,
                toolbox,
                hooks.loop_hooks(),
                max_steps=claim.task.agent.max_steps,
                deadline=deadline,
            )
    finally:
        await hooks.steps.flush()
