"""The simulated provider: determinism, latency, failures, the server rate limit, hangs."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import statistics
import time
import uuid
from types import SimpleNamespace

import pytest

from orchestrator import db_threads
from orchestrator.providers.base import (
    AgentRequest,
    Completed,
    Overloaded,
    ProviderError,
    RateLimited,
    TextDelta,
    ToolSpec,
    UsageSoFar,
    get_provider,
)
from orchestrator.providers.simulated import MAX_WORDS, MIN_WORDS, SimulatedProvider, generate_output, label_line
from tests.conftest import collect

FAST = {"latency": {"dist": "fixed", "seconds": 0.0}}


def make_request(**overrides) -> AgentRequest:
    fields = {
        "agent_name": "researcher",
        "provider": "simulated",
        "model": f"sim-test-{uuid.uuid4().hex[:12]}",
        "system_prompt": "You are a careful researcher.",
        "prompt": "Compare three databases for a small team and recommend one",
        "max_tokens": 1024,
        "timeout_s": 30.0,
        "seed": "run-1:compare",
        "attempt": 1,
        "options": dict(FAST),
    }
    fields.update(overrides)
    return AgentRequest(**fields)


def run_stream(request: AgentRequest) -> tuple[str, Completed]:
    items = [item for item in collect(SimulatedProvider().stream(request)) if not isinstance(item, UsageSoFar)]
    *deltas, completed = items
    assert all(isinstance(item, TextDelta) for item in deltas)
    assert isinstance(completed, Completed)
    return "".join(delta.text for delta in deltas), completed


def items_until_error(request: AgentRequest) -> tuple[list, ProviderError]:
    """What a failing stream yields before it raises, and what it raises."""
    received: list = []

    async def consume() -> ProviderError:
        try:
            async for item in SimulatedProvider().stream(request):
                received.append(item)
        except ProviderError as error:
            return error
        raise AssertionError("the stream ended without an error")

    return received, db_threads.run_sync(consume)


def first_item_raises(request: AgentRequest) -> ProviderError:
    with pytest.raises(ProviderError) as raised:
        collect(SimulatedProvider().stream(request), limit=1)
    return raised.value


@pytest.fixture
def database_limiter(settings):
    settings.GLASSBOX_RATE_LIMIT_STORAGE = "database"


# --- output ------------------------------------------------------------------------------------


def test_same_seed_and_prompt_give_the_same_text():
    first, _ = run_stream(make_request())
    second, _ = run_stream(make_request(model="another-model"))
    assert first == second


def test_a_different_seed_or_prompt_gives_different_text():
    base, _ = run_stream(make_request())
    assert run_stream(make_request(seed="run-2:compare"))[0] != base
    assert run_stream(make_request(prompt="Write a haiku about queues"))[0] != base


def test_a_retry_writes_the_same_text():
    assert run_stream(make_request(attempt=1))[0] == run_stream(make_request(attempt=2))[0]


def test_output_is_labelled_and_mentions_the_agent_and_the_prompt():
    text, completed = run_stream(make_request())
    assert text.startswith("_[simulated output from researcher]_\n")
    assert text.startswith(label_line("researcher"))
    assert "researcher" in text.split("\n", 1)[1]
    assert "Compare three databases for a small" in text
    assert completed.simulated is True


def test_length_and_usage():
    request = make_request()
    text, completed = run_stream(request)
    words = len(text.split())
    assert MIN_WORDS <= words <= MAX_WORDS + 100  # the last block is finished, not cut
    assert completed.usage.output_tokens == words
    assert completed.usage.input_tokens == (len(request.system_prompt) + len(request.prompt)) // 4
    assert completed.stop_reason == "end_turn"


def test_max_tokens_cuts_the_output():
    text, completed = run_stream(make_request(max_tokens=40))
    assert len(text.split()) == 40
    assert completed.usage.output_tokens == 40
    assert completed.stop_reason == "max_tokens"
    assert text.startswith(label_line("researcher"))


def test_the_stream_is_the_generated_output_in_order():
    request = make_request(options={"latency": {"dist": "fixed", "seconds": 0.6}})
    items = collect(SimulatedProvider().stream(request))
    deltas = [item for item in items if isinstance(item, TextDelta)]
    assert len(deltas) == 3  # 0.6 s in slices of at most 0.25 s
    assert "".join(delta.text for delta in deltas) == generate_output(request).text
    counts = [delta.output_tokens for delta in deltas]
    assert counts == sorted(counts)
    assert counts[-1] == items[-1].usage.output_tokens


def test_usage_is_reported_when_the_answer_starts_and_when_it_ends():
    request = make_request()
    items = collect(SimulatedProvider().stream(request))
    reports = [item.usage for item in items if isinstance(item, UsageSoFar)]
    assert reports[0].input_tokens > 0 and reports[0].output_tokens == 0  # like message_start
    assert reports[-1] == items[-1].usage  # like the final message_delta


def test_a_later_calls_input_counts_the_conversation_and_the_tools_as_a_server_does():
    """An agent's second call sends its first turn and the tool's result again: its input is
    larger than the first call's (it was counted as the first call's prompt alone)."""
    first = make_request()
    tool = ToolSpec("lookup", "Look a word up in the team's glossary.", {"type": "object", "properties": {}})
    turns = [
        {"role": "user", "content": first.prompt},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": "x" * 400}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "y" * 800}]},
    ]
    later = dataclasses.replace(first, messages=turns, tools=[tool])

    def input_tokens(request):
        return next(
            i.usage.input_tokens for i in collect(SimulatedProvider().stream(request)) if isinstance(i, UsageSoFar)
        )

    assert input_tokens(first) == (len(first.system_prompt) + len(first.prompt)) // 4
    assert input_tokens(later) >= input_tokens(first) + (400 + 800) // 4


# --- latency -----------------------------------------------------------------------------------


def test_latency_draws_are_reproducible_and_differ_between_attempts():
    provider = SimulatedProvider()
    options = {}  # the default lognormal distribution
    first = provider.draw_latency_s(make_request(attempt=1, options=options))
    assert provider.draw_latency_s(make_request(attempt=1, options=options)) == first
    assert provider.draw_latency_s(make_request(attempt=2, options=options)) != first


def test_uniform_latency_stays_within_its_bounds():
    provider = SimulatedProvider()
    options = {"latency": {"dist": "uniform", "low_s": 0.5, "high_s": 1.5}}
    draws = [provider.draw_latency_s(make_request(seed=f"s{i}", options=options)) for i in range(200)]
    assert all(0.5 <= draw <= 1.5 for draw in draws)
    assert statistics.mean(draws) == pytest.approx(1.0, abs=0.1)


def test_lognormal_latency_centres_on_its_median():
    provider = SimulatedProvider()
    options = {"latency": {"dist": "lognormal", "median_s": 2.0, "sigma": 0.5}}
    draws = [provider.draw_latency_s(make_request(seed=f"s{i}", options=options)) for i in range(400)]
    assert all(draw > 0 for draw in draws)
    assert statistics.median(draws) == pytest.approx(2.0, rel=0.2)


def test_fixed_latency_is_what_the_stream_takes():
    request = make_request(options={"latency": {"dist": "fixed", "seconds": 0.3}})
    started = time.monotonic()
    run_stream(request)
    assert 0.25 <= time.monotonic() - started < 2.0


def test_the_answer_keeps_its_own_clock_however_long_the_caller_takes_with_each_slice(monkeypatch):
    """As a server streams: the last slice arrives the drawn latency after the request, not that
    plus the caller's work on every slice. On a clock of the test's own (no timing of the machine)."""
    from orchestrator.providers import simulated

    clock = {"now": 100.0}

    async def sleep_until(deadline: float, **_) -> None:
        clock["now"] = max(clock["now"], deadline)

    monkeypatch.setattr(simulated, "_clock", lambda: clock["now"])
    monkeypatch.setattr(simulated, "_sleep_until", sleep_until)
    request = make_request(options={"latency": {"dist": "fixed", "seconds": 1.0}})
    arrivals = []

    async def consume() -> None:
        async for item in SimulatedProvider().stream(request):
            if isinstance(item, TextDelta):
                arrivals.append(clock["now"])
            clock["now"] += 0.05  # the caller's work on each item

    asyncio.run(consume())
    assert len(arrivals) == 4  # 1 s in slices of SLICE_S
    began = 100.0  # the request: the caller's work on the first usage report is within the first slice
    assert arrivals == pytest.approx([began + 0.25, began + 0.5, began + 0.75, began + 1.0])


@pytest.mark.parametrize("latency_s", [1.0, 0.2])
def test_the_text_is_made_within_the_calls_latency(monkeypatch, latency_s):
    """Making the answer's text is the server's work, done while the caller waits: a slow generator
    neither delays the call's start nor lengthens the call, of several slices or of one."""
    from orchestrator.providers import simulated

    clock = {"now": 100.0}

    async def sleep_until(deadline: float, **_) -> None:
        clock["now"] = max(clock["now"], deadline)

    def slow_generate(request):
        clock["now"] += 0.1  # the text takes 0.1 s to make
        return real_generate(request)

    real_generate = simulated.generate_output
    monkeypatch.setattr(simulated, "_clock", lambda: clock["now"])
    monkeypatch.setattr(simulated, "_sleep_until", sleep_until)
    monkeypatch.setattr(simulated, "generate_output", slow_generate)
    request = make_request(options={"latency": {"dist": "fixed", "seconds": latency_s}})
    seen = []

    async def consume() -> None:
        async for item in SimulatedProvider().stream(request):
            seen.append((type(item).__name__, clock["now"]))

    asyncio.run(consume())
    assert seen[0] == ("UsageSoFar", 100.0)  # the request is answered at once
    assert seen[-1] == ("Completed", pytest.approx(100.0 + latency_s))  # and ends its latency after it


