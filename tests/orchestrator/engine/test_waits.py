"""Typed wait reasons: a stable code for the engine, a sentence for people."""

import importlib
from datetime import UTC, datetime, timedelta, timezone

import pytest

from orchestrator.engine import runs, waits
from orchestrator.models import Event

backfill = importlib.import_module("orchestrator.migrations.0009_taskrun_wait_code")

EXAMPLES = [
    waits.AgentInactive("researcher", "retired"),
    waits.RunCap(3),
    waits.AgentLimit("coder", 2),
    waits.ProviderInFlight("anthropic", "claude-x"),
    waits.Budget(),
    waits.ProviderBackoff("anthropic:claude-x", datetime(2026, 1, 1, 12, 30, 5, tzinfo=UTC)),
    waits.RateLimitRequests("anthropic:claude-x"),
    waits.RateLimitInput("anthropic:claude-x"),
    waits.RateLimitOutput("anthropic:claude-x"),
    waits.RetryBackoff(datetime(2026, 1, 1, 12, 30, 5, tzinfo=UTC), "anthropic 500 api_error: boom"),
    waits.RunPaused(),
    waits.PlanApproval(),
    waits.ToolApproval("workspace:write_file"),
]
# Codes added after migration 0009, whose rows never needed a backfill.
NEWER_THAN_THE_BACKFILL = {waits.RunPaused.code, waits.PlanApproval.code, waits.ToolApproval.code}
# Reworded after the backfill, which matched the words of its day ("run cap reached (4 running)"
# counted queued tasks as running): rows written since carry their code.
REWORDED_SINCE = {
    waits.RunCap.code: "run cap reached (4 running)",
    waits.AgentLimit.code: "agent coder at its limit (2 running across runs)",
    waits.RetryBackoff.code: "retrying in 2.5 s after: anthropic 500 api_error: boom",
}


def test_every_reason_has_its_own_code():
    assert len(set(waits.CODES)) == len(waits.ALL)
    assert {type(w) for w in EXAMPLES} == set(waits.ALL)


def test_the_sentences_read_as_before():
    assert waits.RunCap(3).message == "run cap reached (3 queued or running)"
    assert waits.AgentInactive("researcher", "retired").message == "agent researcher is retired, not active"
    assert waits.RateLimitOutput("anthropic:m").message == "provider anthropic:m output tokens per minute used up"
    assert waits.ProviderBackoff("p:m", datetime(2026, 1, 1, 12, 30, 5, tzinfo=UTC)).message.endswith(
        "until 12:30:05 UTC"
    )
    assert str(waits.Budget()) == "run budget would be exceeded"


@pytest.mark.parametrize("wait", [w for w in EXAMPLES if w.code not in NEWER_THAN_THE_BACKFILL], ids=lambda w: w.code)
def test_the_migration_recognises_every_sentence(wait):
    assert backfill.code_of(REWORDED_SINCE.get(wait.code, wait.message)) == wait.code


def test_the_migration_leaves_unknown_sentences_without_a_code():
    assert backfill.code_of("provider busy") == ""


@pytest.mark.django_db
def test_a_waiting_task_stores_the_code_and_its_event_carries_it(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", []), "c": ("researcher", [])})
    run = runs.launch(plan, cap=1)
    held = run.tasks.filter(state="ready")
    assert set(held.values_list("wait_code", "wait_reason")) == {("run_cap", "run cap reached (1 queued or running)")}
    event = Event.objects.filter(run=run, type="task.waiting").first()
    assert event.payload["code"] == "run_cap" and event.payload["reason"] == "run cap reached (1 queued or running)"


@pytest.mark.django_db
def test_the_migration_backfills_codes_of_existing_rows_from_their_sentences(demo_agents, make_plan):
    from django.apps import apps

    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", []), "c": ("researcher", [])}))
    a, b, c = run.tasks.order_by("subtask__key")
    TaskRun = apps.get_model("orchestrator", "TaskRun")
    TaskRun.objects.filter(pk=a.pk).update(wait_reason="run cap reached (2 running)", wait_code="")
    TaskRun.objects.filter(pk=b.pk).update(wait_reason="provider busy", wait_code="")
    TaskRun.objects.filter(pk=c.pk).update(wait_reason="", wait_code="")
    backfill.backfill(apps, None)
    assert dict(run.tasks.values_list("subtask__key", "wait_code")) == {"a": "run_cap", "b": "", "c": ""}


def test_a_retry_and_a_back_off_name_their_moment_in_utc_labelled_as_the_run_pages_times():
    """The run page labels its times UTC ("since 10:02:07 UTC"); a retry's moment read bare
    ("retrying from 12:30:05"), a person in another zone took it for theirs. A moment given in
    another zone is said in UTC."""
    paris = timezone(timedelta(hours=1))
    moment = datetime(2026, 1, 1, 13, 30, 5, tzinfo=paris)  # 12:30:05 UTC
    retry = waits.RetryBackoff(moment, "lease expired: worker w1 stopped responding")
    assert retry.message == "retrying from 12:30:05 UTC after: lease expired: worker w1 stopped responding"
    backoff = waits.ProviderBackoff("anthropic:claude-x", moment)
    assert backoff.message == "provider anthropic:claude-x backing off after a rate-limit answer, until 12:30:05 UTC"
