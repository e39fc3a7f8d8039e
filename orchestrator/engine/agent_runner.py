"""One attempt's course inside an agent host (DESIGN §9): claim, stream the answer, end it.

An `AttemptRun` is what the host knows of an attempt while it runs: its claim, the output and
usage so far, and why the host stopped it if it did ("cancelled", "lost", "shutdown"). The host's
heartbeat reads and saves that state for all of its attempts at once (orchestrator/engine/host.py);
this module only moves one attempt forward:

    claim → build the request → stream the provider's answer under the task's timeout
          → record the end (succeeded, failed, timed out, cancelled, handed back, discarded)

An agent that holds tool grants runs the agent loop instead of one completion
(engine/tool_attempt.py: model calls and tool calls turn after turn, each step an audit event and
a live message, calls granted with approval waiting for a person); its end is recorded the same
way, from how the loop stopped. An agent without grants takes the plain path, unchanged.

Every database step runs on the host's database threads (`db_threads.run`); the event loop only
waits. Usage is never dropped: the last usage the provider reported is recorded however the
attempt ends. Nor is the text: whatever the attempt wrote (on either path) goes with every end
that is not a success (failed, timed out, cancelled, handed back, lost), which keeps it as the
task's partial output (engine/attempt_ends.py); the host's saves alone lost what came after the
last of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Protocol

from orchestrator import wording
from orchestrator.db_threads import run as db
from orchestrator.engine import agent_loop, attempt_ends, cost_estimates, execution, feedback, tool_attempt
from orchestrator.engine.agent_loop import LoopOutcome
from orchestrator.engine.execution import Claim, Progress
from orchestrator.governance.tool_registry import granted_servers
from orchestrator.models import Attempt
from orchestrator.providers.base import (
    AgentRequest,
    Completed,
    ProviderError,
    ProviderFeedback,
    ProviderTimeout,
    TextDelta,
    Usage,
    UsageSoFar,
    get_provider,
)

log = logging.getLogger(__name__)

# Why the host stopped an attempt (AttemptRun.stop_reason), and what that attempt's end is then.
CANCELLED, LOST, SHUTDOWN = "cancelled", "lost", "shutdown"


@dataclass
class AttemptRun:
    """A running attempt as its host sees it."""

    claim: Claim
    expected_output: int = 1  # output tokens its answer is expected to take (`expected_output`)
    progress: Progress = field(default_factory=Progress)
    saved_version: int = 0  # the `version` last saved to the database
    published_length: int = 0  # how much of the output viewers were sent live
    published_progress: int = 0
    version: int = 0  # bumped on every change of the output, progress or usage
    stop_reason: str | None = None
    task: asyncio.Task | None = None
    # True while the attempt waits on its provider: only then may the host interrupt it. Once it
    # records its end, that database step must finish whatever happens (it checks the lease).
    interruptible: bool = False
    keep: int = 0  # admitted attempts its success may keep for its host to run (scheduler.advance)
    started: float = field(default_factory=time.monotonic)
    tracker: Tracker | None = None

    @property
    def task_id(self) -> int:
        return self.claim.task.pk

    @property
    def run_id(self) -> int:
        return self.claim.task.run_id

    @property
    def number(self) -> int:
        """The attempt's number (1 for a task's first)."""
        return self.claim.attempt.number

    def add_text(self, delta: TextDelta, written: int | None = None) -> None:
        """Add streamed text; the progress is the attempt's output tokens so far (`written`, its
        model calls' together, else the delta's count: its one call's) against its expected output,
        held at 99 until it ends."""
        if delta.text:
            self.progress.output += delta.text
        so_far = delta.output_tokens if written is None else written
        self.progress.progress = min(99, int(100 * so_far / max(1, self.expected_output)))
        self.version += 1

    def set_usage(self, usage: Usage) -> None:
        self.progress.usage = usage
        self.version += 1

    def count_output(self, output_tokens: int) -> None:
        """The output tokens the stream has written so far count as used, above what the provider
        last reported: an attempt that fails, times out or is cancelled part-way keeps them (the
        provider bills what it generated; the Messages API reports its own count only at the end)."""
        if output_tokens > self.progress.usage.output_tokens:
            self.set_usage(replace(self.progress.usage, output_tokens=output_tokens))

    def stop(self, reason: str) -> None:
        """Stop this attempt from outside (the host): it ends as the reason says. An attempt that
        is already recording its end is left to finish it (the record checks the lease)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            if self.interruptible and self.task is not None:
                self.task.cancel()


