"""The agent loop with a fake async provider: tool round trips, concurrency, limits, refusals,
approvals, and usage that is never dropped."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from orchestrator.engine import agent_loop, agent_steps
from orchestrator.engine.agent_loop import LoopHooks, NoTools, run_agent_loop
from orchestrator.engine.agent_steps import Decision
from orchestrator.providers.base import (
    AgentRequest,
    Completed,
    ProviderError,
    ProviderFeedback,
    TextDelta,
    ToolSpec,
    ToolUse,
    Usage,
    UsageSoFar,
)
from orchestrator.tools.results import ToolResult, cap
from orchestrator.tools.servers import GrantedTool


def request(**fields) -> AgentRequest:
    base = dict(
        agent_name="coder",
        provider="fake",
        model="fake-1",
        system_prompt="",
        prompt="Do the work.",
        max_tokens=100,
        timeout_s=30,
        seed="s",
        attempt=1,
    )
    return AgentRequest(**{**base, **fields})


def answer(text: str, *, input_tokens: int = 10) -> list:
    words = len(text.split())
    return [TextDelta(text, words), Completed(Usage(input_tokens, words), "end_turn", simulated=True)]


def tool_turn(*calls: tuple[str, Any], text: str = "Let me check.", input_tokens: int = 10) -> list:
    uses = [ToolUse(id=f"toolu_{i}", name=name, input=arguments) for i, (name, arguments) in enumerate(calls)]
    return [TextDelta(text, 3), *uses, Completed(Usage(input_tokens, 3 + 5 * len(uses)), "tool_use", simulated=True)]


class ScriptedProvider:
    """Answers each model call with the next scripted turn: a list of stream items, where an
    exception is raised and "hang" waits forever."""

    def __init__(self, *turns: list) -> None:
        self.turns = list(turns)
        self.requests: list[AgentRequest] = []

    async def stream(self, request: AgentRequest):
        self.requests.append(request)
        turn = self.turns.pop(0) if self.turns else self.turns_exhausted()
        for item in turn:
            if isinstance(item, BaseException):
                raise item
            if item == "hang":
                await asyncio.Event().wait()
            await asyncio.sleep(0)
            yield item

    @staticmethod
    def turns_exhausted():
        raise AssertionError("the loop asked the model more often than the test scripted")


def granted(name: str, *, approval: bool = False, server: str = "srv") -> GrantedTool:
    return GrantedTool(
        name=name,
        server=server,
        tool=name,
        description=f"{name} tool",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        requires_approval=approval,
    )


class FakeTools:
    """A tool runner whose tools are async functions of the arguments."""

    def __init__(self, **tools) -> None:
        self.functions = {name: spec[0] for name, spec in tools.items()}
        self.granted = {name: granted(name, approval=spec[1]) for name, spec in tools.items()}
        self.calls: list[tuple[str, dict]] = []

    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self.granted.values()]

    def lookup(self, name):
        return self.granted.get(name)

    async def call(self, name, arguments, *, timeout_s=None) -> ToolResult:
        self.calls.append((name, arguments))
        return cap(await self.functions[name](**arguments), 1000)


async def echo(text: str = "") -> str:
    return f"echo: {text}"


@dataclass
class Recorder:
    steps: list = field(default_factory=list)
    usage: list = field(default_factory=list)
    reserved: list = field(default_factory=list)
    budget_calls: int = 99
    decisions: list = field(default_factory=list)
    asked: list = field(default_factory=list)

    def hooks(self, **extra) -> LoopHooks:
        async def on_step(step):
            self.steps.append(step)

        async def on_usage(usage):
            self.usage.append(usage)

        async def reserve(req):
            self.reserved.append(req)
            return len(self.reserved) <= self.budget_calls

        async def approve(call):
            self.asked.append(call)
            return self.decisions.pop(0)

        return LoopHooks(on_step=on_step, on_usage=on_usage, reserve=reserve, approve=approve, **extra)

    def kinds(self) -> list[str]:
        return [step.kind for step in self.steps]


def loop(provider, tools=None, recorder=None, *, max_steps=8, deadline=None, req=None):
    recorder = recorder or Recorder()
    outcome = asyncio.run(
        run_agent_loop(
            provider, req or request(), tools or NoTools(), recorder.hooks(), max_steps=max_steps, deadline=deadline
        )
    )
    return outcome, recorder


def test_an_answer_without_tools_is_one_model_call():
    outcome, recorder = loop(ScriptedProvider(answer("All done here.")))
    assert (outcome.output, outcome.stop, outcome.steps, outcome.finished) == ("All done here.", "end_turn", 1, True)
    assert recorder.kinds() == ["text", "model_call"]
    assert [(u.step, u.usage.output_tokens, u.complete) for u in recorder.usage] == [(1, 3, True)]
    assert outcome.messages[-1] == {"role": "assistant", "content": [{"type": "text", "text": "All done here."}]}


def test_a_tool_result_goes_back_to_the_model_in_the_next_request():
    provider = ScriptedProvider(tool_turn(("echo", {"text": "hi"})), answer("The echo said hi."))
    tools = FakeTools(echo=(echo, False))
    outcome, recorder = loop(provider, tools)
    assert (outcome.output, outcome.steps, outcome.tool_calls) == ("The echo said hi.", 2, 1)
    first, second = provider.requests
    assert [t.name for t in first.tools] == ["echo"] and first.conversation() == [
        {"role": "user", "content": "Do the work."}
    ]
    assert second.messages[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_0", "name": "echo", "input": {"text": "hi"}},
        ],
    }
    assert second.messages[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "echo: hi"}],
    }
    assert recorder.kinds() == ["text", "model_call", "tool_call", "tool_result", "text", "model_call"]
    call, result = recorder.steps[2], recorder.steps[3]
    assert (call.tool, call.server, call.arguments) == ("echo", "srv", {"text": "hi"})
    assert (result.result, result.is_error, result.step) == ("echo: hi", False, 1) and result.duration_s >= 0
    assert [u.usage.input_tokens for u in recorder.usage] == [10, 10] and outcome.usage.input_tokens == 20


def test_the_providers_own_content_blocks_are_sent_back_as_they_came():
    blocks = [{"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "toolu_x", "name": "echo", "input": {}}]
    turn = [ToolUse("toolu_x", "echo", {}), Completed(Usage(5, 5), "tool_use", simulated=False, content=blocks)]
    provider = ScriptedProvider(turn, answer("ok"))
    loop(provider, FakeTools(echo=(echo, False)))
    assert provider.requests[1].messages[1] == {"role": "assistant", "content": blocks}


def test_two_tool_calls_of_one_turn_run_concurrently():
    both_in_flight = asyncio.Barrier(2)

    async def meet(text: str = "") -> str:
        await asyncio.wait_for(both_in_flight.wait(), timeout=10)  # only concurrent calls get past
        return f"met {text}"

    provider = ScriptedProvider(tool_turn(("meet", {"text": "a"}), ("meet", {"text": "b"})), answer("Both met."))
    outcome, _ = loop(provider, FakeTools(meet=(meet, False)))
    results = provider.requests[1].messages[2]["content"]
    assert [(r["tool_use_id"], r["content"]) for r in results] == [("toolu_0", "met a"), ("toolu_1", "met b")]
    assert outcome.output == "Both met."


def test_results_keep_the_order_of_the_calls_whatever_finishes_first():
    async def slow(text: str = "") -> str:
        await asyncio.sleep(0.2)
        return "slow"

    async def fast(text: str = "") -> str:
        return "fast"

    provider = ScriptedProvider(tool_turn(("slow", {}), ("fast", {})), answer("ok"))
    loop(provider, FakeTools(slow=(slow, False), fast=(fast, False)))
    assert [r["content"] for r in provider.requests[1].messages[2]["content"]] == ["slow", "fast"]


def test_the_loop_stops_at_max_steps():
    provider = ScriptedProvider(*[tool_turn(("echo", {"text": str(i)})) for i in range(3)])
    outcome, recorder = loop(provider, FakeTools(echo=(echo, False)), max_steps=3)
    assert (outcome.stop, outcome.steps, outcome.finished, outcome.tool_calls) == ("max_steps", 3, False, 3)
    assert len(provider.requests) == 3 and len(recorder.usage) == 3
    assert recorder.steps[-1].kind == "stopped" and recorder.steps[-1].stop_reason == "max_steps"
    assert outcome.output == "\n\n".join(["Let me check."] * 3)


def test_an_ungranted_tool_is_refused_and_the_model_told():
    tools = FakeTools(echo=(echo, False))
    provider = ScriptedProvider(tool_turn(("delete_everything", {"path": "/"})), answer("I could not."))
    outcome, recorder = loop(provider, tools)
    assert tools.calls == []
    refused = [s for s in recorder.steps if s.kind == "tool_refused"]
    assert len(refused) == 1 and refused[0].tool == "delete_everything" and refused[0].arguments == {"path": "/"}
    assert refused[0].event_type == "tool.refused"
    block = provider.requests[1].messages[2]["content"][0]
    assert block["is_error"] is True and "not granted" in block["content"]
    assert outcome.output == "I could not."


def test_an_approved_call_runs():
    tools = FakeTools(echo=(echo, True))
    recorder = Recorder(decisions=[Decision(True, "fine", "alice")])
    provider = ScriptedProvider(tool_turn(("echo", {"text": "risky"})), answer("Done."))
    loop(provider, tools, recorder)
    assert tools.calls == [("echo", {"text": "risky"})]
    assert [(c.name, c.arguments, c.tool.qualified) for c in recorder.asked] == [
        ("echo", {"text": "risky"}, "srv:echo")
    ]
    approval = next(s for s in recorder.steps if s.kind == "approval")
    assert (approval.approved, approval.comment, approval.decided_by) == (True, "fine", "alice")
    assert recorder.kinds()[2:5] == ["tool_call", "approval", "tool_result"]
    assert (
        recorder.steps[2].approval_required and recorder.steps[2].headline() == "step 1 · waiting for approval of echo"
    )


def test_a_rejected_call_does_not_run_and_the_model_reads_the_rejection():
    tools = FakeTools(echo=(echo, True))
    recorder = Recorder(decisions=[Decision(False, "not on production")])
    provider = ScriptedProvider(tool_turn(("echo", {"text": "risky"})), answer("I will not, then."))
    outcome, _ = loop(provider, tools, recorder)
    assert tools.calls == []
    block = provider.requests[1].messages[2]["content"][0]
    assert block["is_error"] is True and "rejected" in block["content"] and "not on production" in block["content"]
    assert outcome.output == "I will not, then."


def test_usage_of_every_call_is_kept_when_a_later_call_fails():
    provider = ScriptedProvider(
        tool_turn(("echo", {"text": "x"}), input_tokens=40),
        [UsageSoFar(Usage(input_tokens=55)), TextDelta("Half an ans", 7), ProviderError("overloaded", retryable=True)],
    )
    recorder = Recorder()
    with pytest.raises(ProviderError):
        loop(provider, FakeTools(echo=(echo, False)), recorder)
    # The failed call keeps the input tokens its stream reported as it started, and the output so far.
    assert [(u.step, u.usage.input_tokens, u.usage.output_tokens, u.complete) for u in recorder.usage] == [
        (1, 40, 8, True),
        (2, 55, 7, False),
    ]


def test_the_deadline_stops_a_call_that_does_not_end_and_keeps_its_usage():
    provider = ScriptedProvider(
        tool_turn(("echo", {"text": "x"})), [UsageSoFar(Usage(input_tokens=30)), TextDelta("Thinking", 4), "hang"]
    )
    outcome, recorder = loop(provider, FakeTools(echo=(echo, False)), deadline=time.monotonic() + 1.0)
    assert (outcome.stop, outcome.finished) == ("deadline", False)
    assert [(u.step, u.complete, u.usage.input_tokens, u.usage.output_tokens) for u in recorder.usage] == [
        (1, True, 10, 8),
        (2, False, 30, 4),
    ]
    assert recorder.steps[-1].kind == "stopped"


def test_time_waiting_for_a_person_does_not_count_against_the_deadline(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(agent_loop.time, "monotonic", lambda: now[0])

    async def slow_approver(call):
        now[0] += 3600  # a person takes an hour
        return Decision(True)

    recorder = Recorder()
    hooks = recorder.hooks()
    hooks.approve = slow_approver
    provider = ScriptedProvider(tool_turn(("echo", {"text": "x"})), answer("Done after approval."))
    outcome = asyncio.run(
        run_agent_loop(provider, request(), FakeTools(echo=(echo, True)), hooks, max_steps=8, deadline=1030.0)
    )
    assert (outcome.stop, outcome.output) == ("end_turn", "Done after approval.")


def test_the_loop_stops_when_the_budget_cannot_cover_another_call():
    provider = ScriptedProvider(tool_turn(("echo", {"text": "x"})))
    recorder = Recorder(budget_calls=1)
    outcome, _ = loop(provider, FakeTools(echo=(echo, False)), recorder)
    assert (outcome.stop, outcome.steps, len(provider.requests)) == ("budget", 1, 1)
    assert len(recorder.reserved) == 2 and recorder.reserved[1].messages[-1]["role"] == "user"


def test_a_cancelled_attempt_reports_the_usage_seen_so_far():
    provider = ScriptedProvider([UsageSoFar(Usage(input_tokens=21)), TextDelta("Working on it", 3), "hang"])
    recorder = Recorder()

    async def main():
        task = asyncio.create_task(run_agent_loop(provider, request(), NoTools(), recorder.hooks(), max_steps=2))
        while not provider.requests:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [(u.step, u.complete, u.usage.input_tokens, u.usage.output_tokens) for u in recorder.usage] == [
        (1, False, 21, 3)
    ]


def test_arguments_that_are_not_an_object_fail_that_call():
    tools = FakeTools(echo=(echo, False))
    provider = ScriptedProvider(tool_turn(("echo", ["not", "an", "object"])), answer("ok"))
    loop(provider, tools)
    assert tools.calls == []
    assert "must be a JSON object" in provider.requests[1].messages[2]["content"][0]["content"]


def test_streamed_text_and_provider_feedback_reach_their_hooks():
    feedback = ProviderFeedback(provider="anthropic", model="m")
    provider = ScriptedProvider([feedback, *answer("Hello there.")])
    recorder, seen = Recorder(), []

    async def on_text(step, delta):
        seen.append((step, delta.text))

    async def on_feedback(item):
        seen.append(item)

    asyncio.run(
        run_agent_loop(
            provider, request(), NoTools(), recorder.hooks(on_text=on_text, on_feedback=on_feedback), max_steps=1
        )
    )
    assert seen == [feedback, (1, "Hello there.")]


def test_a_tool_results_step_says_the_calls_own_time_and_its_servers_start_up_apart():
    """The runner measured a call of 0.4 s after 2.5 s of its server's start-up: the step's
    duration is the call's, whatever the loop's own clock saw around both."""

    class StartedTools(FakeTools):
        async def call(self, name, arguments, *, timeout_s=None):
            result = await super().call(name, arguments, timeout_s=timeout_s)
            return replace(result, duration_s=0.4, server_start_s=2.5)

    recorder = Recorder()
    provider = ScriptedProvider(tool_turn(("echo", {"text": "hi"})), answer("done"))
    asyncio.run(run_agent_loop(provider, request(), StartedTools(echo=(echo, False)), recorder.hooks(), max_steps=3))
    result = next(step for step in recorder.steps if step.kind == "tool_result")
    assert (result.payload()["duration_s"], result.payload()["server_start_s"]) == (0.4, 2.5)
    assert result.sentence() == "step 1 · echo answered in 0.4 s · server started in 2.5 s: echo: hi"


def test_a_step_payload_caps_arguments_and_results_and_keeps_the_whole_result_apart():
    async def flood(text: str = "") -> str:
        return "y" * 5000

    provider = ScriptedProvider(tool_turn(("flood", {"text": "z" * 10_000})), answer("ok"))
    _, recorder = loop(provider, FakeTools(flood=(flood, False)))
    call = next(s for s in recorder.steps if s.kind == "tool_call")
    result = next(s for s in recorder.steps if s.kind == "tool_result")
    assert call.payload()["arguments"]["_cut"] is True and len(call.payload()["arguments"]["json"]) <= 4001
    payload = result.payload()
    assert len(payload["result"]) <= agent_steps.PREVIEW_CHARS + 1 and payload["result_chars"] == 5000
    assert "result_full" not in payload and len(result.result_full) == 5000


def test_a_failing_hook_surfaces_as_itself():
    class Broken(Exception):
        pass

    async def on_step(step):
        if step.kind == "tool_result":
            raise Broken("database down")

    async def on_usage(usage):
        pass

    provider = ScriptedProvider(tool_turn(("echo", {"text": "a"}), ("echo", {"text": "b"})))
    with pytest.raises(Broken):
        asyncio.run(
            run_agent_loop(
                provider,
                request(),
                FakeTools(echo=(echo, False)),
                LoopHooks(on_step=on_step, on_usage=on_usage),
                max_steps=3,
            )
        )


def test_two_agents_call_real_mcp_tools_in_parallel(tmp_path):
    """Two attempts in one event loop, each with its own session of the tests' MCP server; each
    turn's two calls meet in the server, which only concurrent calls can do."""
    from orchestrator.tools import sessions
    from orchestrator.tools.toolbox import Toolbox
    from tests.orchestrator.tools.conftest import grant_of, process_gone, server_spec

    tools = asyncio.run(sessions.discover(server_spec()))

    async def agent(name: str):
        provider = ScriptedProvider(
            tool_turn(("rendezvous", {"key": name}), ("rendezvous", {"key": name}), ("pid", {})),
            answer(f"{name} is done."),
        )
        recorder = Recorder()
        async with Toolbox([grant_of(server_spec(), tools)], cwd=tmp_path) as box:
            outcome = await run_agent_loop(provider, request(agent_name=name), box, recorder.hooks(), max_steps=4)
        results = provider.requests[1].messages[2]["content"]
        return outcome, results

    async def main():
        return await asyncio.gather(agent("alpha"), agent("beta"))

    (alpha, alpha_results), (beta, beta_results) = asyncio.run(main())
    assert (alpha.output, beta.output) == ("alpha is done.", "beta is done.")
    assert [r["content"] for r in alpha_results[:2]] == ["met alpha", "met alpha"]
    assert [r["content"] for r in beta_results[:2]] == ["met beta", "met beta"]
    pids = {int(alpha_results[2]["content"]), int(beta_results[2]["content"])}
    assert len(pids) == 2 and all(process_gone(pid) for pid in pids)