def test_calls_that_start_together_all_start_before_any_makes_its_text(monkeypatch):
    """A wave's calls begin together: none waits on another's text being made."""
    from orchestrator.providers import simulated

    log = []
    real_generate = simulated.generate_output

    def logged_generate(request):
        log.append(f"text {request.agent_name}")
        return real_generate(request)

    monkeypatch.setattr(simulated, "generate_output", logged_generate)

    async def call(name: str) -> None:
        async for item in SimulatedProvider().stream(make_request(agent_name=name)):
            if isinstance(item, UsageSoFar) and not item.usage.output_tokens:
                log.append(f"start {name}")

    async def wave() -> None:
        await asyncio.gather(call("a"), call("b"), call("c"))

    asyncio.run(wave())
    assert log[:3] == ["start a", "start b", "start c"]
    assert sorted(log[3:]) == ["text a", "text b", "text c"]


def test_estimate_duration_is_the_distribution_mean():
    provider = SimulatedProvider()
    fixed = SimpleNamespace(provider_options={"latency": {"dist": "fixed", "seconds": 2.5}})
    uniform = SimpleNamespace(provider_options={"latency": {"dist": "uniform", "low_s": 1.0, "high_s": 3.0}})
    default = SimpleNamespace(provider_options={})
    assert provider.estimate_duration_s(fixed, 500) == 2.5
    assert provider.estimate_duration_s(uniform, 500) == 2.0
    assert provider.estimate_duration_s(default, 500) == pytest.approx(math.exp(0.4**2 / 2))