class Tracker(Protocol):
    """Where a host keeps its running attempts (host.AgentHost is one)."""

    def track(self, attempt: AttemptRun) -> None: ...

    def untrack(self, attempt: AttemptRun) -> None: ...

    async def succeed(self, claim: Claim, output: str, usage: Usage, *, keep: int) -> str:
        """Record a success and take its run's scheduling step, keeping up to `keep` of the
        attempts it admits for the caller (`claim.kept`); returns the outcome in words. A host
        records the successes of one run that end together in one transaction."""
        ...


# How long a worker process keeps an agent's expected output: a read per agent a minute, not one
# on the path from each attempt's claim to its provider call.
EXPECTED_OUTPUT_TTL_S = 60.0
_expected_outputs: dict[tuple[int, str, int], tuple[float, int]] = {}


async def expected_output(agent) -> int:
    """The output tokens an attempt of `agent` is expected to write (cost_estimates.expected_output_tokens),
    read at most once a minute per agent, model and output limit in this process."""
    key = (agent.pk, agent.model, agent.max_output_tokens)
    known = _expected_outputs.get(key)
    now = time.monotonic()
    if known is None or now - known[0] > EXPECTED_OUTPUT_TTL_S:
        known = (now, await db(cost_estimates.expected_output_tokens, agent))
        _expected_outputs[key] = known
    return known[1]


async def run_attempt(tracker: Tracker, attempt_id: int, worker: str, *, keep: int = 0) -> tuple[str, Claim | None]:
    """Claim attempt `attempt_id` and run it to its end. Returns (outcome, claim or None); a
    success also advances the run, keeping up to `keep` admitted attempts for the caller
    (`claim.advanced`, `claim.kept`)."""
    claim = await db(execution.claim_attempt, attempt_id, worker)
    if claim is None:
        log.info("attempt %s is not ours to run (already claimed, finished or cancelled)", attempt_id)
        return "not claimed", None
    return await run_claimed(tracker, claim, keep=keep), claim


async def run_claimed(tracker: Tracker, claim: Claim, *, keep: int = 0) -> str:
    """Run a claimed attempt to its end and record it; returns the outcome in words."""
    current = AttemptRun(claim, expected_output=await expected_output(claim.task.agent), keep=keep, tracker=tracker)
    current.task = asyncio.current_task()
    tracker.track(current)
    try:
        try:
            current.interruptible = True
            assert claim.request is not None  # built by the claim
            grants = await db(granted_servers, claim.task.agent) if claim.has_tool_grants is not False else []
            if grants:
                return await _act(current, claim.request, grants)
            return await _stream(current, claim.request)
        except asyncio.CancelledError:
            if current.stop_reason is None:
                raise  # not ours: the loop itself is going away
            uncancel()
            return await _stopped(current)
        except Exception as exc:  # an agent's bug must not kill the host: it is a failed attempt
            current.interruptible = False
            log.exception("attempt %s crashed", claim.attempt.pk)
            message = f"{type(exc).__name__}: {exc}"
            return await record(
                attempt_ends.fail, claim, message, usage=current.progress.usage, output=current.progress.output
            )
    finally:
        tracker.untrack(current)


async def _stream(current: AttemptRun, request: AgentRequest) -> str:
    claim = current.claim
    usage = lambda: current.progress.usage  # noqa: E731 - the usage at the moment of the end
    try:
        completed = None
        # Closed here, not by the garbage collector: the provider's connection goes back before
        # the end is recorded, and a cancellation closes it in this task, on this loop.
        stream = contextlib.aclosing(get_provider(request.provider).stream(request))
        async with asyncio.timeout(request.timeout_s), stream as items:
            async for item in items:
                if isinstance(item, TextDelta):
                    current.add_text(item)
                    current.count_output(item.output_tokens)
                elif isinstance(item, UsageSoFar):
                    current.set_usage(item.usage)
                elif isinstance(item, ProviderFeedback):
                    await db(feedback.apply, item)
                elif isinstance(item, Completed):
                    current.set_usage(item.usage)
                    completed = item
                    break
        if completed is None:
            raise ProviderError("the provider's stream ended without a final message")
        current.interruptible = False
        return await succeed(current, current.progress.output, completed.usage)
    except TimeoutError:
        current.interruptible = False
        message = f"timed out after {wording.time_limit(request.timeout_s)}"
        timed_out = Attempt.State.TIMED_OUT
        return await record(
            attempt_ends.fail, claim, message, attempt_state=timed_out, usage=usage(), output=current.progress.output
        )
    except ProviderError as exc:
        return await _provider_failed(current, exc)


