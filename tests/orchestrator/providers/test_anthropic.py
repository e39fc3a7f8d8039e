"""The anthropic provider through the real SDK against the fake Messages API (never the internet).

Streaming and usage, cost on a real attempt, 429/529 backing off the provider, a stream that
fails half-way, timeouts, permanent errors, the rate-limit headers fed back to the limits, and
the API key never showing anywhere.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from orchestrator import ratelimit
from orchestrator.engine import feedback as provider_feedback
from orchestrator.engine import retries, scheduler
from orchestrator.models import Attempt, Event, ProviderLimit, TaskRun
from orchestrator.providers.anthropic import AnthropicProvider, parse_retry_after, rate_limit_feedback
from orchestrator.providers.base import (
    AgentRequest,
    Completed,
    Overloaded,
    ProviderError,
    ProviderFeedback,
    ProviderTimeout,
    RateLimited,
    TextDelta,
    UsageSoFar,
    get_provider,
)
from orchestrator.providers.fake_anthropic import Reply, count_input_tokens
from tests.conftest import FAKE_ANTHROPIC_KEY, collect, run_attempt

MODEL = "claude-sonnet-4-6"
TEXT = " ".join(f"word{i}" for i in range(40))

pytestmark = pytest.mark.django_db(transaction=True)


def make_request(**overrides) -> AgentRequest:
    fields = {
        "agent_name": "researcher",
        "provider": "anthropic",
        "model": MODEL,
        "system_prompt": "You are a careful researcher.",
        "prompt": "Compare three databases for a small team",
        "max_tokens": 200,
        "timeout_s": 10.0,
        "seed": "1:a",
        "attempt": 1,
    }
    fields.update(overrides)
    return AgentRequest(**fields)


def drain(request: AgentRequest) -> tuple[list[TextDelta], Completed]:
    """The stream's text and final message; its rate-limit feedback applied as execution does."""
    items = collect(AnthropicProvider().stream(request))
    for report in [item for item in items if isinstance(item, ProviderFeedback)]:
        provider_feedback.apply(report)
    *deltas, completed = [item for item in items if not isinstance(item, ProviderFeedback | UsageSoFar)]
    assert all(isinstance(delta, TextDelta) for delta in deltas)
    assert isinstance(completed, Completed)
    return deltas, completed


def raised_by(request: AgentRequest) -> ProviderError:
    """The error a stream raises; the feedback it carries applied as execution does."""
    with pytest.raises(ProviderError) as raised:
        collect(AnthropicProvider().stream(request))
    provider_feedback.apply(raised.value.feedback)
    return raised.value


@pytest.fixture
def claude_limit(db):
    return ProviderLimit.objects.create(
        provider="anthropic", model=MODEL, input_price_per_mtok=Decimal("3"), output_price_per_mtok=Decimal("15")
    )


@pytest.fixture
def claude_run(make_agent, make_plan, claude_limit, fake_anthropic):
    """A one-task run on an anthropic agent, its attempt queued."""
    from orchestrator.engine import runs

    make_agent(
        "researcher", provider="anthropic", model=MODEL, provider_options={}, max_retries=2, max_output_tokens=300
    )
    return runs.launch(make_plan({"a": ("researcher", [])}))


def queued_attempt(run) -> Attempt:
    return Attempt.objects.get(task_run__run=run, state=Attempt.State.QUEUED)


def retry_now(run) -> Attempt:
    """Let the backoff pass and admit the retry."""
    ProviderLimit.objects.filter(provider="anthropic").update(backoff_until=None)
    TaskRun.objects.filter(run=run).update(not_before=timezone.now())
    scheduler.advance(run.pk)
    return queued_attempt(run)


# --- Streaming and usage ---------------------------------------------------------------------------


def test_get_provider_returns_the_anthropic_provider():
    assert isinstance(get_provider("anthropic"), AnthropicProvider)