# --- failures ----------------------------------------------------------------------------------


def test_failure_rate_one_always_fails_part_way_and_is_retryable():
    options = {"latency": {"dist": "fixed", "seconds": 0.5}, "failure_rate": 1.0}
    for attempt in (1, 2, 3):
        received, error = items_until_error(make_request(attempt=attempt, options=options))
        assert any(isinstance(item, TextDelta) for item in received), "the failure comes part-way, after some output"
        assert not any(isinstance(item, Completed) for item in received)
        assert error.retryable is True
        assert error.provider_wide is False
        assert "simulated failure" in str(error)


def test_failure_rate_zero_never_fails():
    options = {**FAST, "failure_rate": 0.0}
    for attempt in range(1, 21):
        run_stream(make_request(attempt=attempt, seed=f"seed-{attempt}", options=options))


def test_some_attempts_fail_at_an_intermediate_rate():
    options = {**FAST, "failure_rate": 0.5}
    outcomes = []
    for attempt in range(1, 41):
        try:
            run_stream(make_request(attempt=attempt, options=options))
            outcomes.append(True)
        except ProviderError:
            outcomes.append(False)
    assert 5 < sum(outcomes) < 35


def test_overloaded_rate_one_answers_529():
    error = first_item_raises(make_request(options={**FAST, "overloaded_rate": 1.0}))
    assert isinstance(error, Overloaded)
    assert error.status_code == 529
    assert error.retry_after_s == 1
    assert error.retryable and error.provider_wide


