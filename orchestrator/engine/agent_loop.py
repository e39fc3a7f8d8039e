"""The agent loop: a model that calls tools, turn after turn, as one pure async function.

``run_agent_loop`` is what one attempt of an agent with tools does (DESIGN §10, issue 12):

1. ask the model (``provider.stream``), offering the agent's granted tools only;
2. if the model asked for tools, run the calls of that turn concurrently, send their results back
   as the next user message, and go to 1;
3. stop at the model's end of turn, at ``max_steps`` model calls, at the deadline, or when the
   budget hook says another model call cannot be covered.

It touches no database and no engine state: everything it learns goes out through the hooks
(:class:`LoopHooks`), and the caller (the runtime) decides what becomes of it. The core decides,
the adapters report: providers only stream what the model said; tools only return results.

* **Steps.** Every text, tool call (with its arguments), approval, result (with its duration and
  error; the call's own duration, its server's start-up apart), refusal and model call is reported to ``on_step`` as a ``Step`` (engine/agent_steps.py,
  with the hooks' other values): the glass box shows them live and the runtime keeps them as audit
  events (``Step.event_type``, ``Step.payload()``: arguments and results capped, the whole result
  in ``Step.result_full`` for the attempt's detail).
* **Usage.** Every model call's usage goes to ``on_usage`` as soon as it is known, also when the
  call fails, times out or is cancelled (then with the usage the stream reported so far and the
  output tokens seen so far, marked incomplete). Nothing is summed only at the end, so a failure at step 5 loses nothing of steps 1–4.
* **Refusals.** A tool the model asks for that was not granted (it was never offered) is not
  called: the model is told so in the tool's result, and a ``tool_refused`` step is reported.
* **Approvals.** A call of a tool granted with approval awaits ``approve(call)``; a rejection is
  sent to the model as the tool's result, with the person's comment. Time spent waiting for a
  person does not count against the deadline.
* **Failures.** A tool's failure is its result (the model may adapt). A provider's error
  (:class:`ProviderError`) and cancellation propagate to the caller, after the usage is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from orchestrator import wording
from orchestrator.engine.agent_steps import Decision, ModelCallUsage, Step, ToolCall
from orchestrator.providers.base import (
    AgentRequest,
    Completed,
    ProviderError,
    ProviderFeedback,
    StreamItem,
    TextDelta,
    ToolSpec,
    ToolUse,
    Usage,
    UsageSoFar,
)
from orchestrator.tools.results import ToolResult
from orchestrator.tools.servers import GrantedTool

# Why a loop can end, besides the model's own stop reasons (end_turn, max_tokens, stop_sequence…).
MAX_STEPS, DEADLINE, BUDGET = "max_steps", "deadline", "budget"


class StreamingProvider(Protocol):
    """What the loop needs of a provider: ``stream`` as an async generator of stream items."""

    def stream(self, request: AgentRequest) -> AsyncGenerator[StreamItem, None]: ...


class ToolRunner(Protocol):
    """What the loop needs of the tools (orchestrator.tools.toolbox.Toolbox is one)."""

    def specs(self) -> list[ToolSpec]: ...

    def lookup(self, name: str) -> GrantedTool | None: ...

    async def call(self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None) -> ToolResult: ...


class NoTools:
    """The runner of an agent without grants: nothing offered, everything refused."""

    def specs(self) -> list[ToolSpec]:
        return []

    def lookup(self, name: str) -> GrantedTool | None:
        return None

    async def call(self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None) -> ToolResult:
        return ToolResult.error(f"tool {name!r} is not granted to this agent")


async def _always(_: AgentRequest) -> bool:
    return True


async def _no_approver(call: ToolCall) -> Decision:
    return Decision(False, "no one can approve tool calls here")


@dataclass
class LoopHooks:
    """How the loop talks to its caller. Only ``on_step`` and ``on_usage`` are required.

    ``reserve(request)``: called before every model call (the first one too) with the request about
    to be sent; False means the budget cannot cover it and the loop stops (``budget``).
    ``approve(call)``: a person's decision on a call of a tool granted with approval.
    ``on_text(step, delta)``: the streamed text as it comes (live only; the whole text of a turn
    is also reported as a ``text`` step). ``on_feedback``: a provider's rate-limit report.
    """

    on_step: Callable[[Step], Awaitable[None]]
    on_usage: Callable[[ModelCallUsage], Awaitable[None]]
    reserve: Callable[[AgentRequest], Awaitable[bool]] = _always
    approve: Callable[[ToolCall], Awaitable[Decision]] = _no_approver
    on_text: Callable[[int, TextDelta], Awaitable[None]] | None = None
    on_feedback: Callable[[ProviderFeedback], Awaitable[None]] | None = None


@dataclass
class LoopOutcome:
    """How the loop ended. ``stop``: the model's stop reason (end_turn, max_tokens …) or one of
    max_steps, deadline, budget. ``output``: the last turn's text when the model ended its turn,
    else every text of the attempt, in order."""

    output: str
    stop: str
    steps: int
    usage: Usage
    messages: list[dict[str, Any]]
    tool_calls: int = 0
    simulated: bool = False
    texts: list[str] = field(default_factory=list)
    waited_for_people_s: float = 0.0  # not counted against the deadline (`_Clock.pause`)

    @property
    def finished(self) -> bool:
        """The model ended on its own (not stopped by a limit)."""
        return self.stop not in (MAX_STEPS, DEADLINE, BUDGET)


class _Clock:
    """The deadline, not counting time spent waiting for people (overlapping waits count once)."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.paused = 0.0
        self.waiting = 0
        self.since = 0.0

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        now = time.monotonic()
        paused = self.paused + (now - self.since if self.waiting else 0.0)
        return self.deadline + paused - now

    def expired(self) -> bool:
        remaining = self.remaining()
        return remaining is not None and remaining <= 0

    @contextlib.contextmanager
    def pause(self):
        if not self.waiting:
            self.since = time.monotonic()
        self.waiting += 1
        try:
            yield
        finally:
            self.waiting -= 1
            if not self.waiting:
                self.paused += time.monotonic() - self.since