def test_the_stream_reports_progress_and_the_servers_usage_exactly(fake_anthropic):
    fake_anthropic.enqueue(
        Reply.text_answer(TEXT, input_tokens=1234, output_tokens=52, cache_read_tokens=300, cache_creation_tokens=45)
    )
    deltas, completed = drain(make_request())
    assert "".join(delta.text for delta in deltas) == TEXT
    counts = [delta.output_tokens for delta in deltas]
    assert counts == sorted(counts)  # output tokens so far never go down
    with_text = [delta.output_tokens for delta in deltas if delta.text]
    assert len(with_text) > 2 and with_text[-1] > with_text[0] > 0
    # In between, the count is estimated from the text (4 characters a token); the server's final
    # count arrives with message_delta and is never shown lower than the estimate already was.
    assert counts[-1] == max(52, with_text[-1])
    assert completed.usage.input_tokens == 1234 and completed.usage.output_tokens == 52
    assert completed.usage.cache_read_tokens == 300 and completed.usage.cache_creation_tokens == 45
    assert completed.stop_reason == "end_turn" and completed.simulated is False
    sent = fake_anthropic.message_requests()[-1].body
    assert sent["stream"] is True and sent["model"] == MODEL and sent["max_tokens"] == 200
    assert sent["system"] == "You are a careful researcher."
    assert sent["messages"] == [{"role": "user", "content": "Compare three databases for a small team"}]


def test_closing_the_stream_part_way_closes_its_reading_of_the_answer_at_once(fake_anthropic, monkeypatch):
    """An attempt cancelled or timed out part-way closes the provider's stream; the reading of the
    server's events inside it closes with it, not later by the garbage collector (which may run on
    another thread, once the loop is gone)."""
    from orchestrator import db_threads

    fake_anthropic.enqueue(Reply.text_answer(TEXT, input_tokens=10, output_tokens=52))
    closed: list[bool] = []
    real_events = AnthropicProvider._events

    async def events(self, stream, request):
        try:
            async for item in real_events(self, stream, request):
                yield item
        finally:
            closed.append(True)

    monkeypatch.setattr(AnthropicProvider, "_events", events)

    async def read_part_then_close() -> list[bool]:
        stream = AnthropicProvider().stream(make_request())
        while not isinstance(await anext(stream), TextDelta):  # inside the reading of the events
            pass
        await stream.aclose()
        return list(closed)  # as the caller's aclose() returns

    assert db_threads.run_sync(read_part_then_close) == [True]


def test_unscripted_usage_is_the_servers_own_count(fake_anthropic):
    _, completed = drain(make_request(max_tokens=10))
    sent = fake_anthropic.message_requests()[-1].body
    assert completed.usage.input_tokens == count_input_tokens(sent)
    assert completed.usage.output_tokens == 10 and completed.stop_reason == "max_tokens"


def test_a_successful_attempt_costs_the_reported_usage_times_the_prices(claude_run, claude_limit, fake_anthropic):
    fake_anthropic.enqueue(Reply.text_answer(TEXT, input_tokens=1000, output_tokens=200))
    attempt = queued_attempt(claude_run)
    assert run_attempt(attempt.pk) == "succeeded"
    attempt.refresh_from_db()
    task = TaskRun.objects.get(pk=attempt.task_run_id)
    assert task.state == TaskRun.State.SUCCEEDED and task.output == TEXT
    assert (attempt.input_tokens, attempt.output_tokens) == (1000, 200)
    expected = (Decimal(1000) * 3 + Decimal(200) * 15) / Decimal(1_000_000)  # $0.006
    assert attempt.cost_usd == expected and task.cost_usd == expected
    claude_run.refresh_from_db()
    assert claude_run.cost_usd == expected and claude_run.status == "succeeded"


def test_cache_tokens_land_on_the_attempt_and_in_its_cost(claude_run, claude_limit, fake_anthropic):
    fake_anthropic.enqueue(
        Reply.text_answer(TEXT, input_tokens=100, output_tokens=40, cache_read_tokens=900, cache_creation_tokens=80)
    )
    attempt = queued_attempt(claude_run)
    run_attempt(attempt.pk)
    attempt.refresh_from_db()
    assert (attempt.cache_read_tokens, attempt.cache_creation_tokens) == (900, 80)
    # $3 per million input, reads at 0.1×, writes at 1.25×; $15 per million output.
    expected = (
        Decimal(100) * 3 + Decimal(900) * Decimal("0.3") + Decimal(80) * Decimal("3.75") + Decimal(40) * 15
    ) / Decimal(1_000_000)
    assert attempt.cost_usd == expected