@pytest.mark.parametrize(
    "options",
    [
        {"latency": {"dist": "gamma"}},
        {"latency": {"dist": "uniform", "low_s": 2, "high_s": 1}},
        {"latency": {"dist": "fixed", "seconds": -1}},
        {"failure_rate": 1.5},
        {"failure_rate": "often"},
        {"server_limit": {"requests_per_minute": 0}},
    ],
)
def test_invalid_options_are_a_permanent_error(options):
    assert first_item_raises(make_request(options=options)).retryable is False


# --- the simulated server rate limit -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_requests_per_minute_answers_429_with_retry_after(database_limiter):
    options = {**FAST, "server_limit": {"requests_per_minute": 2}}
    model = f"sim-rpm-{uuid.uuid4().hex[:8]}"
    run_stream(make_request(model=model, options=options))
    run_stream(make_request(model=model, options=options))
    error = first_item_raises(make_request(model=model, options=options))  # refused before any output
    assert isinstance(error, RateLimited)
    assert error.status_code == 429
    assert error.retry_after_s >= 1 and error.retry_after_s == math.ceil(error.retry_after_s)
    assert error.retryable and error.provider_wide
    assert str(error).startswith("429 rate_limit_error")


@pytest.mark.django_db(transaction=True)
def test_the_server_limit_is_per_model_and_shared_by_agents(database_limiter):
    options = {**FAST, "server_limit": {"requests_per_minute": 1}}
    model = f"sim-shared-{uuid.uuid4().hex[:8]}"
    run_stream(make_request(agent_name="researcher", model=model, options=options))
    with pytest.raises(RateLimited):
        run_stream(make_request(agent_name="writer", model=model, options=options))
    run_stream(make_request(agent_name="writer", model=f"{model}-other", options=options))


@pytest.mark.django_db(transaction=True)
def test_tokens_per_minute_counts_input_and_max_tokens(database_limiter):
    options = {**FAST, "server_limit": {"tokens_per_minute": 1500}}
    model = f"sim-tpm-{uuid.uuid4().hex[:8]}"
    run_stream(make_request(model=model, max_tokens=1000, options=options))
    with pytest.raises(RateLimited) as raised:
        run_stream(make_request(model=model, max_tokens=1000, options=options))
    assert raised.value.retry_after_s >= 1
    run_stream(make_request(model=model, max_tokens=100, options=options))


# --- hanging and abandoning --------------------------------------------------------------------


def test_hang_reports_its_input_and_never_answers():
    received: list = []

    async def consume() -> None:
        async for item in SimulatedProvider().stream(make_request(options={"hang": True})):
            received.append(item)

    async def for_a_while() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(consume(), timeout=0.5)

    db_threads.run_sync(for_a_while)
    assert len(received) == 1 and isinstance(received[0], UsageSoFar) and received[0].usage.input_tokens > 0


def test_the_caller_may_abandon_the_stream():
    async def abandon() -> None:
        stream = SimulatedProvider().stream(make_request(options={"latency": {"dist": "fixed", "seconds": 5}}))
        assert isinstance(await anext(stream), UsageSoFar)
        await stream.aclose()
        with pytest.raises(StopAsyncIteration):
            await anext(stream)

    db_threads.run_sync(abandon)


# --- the provider registry and errors ----------------------------------------------------------


def test_get_provider():
    assert isinstance(get_provider("simulated"), SimulatedProvider)
    assert get_provider("simulated").name == "simulated"
    assert get_provider("anthropic").name == "anthropic"
    with pytest.raises(ProviderError):
        get_provider("nonsense")


def test_provider_errors_never_carry_an_api_key(settings):
    settings.ANTHROPIC_API_KEY = "configured-secret-0123456789"
    error = ProviderError("bad key sk-ant-api03-AbC_dEf-123 and configured-secret-0123456789 rejected")
    assert "sk-ant-api03" not in str(error)
    assert "configured-secret" not in str(error)
    assert "rejected" in str(error)
    assert RateLimited("429 sk-ant-xyz").provider_wide is True


def test_requests_are_plain_dataclasses():
    request = make_request()
    assert dataclasses.replace(request, attempt=2).attempt == 2


# --- option_problems: the options checked where they are entered ----------------------------------