async def _provider_failed(current: AttemptRun, exc: ProviderError) -> str:
    current.interruptible = False
    claim, usage, output = current.claim, current.progress.usage, current.progress.output
    if isinstance(exc, ProviderTimeout):
        timed_out = Attempt.State.TIMED_OUT
        return await record(attempt_ends.fail, claim, str(exc), attempt_state=timed_out, usage=usage, output=output)
    if exc.feedback is not None:
        await db(feedback.apply, exc.feedback)
    return await record(attempt_ends.fail, claim, str(exc), error=exc, usage=usage, output=output)


async def _act(current: AttemptRun, request: AgentRequest, grants) -> str:
    """An agent with tools: the agent loop, then the attempt's end from how the loop stopped."""
    try:
        outcome = await tool_attempt.run_loop(current, request, grants)
    except ProviderError as exc:
        return await _provider_failed(current, exc)
    current.interruptible = False
    claim, usage = current.claim, current.progress.usage
    if outcome.finished:
        return await succeed(current, outcome.output, usage)
    # Stopped by a limit: what it wrote so far stays readable on the task (every turn's text, the
    # one the deadline cut too: the outcome's holds whole turns only), and the end says why.
    message = loop_stop_message(outcome, request, claim.task.agent.max_steps)
    output = current.progress.output
    if outcome.stop == agent_loop.DEADLINE:
        timed_out = Attempt.State.TIMED_OUT
        return await record(attempt_ends.fail, claim, message, attempt_state=timed_out, usage=usage, output=output)
    # max_steps and budget: another attempt would stop at the same limit, so the task fails now.
    final = ProviderError(message, retryable=False)
    return await record(attempt_ends.fail, claim, message, error=final, usage=usage, output=output)


def loop_stop_message(outcome: LoopOutcome, request: AgentRequest, max_steps: int) -> str:
    """Why an agent loop did not finish, in words a person can act on."""
    calls = f"{wording.counted(outcome.steps, 'model call')} and {wording.counted(outcome.tool_calls, 'tool call')}"
    if outcome.stop == agent_loop.DEADLINE:
        limit = wording.time_limit(request.timeout_s)
        if waited := outcome.waited_for_people_s:  # the deadline's clock stops while a call waits
            limit += f" (not counting {wording.duration(waited)} waiting for approval)"
        # "after 0 model calls" read as if nothing was spent: the deadline cut the first one
        done = f"after {calls}" if outcome.steps or outcome.tool_calls else "during its first model call"
        return f"timed out after {limit}, {done}"
    if outcome.stop == agent_loop.MAX_STEPS:
        return (
            f"stopped unfinished after {calls}: the agent's max_steps is {max_steps}; "
            "raise it in the agent registry or narrow the task"
        )
    return (
        f"stopped unfinished after {calls}: the run's budget cannot cover another model call; "
        "raise the run's budget and retry the task"
    )


async def succeed(current: AttemptRun, output: str, usage: Usage) -> str:
    """Record a success, and its run's scheduling step, through the attempt's tracker."""
    assert current.tracker is not None
    return await current.tracker.succeed(current.claim, output, usage, keep=current.keep)


async def _stopped(current: AttemptRun) -> str:
    """Record the end of an attempt its host stopped (cancellation, lost lease, shutdown)."""
    current.interruptible = False
    claim, usage, output = current.claim, current.progress.usage, current.progress.output
    if current.stop_reason == CANCELLED:
        return await record(attempt_ends.cancel_attempt, claim, usage, output)
    if current.stop_reason == SHUTDOWN:
        return await record(attempt_ends.hand_back, claim, usage, output=output)
    return await record(attempt_ends.discard_late, claim, usage, "lease lost while running", output)


async def record(step, /, *args, **kwargs) -> str:
    """Run an end-recording step to completion even if the host stops the attempt meanwhile: the
    step checks the lease itself, and a step cut off half-way in its thread would be recorded
    twice (once by itself, once by the stop's own end)."""
    job = asyncio.ensure_future(db(step, *args, **kwargs))
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        uncancel()
        return await job


def uncancel() -> None:
    """Clear the host's cancellation of the current task, so that it can still record its end."""
    task = asyncio.current_task()
    if task is not None:
        while task.cancelling():
            task.uncancel()