def test_cache_tokens_are_priced_at_the_cache_rates(claude_limit):
    # 0.1 x input price for reads, 1.25 x for 5-minute writes (Anthropic's pricing page).
    cost = claude_limit.cost(1000, 200, cache_read_tokens=10_000, cache_creation_tokens=2_000)
    assert cost == (
        Decimal(1000) * 3 + Decimal(10_000) * Decimal("0.3") + Decimal(2_000) * Decimal("3.75") + Decimal(200) * 15
    ) / Decimal(1_000_000)
    assert claude_limit.cost(1000, 200) == Decimal("0.006")


# --- Errors and retries ----------------------------------------------------------------------------


def test_a_429_backs_off_the_provider_for_retry_after_and_the_task_is_retried(claude_run, fake_anthropic):
    fake_anthropic.enqueue(Reply.error(429, retry_after=7))
    first = queued_attempt(claude_run)
    before = timezone.now()
    assert run_attempt(first.pk) == "retry scheduled"
    first.refresh_from_db()
    assert first.state == Attempt.State.FAILED
    assert "anthropic 429 rate_limit_error" in first.error and "retry after 7 s" in first.error
    limit = ProviderLimit.objects.get(provider="anthropic", model=MODEL)
    assert before + timedelta(seconds=6) <= limit.backoff_until <= timezone.now() + timedelta(seconds=8)
    task = TaskRun.objects.get(pk=first.task_run_id)
    assert task.fault_count == 0 and task.not_before >= before + timedelta(seconds=7)
    event = Event.objects.get(run=claude_run, type="provider.backoff")
    assert event.payload["status"] == 429 and event.payload["retry_after_s"] == 7

    second = retry_now(claude_run)
    assert second.number == 2
    assert run_attempt(second.pk) == "succeeded"


def test_a_529_is_an_overload_of_the_whole_provider(claude_run, fake_anthropic):
    fake_anthropic.enqueue(Reply.error(529, retry_after=3))
    attempt = queued_attempt(claude_run)
    assert run_attempt(attempt.pk) == "retry scheduled"
    attempt.refresh_from_db()
    assert "anthropic 529 overloaded_error: Overloaded" in attempt.error
    assert TaskRun.objects.get(pk=attempt.task_run_id).fault_count == 0
    assert Event.objects.get(run=claude_run, type="provider.backoff").payload["status"] == 529
    assert ProviderLimit.objects.get(provider="anthropic", model=MODEL).backoff_until > timezone.now()


def test_an_error_event_in_the_middle_of_the_stream_fails_the_attempt_and_it_is_retried(
    claude_run, fake_anthropic, settings
):
    # The retry's backoff is drawn from [0, 1 s]: this worker must not run it itself at once.
    settings.GLASSBOX_CLAIM_NEXT = False
    fake_anthropic.enqueue(Reply.stream_error("api_error", "Internal server error", after_words=6))
    first = queued_attempt(claude_run)
    assert run_attempt(first.pk) == "retry scheduled"
    first.refresh_from_db()
    assert first.state == Attempt.State.FAILED
    assert first.error.startswith(
        "anthropic: error event in the middle of the stream: api_error: Internal server error"
    )
    task = TaskRun.objects.get(pk=first.task_run_id)
    assert task.fault_count == 1  # the task's own failure: it spends one retry
    assert Event.objects.filter(run=claude_run, type="task.retry_scheduled").count() == 1
    assert not Event.objects.filter(run=claude_run, type="provider.backoff").exists()

    fake_anthropic.enqueue(Reply.text_answer(TEXT))
    second = retry_now(claude_run)
    assert run_attempt(second.pk) == "succeeded"
    assert TaskRun.objects.get(pk=first.task_run_id).output == TEXT


def test_an_overload_in_the_middle_of_the_stream_is_provider_wide(fake_anthropic):
    fake_anthropic.enqueue(Reply.stream_error("overloaded_error", after_words=3))
    error = raised_by(make_request())
    assert isinstance(error, Overloaded) and error.provider_wide and error.retryable


def test_a_connection_cut_in_the_middle_of_the_stream_is_a_retryable_failure(fake_anthropic):
    fake_anthropic.enqueue(Reply.dropped(after_words=6))
    error = raised_by(make_request())
    assert error.retryable and not error.provider_wide
    assert error.message.startswith("anthropic: the connection failed during the answer")