def test_option_problems_names_every_problem_at_once():
    from orchestrator.providers.simulated import option_problems

    assert option_problems({"latency": {"dist": "fixed", "seconds": 0.5}, "failure_rate": 0.1, "hang": False}) == []
    assert option_problems({}) == []
    assert option_problems({"latency": "fast", "failure_rate": 7}) == [
        "latency must be an object, got 'fast'",
        "failure_rate must be between 0 and 1, got 7.0",
    ]
    problems = option_problems(
        {"failur_rate": 0.1, "latency": {"dist": "gauss"}, "hang": "no", "server_limit": {"requests_per_minute": 0}}
    )
    assert problems[0].startswith("unknown option 'failur_rate': the simulated provider takes latency, failure_rate")
    assert "latency dist must be 'fixed', 'uniform' or 'lognormal', got 'gauss'" in problems
    assert "hang must be true or false, got 'no'" in problems
    assert "server_limit.requests_per_minute must be a whole number >= 1, got 0" in problems
    assert option_problems(["latency"]) == ["provider options must be an object (a JSON mapping), got ['latency']"]


def test_option_problems_agrees_with_what_the_provider_accepts():
    """Valid for the check means the provider parses it; refused means it raises."""
    from orchestrator.providers.simulated import SimulationOptions, option_problems

    for options in ({"latency": {"dist": "uniform", "low_s": 1, "high_s": 0.5}}, {"overloaded_rate": -1}):
        assert option_problems(options)
        with pytest.raises(ProviderError):
            SimulationOptions.parse(options)
    SimulationOptions.parse({"latency": {"dist": "lognormal", "median_s": 2}, "server_limit": {"tokens_per_minute": 5}})


def test_the_benchmarks_own_option_is_accepted():
    from orchestrator.providers.simulated import option_problems

    assert option_problems({"latency": {"dist": "fixed", "seconds": 1}, "bench": {"seed": 1}}) == []


def test_the_simulated_provider_calls_the_tools_its_prompt_names_then_answers():
    from orchestrator.providers.base import AgentRequest, ToolSpec, ToolUse
    from orchestrator.providers.simulated import SimulatedProvider, planned_tool_calls
    from tests.conftest import collect

    schema = {"type": "object", "properties": {"path": {"type": "string", "examples": ["notes/a.md"]}}}
    tools = [ToolSpec("list_files", "", {"type": "object"}), ToolSpec("write_file", "", schema)]
    request = AgentRequest(
        "a", "simulated", "sim-1", "", "Use write_file, then list_files.", 100, 10, "seed", 1,
        options={"latency": {"dist": "fixed", "seconds": 0.01}}, tools=tools,
    )  # fmt: skip
    items = collect(SimulatedProvider().stream(request))
    uses = [item for item in items if isinstance(item, ToolUse)]
    assert [(u.name, u.input) for u in uses] == [("write_file", {"path": "notes/a.md"}), ("list_files", {})]
    assert items[-1].stop_reason == "tool_use" and planned_tool_calls(request) == uses  # deterministic
    answered = [
        {"role": "user", "content": request.prompt},
        {"role": "assistant", "content": items[-1].content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id, "content": "ok"} for u in uses]},
    ]
    from dataclasses import replace

    assert planned_tool_calls(replace(request, messages=answered)) == []
    unnamed = replace(request, prompt="Write a poem.")
    assert planned_tool_calls(unnamed) == []


def test_a_calls_end_is_not_left_to_the_timers_rounding(monkeypatch):
    """asyncio wakes a sleeper up to a millisecond late; a call's end sleeps to a millisecond before
    it, then gives the loop its turns until it comes (on a clock of the test's own: each turn 0.2 ms)."""
    from orchestrator.providers import simulated

    clock = {"now": 0.0}
    sleeps = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock["now"] += seconds or 0.0002
        await real_sleep(0)

    monkeypatch.setattr(simulated, "_clock", lambda: clock["now"])
    monkeypatch.setattr(simulated.asyncio, "sleep", sleep)
    asyncio.run(simulated._sleep_until(1.0, on_time=True))
    assert sleeps[0] == pytest.approx(1.0 - simulated.TIMER_SLACK_S)
    assert set(sleeps[1:]) == {0}
    assert clock["now"] >= 1.0  # never before its end
    assert clock["now"] - 1.0 < 0.0002 + 1e-9  # and within one turn of the loop after it
    sleeps.clear()
    start = clock["now"]
    asyncio.run(simulated._sleep_until(2.0))  # a slice before the last: one sleep, as asyncio keeps it
    assert sleeps == [pytest.approx(2.0 - start)]
