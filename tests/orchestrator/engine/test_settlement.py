"""What an attempt used and may still use: its settlement, counted once, and the provider's
per-minute budgets as Anthropic keeps them (max_tokens reserved, corrected to the real use), for
the attempt and for each further model call of an agent that uses tools."""

from __future__ import annotations

import pytest
from django.utils import timezone

from orchestrator import ratelimit
from orchestrator.engine import admission, execution, runs, settlement, waits
from orchestrator.engine.execution import Claim
from orchestrator.models import Attempt, ProviderLimit, Run, TaskRun
from orchestrator.providers.base import Usage
from tests.conftest import run_attempt, stand_still
from tests.orchestrator.engine.conftest import BUDGETS

State = TaskRun.State
pytestmark = pytest.mark.django_db(transaction=True)


def claimed(make_agent, make_plan, **agent_fields) -> Claim:
    """A one-task run launched (admission reserved its first call) and its attempt claimed."""
    make_agent("researcher", **agent_fields)
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = Attempt.objects.get(task_run__run=run, state=Attempt.State.QUEUED)
    claim = execution.claim_attempt(attempt.pk, "w1")
    assert claim is not None
    return claim


# --- An attempt's settlement ---------------------------------------------------------------------


def test_a_later_settlement_adds_only_what_it_reports_beyond_the_first(make_agent, make_plan, priced_limit):
    """A lost attempt's late answer is settled again: attempt, task and run count its usage once."""
    claim = claimed(make_agent, make_plan)
    ids = {"run_id": claim.task.run_id, "task_id": claim.task.pk}
    cost = settlement.settle(claim.attempt.pk, Usage(50, 3), priced_limit, **ids, finished_at=timezone.now())
    assert cost == priced_limit.cost(50, 3)
    assert settlement.settle(claim.attempt.pk, Usage(50, 7), priced_limit, **ids) == priced_limit.cost(50, 7)
    attempt = Attempt.objects.get(pk=claim.attempt.pk)
    task = TaskRun.objects.get(pk=claim.task.pk)
    run = Run.objects.get(pk=claim.task.run_id)
    for row in (attempt, task, run):
        assert (row.input_tokens, row.output_tokens, row.cost_usd) == (50, 7, priced_limit.cost(50, 7)), row
    assert run.reserved_usd == 0 and attempt.reserved_usd == 0


@pytest.mark.parametrize("storage", ["database", pytest.param("redis", marks=pytest.mark.services)])
def test_output_tokens_reserved_at_admission_are_corrected_to_the_real_count(
    make_agent, make_plan, settings, storage, request, monkeypatch
):
    """Anthropic's accounting: max_tokens reserved when a request starts, the unused part given back
    when it ends — so an output budget of 3,000 a minute admits far more than 3 calls of 1,024."""
    settings.GLASSBOX_RATE_LIMIT_STORAGE = storage  # "redis" runs under `make test-services` (marked)
    stand_still(monkeypatch)
    make_agent("researcher", max_output_tokens=1024, max_concurrency=10)
    limit = ProviderLimit.objects.create(provider="simulated", model="sim-1", output_tokens_per_minute=3000)
    key = admission.admission_key("simulated", "sim-1", "otpm")
    ratelimit.reset(key)
    request.addfinalizer(lambda: ratelimit.reset(key))
    run = runs.launch(make_plan({f"t{i}": ("researcher", []) for i in range(8)}), cap=8)
    assert run.tasks.filter(state=State.QUEUED).count() == 2  # 2 × 1,024 reserved of 3,000
    first = Attempt.objects.filter(task_run__run=run).order_by("pk").first()
    assert first.reserved_output_tokens == 1024 and first.rate_window is not None
    run_attempt(first.pk)  # succeeds with a few hundred output tokens, and advances the run
    first.refresh_from_db()
    assert 0 < first.output_tokens < 1024
    remaining, _ = ratelimit.peek(key, limit.output_tokens_per_minute)
    # The unused part came back at once: the next tasks were admitted on it.
    assert run.tasks.filter(state__in=[State.QUEUED, State.SUCCEEDED]).count() == 3
    taken = sum(a.reserved_output_tokens for a in Attempt.objects.filter(task_run__run=run))
    assert remaining == 3000 - taken
    assert first.reserved_output_tokens == first.output_tokens  # now what it really used


# --- Each further model call of an attempt that uses tools -----------------------------------------


def test_a_further_call_raises_the_attempts_reservation_from_the_runs_budget_or_is_refused(
    make_agent, make_plan, priced_limit
):
    claim = claimed(make_agent, make_plan, max_output_tokens=1000)
    used = Usage(input_tokens=2000, output_tokens=500)
    assert settlement.reserve_call(claim, 3000, used)
    held = priced_limit.cost(2000, 500) + priced_limit.cost(3000, 1000)  # used so far + the next call's worst
    run = Run.objects.get(pk=claim.task.run_id)
    assert Attempt.objects.get(pk=claim.attempt.pk).reserved_usd == run.reserved_usd == held
    Run.objects.filter(pk=run.pk).update(budget_usd=held)  # nothing left beyond what it holds
    assert not settlement.reserve_call(claim, 6000, Usage(input_tokens=5000, output_tokens=1500))
    run.refresh_from_db()
    assert Attempt.objects.get(pk=claim.attempt.pk).reserved_usd == run.reserved_usd == held  # nothing taken


def test_a_further_call_takes_its_share_of_the_per_minute_budgets_and_is_corrected_to_its_use(
    make_agent, make_plan, still_budgets
):
    ProviderLimit.objects.create(
        provider="simulated", model="sim-1", requests_per_minute=2, output_tokens_per_minute=10_000
    )
    claim = claimed(make_agent, make_plan, max_output_tokens=1000)  # admission took 1 request, 1,000 out
    why, wait_s, taken = settlement.take_call_rate(claim, 500)
    assert (why, wait_s) == (None, 0) and taken.output_tokens == 1000 and taken.window is not None
    settlement.settle_call_rate(claim, taken, Usage(input_tokens=400, output_tokens=120))
    assert ratelimit.peek(BUDGETS["otpm"], 10_000)[0] == 10_000 - 1000 - 120
    # Counted as reserved: the attempt's settlement corrects only what admission took.
    assert Attempt.objects.get(pk=claim.attempt.pk).reserved_output_tokens == 1000 + 120
    # Two requests a minute, both taken: the next call waits, and takes nothing meanwhile.
    why, wait_s, taken = settlement.take_call_rate(claim, 500)
    assert isinstance(why, waits.RateLimitRequests) and wait_s > 0 and taken == admission.TokenReservation()
    assert ratelimit.peek(BUDGETS["otpm"], 10_000)[0] == 10_000 - 1000 - 120