def test_a_bad_request_is_not_retried(claude_run, fake_anthropic):
    fake_anthropic.enqueue(Reply.error(400, "invalid_request_error", "max_tokens: 300 > 128 for this model"))
    attempt = queued_attempt(claude_run)
    assert run_attempt(attempt.pk) == "failed"
    task = TaskRun.objects.get(pk=attempt.task_run_id)
    assert task.state == TaskRun.State.FAILED and task.attempt_count == 1
    assert "anthropic 400 invalid_request_error: max_tokens: 300 > 128 for this model" in task.error


def test_a_silent_stream_ends_by_the_timeout_and_may_be_retried(fake_anthropic):
    fake_anthropic.enqueue(Reply.text_answer(TEXT, chunk_delay_s=5))
    error = raised_by(make_request(timeout_s=0.5))
    assert error.retryable and not error.provider_wide
    assert "no answer within 0.5 s (timed out)" in error.message
    assert isinstance(error, ProviderTimeout)  # recorded as a timed-out attempt, not a failed one


def test_a_claude_attempt_that_times_out_is_timed_out_and_keeps_the_tokens_it_was_told(
    claude_run, claude_limit, fake_anthropic, monkeypatch
):
    """Once reported a timed-out attempt as failed with 0 input tokens although message_start had
    counted 123 (issue 11): usage is kept however an attempt ends, and a timeout is a timeout."""
    from orchestrator.models import Agent

    # The backoff is drawn from [0, 1 s]: a draw of a few ms let the step after the attempt admit
    # the retry, which reserved its budget again (production CI: reserved_usd 0.004656 != 0).
    monkeypatch.setattr(retries, "backoff_seconds", lambda faults, retry_after: 30.0)

    Agent.objects.filter(name="researcher").update(timeout_s=1)
    fake_anthropic.enqueue(Reply.text_answer(TEXT, input_tokens=123, output_tokens=40, chunk_delay_s=5))
    attempt = queued_attempt(claude_run)
    assert run_attempt(attempt.pk) == "retry scheduled"
    attempt.refresh_from_db()
    assert attempt.state == Attempt.State.TIMED_OUT
    assert attempt.input_tokens == 123 and attempt.cost_usd == claude_limit.cost(123, attempt.output_tokens)
    task = TaskRun.objects.get(pk=attempt.task_run_id)
    assert task.input_tokens == 123 and task.cost_usd == attempt.cost_usd
    claude_run.refresh_from_db()
    assert claude_run.input_tokens == 123 and claude_run.reserved_usd == 0


def test_without_an_api_key_the_provider_refuses_for_good(settings):
    settings.ANTHROPIC_API_KEY = ""
    error = raised_by(make_request())
    assert not error.retryable
    assert error.message.startswith("ANTHROPIC_API_KEY is not set: agent researcher needs it.")


def test_an_unreachable_server_is_a_retryable_connection_error(settings):
    settings.ANTHROPIC_API_KEY = FAKE_ANTHROPIC_KEY
    settings.ANTHROPIC_BASE_URL = "http://127.0.0.1:9"  # discard port: nothing listens
    error = raised_by(make_request())
    assert error.retryable and "could not reach http://127.0.0.1:9" in error.message


def test_the_waits_an_error_names_read_as_a_person_sets_a_time_limit():
    """An error said "retry after 12.3457 s" of a retry-after of 12.345678 s (an HTTP date's wait
    is seldom whole) and "no answer within 600 s": the time limits' own words elsewhere say "12 s"
    and "10 min 00 s" (wording.time_limit), as a tool's timeout does."""
    import anthropic

    from orchestrator.providers.anthropic import map_error, sdk_http

    request = sdk_http.Request("POST", "http://127.0.0.1:9/v1/messages")
    response = sdk_http.Response(429, headers={"retry-after": "12.345678"}, request=request)
    limited = map_error(anthropic.RateLimitError("rate limited", response=response, body=None))
    assert "; retry after 12 s" in limited.message
    timeout = map_error(anthropic.APITimeoutError(request=request), timeout_s=600)
    assert timeout.message == "anthropic: no answer within 10 min 00 s (timed out)"


def test_retry_after_is_read_as_seconds_or_as_an_http_date():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    future = timezone.now() + timedelta(seconds=30)
    seconds = parse_retry_after(future.strftime("%a, %d %b %Y %H:%M:%S GMT"))
    assert 25 <= seconds <= 31
    assert parse_retry_after("Mon, 01 Jan 2001 00:00:00 GMT") == 0.0