async def run_agent_loop(
    provider: StreamingProvider,
    request: AgentRequest,
    tools: ToolRunner,
    hooks: LoopHooks,
    *,
    max_steps: int,
    deadline: float | None = None,
) -> LoopOutcome:
    """Run the agent until it ends its turn or a limit stops it (see the module docstring).

    ``request`` is the first call's request (prompt or messages, model, max_tokens …); its
    ``tools`` are replaced by the runner's. ``deadline`` is a ``time.monotonic()`` value.
    Raises ProviderError (after reporting the failed call's usage) and CancelledError.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, not {max_steps}")
    clock = _Clock(deadline)
    messages = list(request.conversation())
    offered = tools.specs()
    total = Usage()
    texts: list[str] = []
    calls_made = 0
    simulated = False
    step = 0
    while True:
        step += 1
        call = replace(request, messages=list(messages), tools=offered)
        if clock.expired():
            return await _out_of_time(hooks, step, clock, total, messages, texts, calls_made, simulated)
        if not await hooks.reserve(call):
            reason = "the budget cannot cover another model call"
            return await _stop(hooks, step, BUDGET, reason, total, messages, texts, calls_made, simulated)
        turn = await _model_call(provider, call, step, clock, hooks)
        if turn is None:
            return await _out_of_time(hooks, step, clock, total, messages, texts, calls_made, simulated)
        completed, text, uses, duration = turn
        simulated = simulated or completed.simulated
        _add(total, completed.usage)
        if text:
            texts.append(text)
            await hooks.on_step(Step(kind="text", step=step, text=text))
        await hooks.on_step(
            Step(
                kind="model_call",
                step=step,
                stop_reason=completed.stop_reason,
                duration_s=duration,
                usage=completed.usage,
            )
        )
        if not uses:
            output = text if completed.stop_reason in ("end_turn", "stop_sequence") else "\n\n".join(texts)
            return LoopOutcome(
                output=output,
                stop=completed.stop_reason,
                steps=step,
                usage=total,
                messages=messages + [{"role": "assistant", "content": completed.content or _text_blocks(text)}],
                tool_calls=calls_made,
                simulated=simulated,
                texts=texts,
            )
        messages.append({"role": "assistant", "content": completed.content or _assistant_blocks(text, uses)})
        results = await _run_calls(tools, hooks, clock, step, uses)
        calls_made += len(uses)
        messages.append(
            {"role": "user", "content": [_result_block(use, result) for use, result in zip(uses, results, strict=True)]}
        )
        if step >= max_steps:
            reason = f"{wording.counted(max_steps, 'model call')} made, the agent's max_steps"
            return await _stop(hooks, step, MAX_STEPS, reason, total, messages, texts, calls_made, simulated)


async def _model_call(
    provider: StreamingProvider, request: AgentRequest, step: int, clock: _Clock, hooks: LoopHooks
) -> tuple[Completed, str, list[ToolUse], float] | None:
    """One streamed model call: (completed, its text, its tool calls, seconds), or None when the
    deadline cut it. Its usage is reported whatever happens."""
    started = time.monotonic()
    chunks: list[str] = []
    uses: list[ToolUse] = []
    output_tokens = 0  # seen in the text so far
    so_far = Usage()  # as the stream last reported it
    reported = False
    timeout = asyncio.timeout(clock.remaining())
    try:
        async with timeout, contextlib.aclosing(provider.stream(request)) as stream:
            async for item in stream:
                if isinstance(item, TextDelta):
                    output_tokens = max(output_tokens, item.output_tokens)
                    if item.text:
                        chunks.append(item.text)
                    if hooks.on_text is not None:
                        await hooks.on_text(step, item)
                elif isinstance(item, UsageSoFar):
                    so_far = item.usage
                elif isinstance(item, ToolUse):
                    uses.append(item)
                elif isinstance(item, ProviderFeedback):
                    if hooks.on_feedback is not None:
                        await hooks.on_feedback(item)
                elif isinstance(item, Completed):
                    reported = True
                    await hooks.on_usage(ModelCallUsage(step=step, usage=item.usage))
                    return item, "".join(chunks), uses, time.monotonic() - started
        raise ProviderError("the provider's stream ended without a final message")
    except TimeoutError:
        if not timeout.expired():
            raise
        await _report_partial(hooks, step, so_far, output_tokens, reported)
        return None
    except BaseException:
        await _report_partial(hooks, step, so_far, output_tokens, reported)
        raise


async def _report_partial(hooks: LoopHooks, step: int, so_far: Usage, output_tokens: int, reported: bool) -> None:
    """A call cut short: what the stream reported (its input tokens), with the output seen so far."""
    if not reported:
        usage = replace(so_far, output_tokens=max(so_far.output_tokens, output_tokens))
        await hooks.on_usage(ModelCallUsage(step=step, usage=usage, complete=False))


async def _run_calls(
    tools: ToolRunner, hooks: LoopHooks, clock: _Clock, step: int, uses: list[ToolUse]
) -> list[ToolResult]:
    """The turn's tool calls, concurrently; results in the order the model asked for them."""
    results: list[ToolResult] = [ToolResult.error("not run")] * len(uses)

    async def one(index: int, use: ToolUse) -> None:
        results[index] = await _run_call(tools, hooks, clock, step, use)

    try:
        async with asyncio.TaskGroup() as group:
            for index, use in enumerate(uses):
                group.create_task(one(index, use))
    except BaseExceptionGroup as errors:  # a hook failed: the first error, as itself
        raise errors.exceptions[0] from None
    return results


