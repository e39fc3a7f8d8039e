"""The simulated provider: determinism, latency, failures, the server rate limit, hangs."""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import time
import uuid
from types import SimpleNamespace

import pytest

from orchestrator.providers.base import (
    AgentRequest,
    Completed,
    Overloaded,
    ProviderError,
    RateLimited,
    TextDelta,
    get_provider,
)
from orchestrator.providers.simulated import MAX_WORDS, MIN_WORDS, SimulatedProvider, generate_output, label_line

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
    items = list(SimulatedProvider().stream(request))
    *deltas, completed = items
    assert all(isinstance(item, TextDelta) for item in deltas)
    assert isinstance(completed, Completed)
    return "".join(delta.text for delta in deltas), completed


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
    request = make_request(options={"latency": {"dist": "fixed", "seconds": 0.35}})
    items = list(SimulatedProvider().stream(request))
    deltas = items[:-1]
    assert len(deltas) == 4  # 0.35 s in slices of at most 0.1 s
    assert "".join(delta.text for delta in deltas) == generate_output(request).text
    counts = [delta.output_tokens for delta in deltas]
    assert counts == sorted(counts)
    assert counts[-1] == items[-1].usage.output_tokens


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


def test_the_stream_ticks_often_while_working():
    request = make_request(options={"latency": {"dist": "fixed", "seconds": 0.6}})
    stamps = [time.monotonic()]
    for _ in SimulatedProvider().stream(request):
        stamps.append(time.monotonic())
    gaps = [later - earlier for earlier, later in itertools.pairwise(stamps)]
    assert max(gaps) < 0.5  # nominally 0.1 s; generous for a loaded machine


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
        stream = SimulatedProvider().stream(make_request(attempt=attempt, options=options))
        received = []
        with pytest.raises(ProviderError) as raised:
            for item in stream:
                received.append(item)
        assert received, "the failure comes part-way, after some output"
        assert not any(isinstance(item, Completed) for item in received)
        assert raised.value.retryable is True
        assert raised.value.provider_wide is False
        assert "simulated failure" in str(raised.value)


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
    stream = SimulatedProvider().stream(make_request(options={**FAST, "overloaded_rate": 1.0}))
    with pytest.raises(Overloaded) as raised:
        next(stream)
    assert raised.value.status_code == 529
    assert raised.value.retry_after_s == 1
    assert raised.value.retryable and raised.value.provider_wide


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
    with pytest.raises(ProviderError) as raised:
        next(SimulatedProvider().stream(make_request(options=options)))
    assert raised.value.retryable is False


# --- the simulated server rate limit -----------------------------------------------------------


@pytest.mark.django_db
def test_requests_per_minute_answers_429_with_retry_after(database_limiter):
    options = {**FAST, "server_limit": {"requests_per_minute": 2}}
    model = f"sim-rpm-{uuid.uuid4().hex[:8]}"
    run_stream(make_request(model=model, options=options))
    run_stream(make_request(model=model, options=options))
    stream = SimulatedProvider().stream(make_request(model=model, options=options))
    with pytest.raises(RateLimited) as raised:
        next(stream)  # refused before any output
    error = raised.value
    assert error.status_code == 429
    assert error.retry_after_s >= 1 and error.retry_after_s == math.ceil(error.retry_after_s)
    assert error.retryable and error.provider_wide
    assert str(error).startswith("429 rate_limit_error")


@pytest.mark.django_db
def test_the_server_limit_is_per_model_and_shared_by_agents(database_limiter):
    options = {**FAST, "server_limit": {"requests_per_minute": 1}}
    model = f"sim-shared-{uuid.uuid4().hex[:8]}"
    run_stream(make_request(agent_name="researcher", model=model, options=options))
    with pytest.raises(RateLimited):
        run_stream(make_request(agent_name="writer", model=model, options=options))
    run_stream(make_request(agent_name="writer", model=f"{model}-other", options=options))


@pytest.mark.django_db
def test_tokens_per_minute_counts_input_and_max_tokens(database_limiter):
    options = {**FAST, "server_limit": {"tokens_per_minute": 1500}}
    model = f"sim-tpm-{uuid.uuid4().hex[:8]}"
    run_stream(make_request(model=model, max_tokens=1000, options=options))
    with pytest.raises(RateLimited) as raised:
        run_stream(make_request(model=model, max_tokens=1000, options=options))
    assert raised.value.retry_after_s >= 1
    run_stream(make_request(model=model, max_tokens=100, options=options))


# --- hanging and abandoning --------------------------------------------------------------------


def test_hang_keeps_ticking_without_output():
    stream = SimulatedProvider().stream(make_request(options={"hang": True}))
    started = time.monotonic()
    ticks = list(itertools.islice(stream, 5))
    stream.close()
    assert all(isinstance(tick, TextDelta) and tick.text == "" and tick.output_tokens == 0 for tick in ticks)
    assert 0.3 <= time.monotonic() - started < 3.0


def test_the_caller_may_abandon_the_stream():
    stream = SimulatedProvider().stream(make_request(options={"latency": {"dist": "fixed", "seconds": 5}}))
    assert isinstance(next(stream), TextDelta)
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)


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