# --- Rate-limit headers ----------------------------------------------------------------------------


def test_empty_budgets_back_the_provider_off_until_their_reset(claude_limit, fake_anthropic):
    reset = (timezone.now() + timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_anthropic.enqueue(
        Reply.text_answer(
            TEXT,
            headers={
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": reset,
            },
        )
    )
    drain(make_request())
    claude_limit.refresh_from_db()
    assert claude_limit.backoff_until.strftime("%Y-%m-%dT%H:%M:%SZ") == reset


def test_unset_limits_are_learned_and_set_ones_are_kept(claude_limit, fake_anthropic):
    ProviderLimit.objects.filter(pk=claude_limit.pk).update(input_tokens_per_minute=12_345)
    drain(make_request())
    claude_limit.refresh_from_db()
    assert claude_limit.requests_per_minute == 50  # the fake server's limits
    assert claude_limit.output_tokens_per_minute == 8_000
    assert claude_limit.input_tokens_per_minute == 12_345  # an administrator's value is never changed
    assert claude_limit.backoff_until is None


def test_the_servers_remaining_budget_is_shared_with_the_admission_limiter(claude_limit, fake_anthropic):
    ProviderLimit.objects.filter(pk=claude_limit.pk).update(requests_per_minute=50)
    key = provider_feedback.admission_key("anthropic", MODEL, "rpm")
    ratelimit.reset(key)
    assert ratelimit.acquire(key, 1, 50) == 0.0  # the scheduler admitted this request
    fake_anthropic.enqueue(Reply.text_answer(TEXT, headers={"anthropic-ratelimit-requests-remaining": "10"}))
    drain(make_request())
    remaining, _ = ratelimit.peek(key, 50)
    assert 10 <= remaining <= 11  # 11 only if a minute boundary passed in between (sliding window)
    ratelimit.reset(key)


def test_a_429s_headers_are_applied_too(claude_limit, fake_anthropic):
    reset = (timezone.now() + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_anthropic.enqueue(
        Reply.error(
            429,
            retry_after=2,
            headers={
                "anthropic-ratelimit-input-tokens-remaining": "0",
                "anthropic-ratelimit-input-tokens-reset": reset,
            },
        )
    )
    error = raised_by(make_request())
    assert isinstance(error, RateLimited) and error.retry_after_s == 2
    claude_limit.refresh_from_db()
    assert claude_limit.backoff_until.strftime("%Y-%m-%dT%H:%M:%SZ") == reset


def test_the_provider_reports_feedback_and_changes_no_limits_itself(claude_limit, fake_anthropic):
    reset = (timezone.now() + timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_anthropic.enqueue(
        Reply.text_answer(
            TEXT,
            headers={
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": reset,
            },
        )
    )
    items = collect(AnthropicProvider().stream(make_request()))
    reports = [item for item in items if isinstance(item, ProviderFeedback)]
    assert len(reports) == 1 and (reports[0].provider, reports[0].model) == ("anthropic", MODEL)
    assert reports[0].budgets["requests"].remaining == 0
    assert reports[0].budgets["requests"].limit == 50  # the fake server's limit
    claude_limit.refresh_from_db()
    assert claude_limit.backoff_until is None and claude_limit.requests_per_minute is None


def test_a_429_carries_its_headers_as_feedback_on_the_error(claude_limit, fake_anthropic):
    fake_anthropic.enqueue(Reply.error(429, retry_after=2, headers={"anthropic-ratelimit-input-tokens-remaining": "0"}))
    with pytest.raises(RateLimited) as raised:
        collect(AnthropicProvider().stream(make_request()))
    assert raised.value.feedback.budgets["input-tokens"].remaining == 0
    claude_limit.refresh_from_db()
    assert claude_limit.backoff_until is None  # until the engine applies it


def test_feedback_applied_by_the_engine_during_an_attempt_updates_the_provider_limit(claude_run, fake_anthropic):
    reset = (timezone.now() + timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_anthropic.enqueue(
        Reply.text_answer(
            TEXT,
            headers={
                "anthropic-ratelimit-output-tokens-remaining": "0",
                "anthropic-ratelimit-output-tokens-reset": reset,
            },
        )
    )
    assert run_attempt(queued_attempt(claude_run).pk) == "succeeded"
    limit = ProviderLimit.objects.get(provider="anthropic", model=MODEL)
    assert limit.backoff_until.strftime("%Y-%m-%dT%H:%M:%SZ") == reset
    assert limit.requests_per_minute == 50  # learned from the answer's headers


def test_the_provider_module_imports_nothing_from_the_engine():
    import ast
    import inspect

    from orchestrator.providers import anthropic as module

    tree = ast.parse(inspect.getsource(module))
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert imported and not [name for name in imported if name.startswith("orchestrator.engine")]


def test_a_backoff_from_headers_is_capped_at_a_minute(claude_limit):
    far = (timezone.now() + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = provider_feedback.apply(
        rate_limit_feedback(
            MODEL,
            {
                "anthropic-ratelimit-tokens-remaining": "0",
                "anthropic-ratelimit-tokens-reset": far,
            },
        )
    )
    assert result.backoff_until <= timezone.now() + timedelta(seconds=provider_feedback.MAX_BACKOFF_S)
    assert (
        provider_feedback.apply(
            rate_limit_feedback(
                "no-such-model",
                {
                    "anthropic-ratelimit-requests-remaining": "0",
                },
            )
        ).backoff_until
        is None
    )


# --- The API key -----------------------------------------------------------------------------------


def test_the_key_never_appears_in_events_errors_or_logs(claude_run, fake_anthropic, caplog):
    caplog.set_level(logging.DEBUG)
    fake_anthropic.enqueue(Reply.error(401, "authentication_error", "invalid x-api-key", echo_api_key=True))
    attempt = queued_attempt(claude_run)
    assert run_attempt(attempt.pk) == "failed"
    attempt.refresh_from_db()
    task = TaskRun.objects.get(pk=attempt.task_run_id)
    assert "authentication_error" in attempt.error and "[redacted]" in attempt.error
    texts = [attempt.error, task.error, caplog.text]
    texts += [f"{event.message} {json.dumps(event.payload)}" for event in Event.objects.all()]
    assert all(FAKE_ANTHROPIC_KEY not in text for text in texts)
    assert FAKE_ANTHROPIC_KEY not in json.dumps([r.headers for r in fake_anthropic.requests])


def test_the_key_never_appears_in_a_successful_run_either(claude_run, fake_anthropic, caplog):
    caplog.set_level(logging.DEBUG)
    run_attempt(queued_attempt(claude_run).pk)
    assert FAKE_ANTHROPIC_KEY not in caplog.text
    assert all(FAKE_ANTHROPIC_KEY not in json.dumps(event.payload) + event.message for event in Event.objects.all())


# --- seed_demo --------------------------------------------------------------------------------------


def test_seed_demo_seeds_list_prices_of_current_claude_models_once(settings):
    settings.GLASSBOX_MODEL = MODEL
    settings.ANTHROPIC_API_KEY = FAKE_ANTHROPIC_KEY
    call_command("seed_demo", "--provider", "anthropic", stdout=StringIO())
    sonnet = ProviderLimit.objects.get(provider="anthropic", model=MODEL)
    assert (sonnet.input_price_per_mtok, sonnet.output_price_per_mtok) == (Decimal("3"), Decimal("15"))
    haiku = ProviderLimit.objects.get(provider="anthropic", model="claude-haiku-4-5")
    assert (haiku.input_price_per_mtok, haiku.output_price_per_mtok) == (Decimal("1"), Decimal("5"))
    assert haiku.requests_per_minute is None  # learned from the API's headers
    opus = ProviderLimit.objects.get(provider="anthropic", model="claude-opus-4-8")
    assert (opus.input_price_per_mtok, opus.output_price_per_mtok) == (Decimal("5"), Decimal("25"))

    ProviderLimit.objects.filter(pk=haiku.pk).update(input_price_per_mtok=Decimal("0.9"))
    output = StringIO()
    call_command("seed_demo", "--provider", "anthropic", stdout=output)
    haiku.refresh_from_db()
    assert haiku.input_price_per_mtok == Decimal("0.9")  # an administrator's price is kept
    assert "anthropic:claude-haiku-4-5: kept as it is" in output.getvalue()
    assert FAKE_ANTHROPIC_KEY not in output.getvalue()