async def _run_call(tools: ToolRunner, hooks: LoopHooks, clock: _Clock, step: int, use: ToolUse) -> ToolResult:
    granted = tools.lookup(use.name)
    if granted is None:
        reason = f"tool {use.name!r} is not granted to this agent; only the tools offered can be called"
        await hooks.on_step(
            Step(kind="tool_refused", step=step, call_id=use.id, tool=use.name, arguments=use.input, text=reason)
        )
        return ToolResult.error(reason)
    where: dict[str, Any] = {"call_id": use.id, "tool": use.name, "server": granted.server, "server_tool": granted.tool}
    await hooks.on_step(
        Step(kind="tool_call", step=step, arguments=use.input, approval_required=granted.requires_approval, **where)
    )
    if granted.requires_approval:
        with clock.pause():
            waited = time.monotonic()
            decision = await hooks.approve(
                ToolCall(step=step, id=use.id, name=use.name, arguments=use.input, tool=granted)
            )
        await hooks.on_step(
            Step(
                kind="approval",
                step=step,
                approved=decision.approved,
                comment=decision.comment,
                duration_s=time.monotonic() - waited,
                decided_by=decision.decided_by,
                **where,
            )
        )
        if not decision.approved:
            comment = decision.comment.strip().rstrip(".")  # the sentence ends here, once
            said = f": {comment}" if comment else ""
            result = ToolResult.error(f"A person rejected this call of {use.name}{said}. It was not run.")
            await _report_result(hooks, step, where, result, 0.0)
            return result
    started = time.monotonic()
    remaining = clock.remaining()
    if not isinstance(use.input, dict):
        result = ToolResult.error(f"the arguments of {use.name} must be a JSON object, not {type(use.input).__name__}")
    elif remaining is not None and remaining <= 0:
        result = ToolResult.error(f"{use.name} was not run: the task's time is up")
    else:
        try:
            result = await tools.call(use.name, use.input, timeout_s=remaining)
        except Exception as exc:  # a runner's bug fails the call, not the attempt
            result = ToolResult.error(f"{use.name} failed: {type(exc).__name__}: {exc}")
    # The runner's own measure when it has one: a server's start-up is not the call's time.
    took = result.duration_s if result.duration_s is not None else time.monotonic() - started
    await _report_result(hooks, step, where, result, took)
    return result


