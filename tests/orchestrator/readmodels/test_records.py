"""The records (readmodels/records.py): how a row leaves the database — money as a decimal string,
times in UTC, other rows by their natural keys, a task's progress and partial output as people read them."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from orchestrator.models import Attempt, Run, TaskRun
from orchestrator.readmodels.records import AttemptRecord, RunRecord, TaskRunRecord, progress_shown
from tests.orchestrator.readmodels.conftest import start, succeed

State = TaskRun.State
pytestmark = pytest.mark.django_db


@pytest.fixture
def run(launched):
    return launched({"scope": ("researcher", []), "write": ("writer", ["scope"])})


def test_money_leaves_as_a_decimal_string_never_a_float(run):
    task = run.tasks.get(subtask__key="scope")
    succeed(task, cost="0.000123")
    record = TaskRunRecord.of(TaskRun.objects.get(pk=task.pk))
    assert record.cost_usd == Decimal("0.000123")
    assert record.model_dump()["cost_usd"] == "0.000123"
    assert json.loads(record.model_dump_json())["cost_usd"] == "0.000123"
    assert RunRecord.of(Run.objects.get(pk=run.pk)).model_dump(mode="json")["budget_usd"] == "5.0000"


def test_times_leave_in_utc_and_missing_ones_as_null(run):
    task = run.tasks.get(subtask__key="scope")
    start(task, ago_s=2.0)
    attempt = AttemptRecord.of(Attempt.objects.get(task_run=task)).model_dump(mode="json")
    assert attempt["started_at"].endswith("+00:00")
    assert attempt["finished_at"] is None and attempt["duration_s"] is None


def test_an_ended_attempt_gives_its_duration_in_seconds(run):
    task = run.tasks.get(subtask__key="scope")
    succeed(task, took_s=2.5)
    assert AttemptRecord.of(Attempt.objects.get(task_run=task)).duration_s == pytest.approx(2.5, abs=0.002)


def test_a_task_names_its_agent_and_subtask_by_their_keys_not_their_ids(run):
    record = TaskRunRecord.of(run.tasks.get(subtask__key="write")).model_dump(mode="json")
    assert (record["key"], record["agent"]) == ("write", "writer")


@pytest.mark.parametrize(
    ("state", "saved", "shown"),
    [
        (State.RUNNING, 40, 40),
        (State.SUCCEEDED, 60, 100),  # done is done, whatever the stream last said
        (State.FAILED, 70, None),  # how far its last attempt got is not how much is done
        (State.CANCELLED, 15, None),
        (State.SKIPPED, 0, None),
        (State.PENDING, 0, 0),
    ],
)
def test_progress_is_what_a_person_should_read_in_each_state(state, saved, shown):
    assert progress_shown(state, saved) == shown


def test_a_failed_tasks_text_is_its_partial_output_never_its_output(run):
    task = run.tasks.get(subtask__key="scope")
    attempt = start(task)
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.FAILED, finished_at=timezone.now())
    TaskRun.objects.filter(pk=task.pk).update(state=State.FAILED, output="half a draft", error="boom")
    record = TaskRunRecord.of(TaskRun.objects.get(pk=task.pk))
    assert record.output is None
    assert record.partial_output is not None
    assert (record.partial_output.heading, record.partial_output.text) == (
        "Partial output of attempt 1 (failed)",
        "half a draft",
    )


def test_a_succeeded_tasks_output_is_its_result(run):
    task = run.tasks.get(subtask__key="scope")
    succeed(task)
    record = TaskRunRecord.of(TaskRun.objects.get(pk=task.pk))
    assert (record.output, record.partial_output, record.progress) == ("ok", None, 100)


def test_a_running_tasks_tokens_so_far_count_what_its_attempt_streams(run):
    from orchestrator.readmodels.live_tokens import LiveTokens

    task = run.tasks.get(subtask__key="scope")
    start(task)
    TaskRun.objects.filter(pk=task.pk).update(input_tokens=100, started_at=timezone.now() - timedelta(seconds=1))
    record = TaskRunRecord.of(TaskRun.objects.get(pk=task.pk), live=LiveTokens(input=30, output=12))
    assert (record.input_tokens, record.input_tokens_so_far, record.streaming_tokens) == (100, 130, 12)
