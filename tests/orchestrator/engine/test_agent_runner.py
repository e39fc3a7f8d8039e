"""One attempt's course in the agent host: what it does with the provider's stream as it ends."""

from __future__ import annotations

import asyncio
import threading

import pytest

from orchestrator import db_threads
from orchestrator.engine import agent_runner, attempt_ends, execution, runs
from orchestrator.models import Attempt
from orchestrator.providers.base import Completed, Provider, TextDelta, Usage, UsageSoFar
from orchestrator.readmodels.records import PartialOutputRecord
from tests.conftest import NoHost, Stopping, run_attempt, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class RecordingProvider(Provider):
    """A provider that notes in `log` when its stream is closed, and whose stream, once started,
    either answers at once or (`hold`) never ends."""

    name = "simulated"

    def __init__(self, log: list[str], *, hold: bool = False) -> None:
        self.log, self.hold = log, hold

    async def stream(self, request):
        try:
            yield UsageSoFar(Usage(input_tokens=10))  # as the Messages API's message_start
            yield TextDelta(text="An answer.", output_tokens=3)
            if self.hold:
                await asyncio.Event().wait()
            yield Completed(usage=Usage(input_tokens=10, output_tokens=3), stop_reason="end_turn", simulated=True)
        finally:
            self.log.append("stream closed")

    def estimate_duration_s(self, agent, output_tokens: int) -> float:
        return 0.0


def recording(monkeypatch, log: list[str], name: str) -> None:
    """Note in `log` when attempt_ends.`name` (an attempt's end) is called."""
    real = getattr(attempt_ends, name)

    def noting(*args, **kwargs):
        log.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(attempt_ends, name, noting)


class NotingHost(NoHost):
    """No host, but one that notes in `log` when an attempt hands it its success."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def succeed(self, claim, output, usage, *, keep: int) -> str:
        self.log.append("success handed over")
        return await super().succeed(claim, output, usage, keep=keep)


def test_the_providers_stream_is_closed_before_the_success_is_handed_over(make_agent, make_plan, monkeypatch):
    """Left to the garbage collector, a Claude answer's connection would outlive the attempt (closed
    later by a task of the loop's, or by whatever thread collects it once the loop is gone)."""
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    log: list[str] = []
    monkeypatch.setattr(agent_runner, "get_provider", lambda name: RecordingProvider(log))
    attempt = Attempt.objects.get(task_run__run=run)
    outcome, _ = db_threads.run_sync(
        lambda: agent_runner.run_attempt(NotingHost(log), attempt.pk, execution.worker_name())
    )
    assert outcome == "succeeded"
    assert log == ["stream closed", "success handed over"]


def test_a_timed_out_attempt_keeps_its_usage_so_far_and_its_stream_is_closed_first(make_agent, make_plan, monkeypatch):
    make_agent("researcher", timeout_s=1)
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    log: list[str] = []
    monkeypatch.setattr(agent_runner, "get_provider", lambda name: RecordingProvider(log, hold=True))
    recording(monkeypatch, log, "fail")
    assert run_attempt(Attempt.objects.get(task_run__run=run).pk) == "retry scheduled"
    assert log == ["stream closed", "fail"]
    timed_out = Attempt.objects.get(task_run__run=run, number=1)
    assert timed_out.state == Attempt.State.TIMED_OUT
    # What the stream reported (its input) and what it wrote (its output so far) stay counted.
    assert (timed_out.input_tokens, timed_out.output_tokens) == (10, 3)
    assert run.tasks.get().output == "An answer."  # its text too, with no host that saved it


def test_an_attempt_cancelled_before_its_hosts_first_save_keeps_what_it_streamed(make_agent, make_plan, monkeypatch):
    """Only the host's saves kept the text, every second or two: cancelled between two, an attempt
    lost what it had streamed since the last (all of it before the first)."""
    make_agent("researcher", timeout_s=60)
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    monkeypatch.setattr(agent_runner, "get_provider", lambda name: RecordingProvider([], hold=True))
    attempt = Attempt.objects.get(task_run__run=run)
    stopping, out = Stopping(), {}

    def work() -> None:
        out["outcome"], _ = db_threads.run_sync(
            lambda: agent_runner.run_attempt(stopping, attempt.pk, execution.worker_name())
        )

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    wait_until(lambda: getattr(stopping, "attempt", None) and stopping.attempt.progress.output, 30, "the text")
    runs.cancel(run)
    stopping.stop(agent_runner.CANCELLED)  # as the host's next heartbeat does
    thread.join(timeout=30)
    assert out["outcome"] == "cancelled"
    task = run.tasks.get()
    partial = PartialOutputRecord.of(task, task.attempts.get())
    assert partial is not None
    assert (partial.heading, partial.text) == ("Partial output of attempt 1 (cancelled)", "An answer.")


def test_a_loop_stopped_by_its_deadline_says_what_it_did_and_what_the_deadline_left_out():
    """It said "timed out after 1 s (time awaiting approvals not counted), after 0 model call(s)
    and 0 tool call(s)" of an attempt that waited for no approval and whose first call the deadline
    cut after 282 tokens."""
    from orchestrator.engine.agent_loop import DEADLINE, MAX_STEPS, LoopOutcome
    from orchestrator.engine.agent_runner import loop_stop_message
    from orchestrator.providers.base import Usage
    from tests.orchestrator.engine.test_agent_loop import request

    def outcome(stop=DEADLINE, steps=0, calls=0, waited=0.0):
        return LoopOutcome("", stop, steps, Usage(), [], tool_calls=calls, waited_for_people_s=waited)

    limit = request(timeout_s=1)
    assert loop_stop_message(outcome(), limit, 8) == "timed out after 1 s, during its first model call"
    assert (
        loop_stop_message(outcome(steps=2, calls=1), limit, 8)
        == "timed out after 1 s, after 2 model calls and 1 tool call"
    )
    assert loop_stop_message(outcome(steps=1, calls=1, waited=45), request(timeout_s=60), 8) == (
        "timed out after 1 min 00 s (not counting 45 s waiting for approval), after 1 model call and 1 tool call"
    )
    assert loop_stop_message(outcome(MAX_STEPS, steps=8, calls=9), limit, 8).startswith(
        "stopped unfinished after 8 model calls and 9 tool calls: the agent's max_steps is 8"
    )