async def _report_result(
    hooks: LoopHooks, step: int, where: dict[str, Any], result: ToolResult, seconds: float
) -> None:
    await hooks.on_step(
        Step(
            kind="tool_result",
            step=step,
            result=result.text,
            result_full=result.full_text or result.text,
            result_chars=result.full_chars or len(result.text),
            truncated=result.truncated,
            is_error=result.is_error,
            duration_s=seconds,
            server_start_s=result.server_start_s,
            **where,
        )
    )


async def _out_of_time(
    hooks: LoopHooks,
    step: int,
    clock: _Clock,
    total: Usage,
    messages: list[dict[str, Any]],
    texts: list[str],
    calls: int,
    simulated: bool,
) -> LoopOutcome:
    """Stopped by the deadline, with the time its clock did not count (calls waiting for people)."""
    reason = "the task's time is up"
    return await _stop(hooks, step, DEADLINE, reason, total, messages, texts, calls, simulated, waited_s=clock.paused)


async def _stop(
    hooks: LoopHooks,
    step: int,
    stop: str,
    reason: str,
    total: Usage,
    messages: list[dict[str, Any]],
    texts: list[str],
    calls: int,
    simulated: bool,
    *,
    waited_s: float = 0.0,
) -> LoopOutcome:
    await hooks.on_step(Step(kind="stopped", step=step, stop_reason=stop, text=reason))
    steps = step if stop == MAX_STEPS else step - 1
    return LoopOutcome(
        output="\n\n".join(texts),
        stop=stop,
        steps=steps,
        usage=total,
        messages=messages,
        tool_calls=calls,
        simulated=simulated,
        texts=texts,
        waited_for_people_s=waited_s,
    )


def _add(total: Usage, usage: Usage) -> None:
    total.input_tokens += usage.input_tokens
    total.output_tokens += usage.output_tokens
    total.cache_read_tokens += usage.cache_read_tokens
    total.cache_creation_tokens += usage.cache_creation_tokens


def _text_blocks(text: str) -> list[dict[str, Any]] | str:
    return [{"type": "text", "text": text}] if text else ""


def _assistant_blocks(text: str, uses: list[ToolUse]) -> list[dict[str, Any]]:
    """The assistant turn in the Messages API's shape, for a provider that gave no content blocks."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return blocks + [{"type": "tool_use", "id": u.id, "name": u.name, "input": u.input} for u in uses]


def _result_block(use: ToolUse, result: ToolResult) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use.id, "content": result.text}
    if result.is_error:
        block["is_error"] = True
    return block
