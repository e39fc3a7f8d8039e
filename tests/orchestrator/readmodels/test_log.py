"""The run page's event log."""

from __future__ import annotations

from django.db import transaction

from orchestrator import events
from orchestrator.readmodels.log import LogRow, describe_event, event_log, event_types, matches_type_filter


def test_matches_type_filter_agrees_with_the_query(transactional_db, run_with_events):
    run = run_with_events
    types = event_types(run)
    for type_filter in ("", "all", "task", "run", "task.progress", "checkpoint.created", "plan"):
        expected = {t for t in types if matches_type_filter(t, type_filter)}
        got = {e.type for e in event_log(run, type_filter=type_filter, limit=10_000)}
        assert got == expected, type_filter


def test_event_log_is_newest_first_and_filterable(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", [])})
    a = run.tasks.get(subtask__key="a")
    with transaction.atomic():
        events.record("task.progress", run=run, task=a, payload={"progress": 1})
    newest_first = event_log(run)
    seqs = [e.seq for e in newest_first]
    assert seqs == sorted(seqs, reverse=True)
    assert all(e.type != "task.progress" for e in newest_first)
    assert any(e.type == "task.progress" for e in event_log(run, type_filter="all"))
    assert {e.task_run_id for e in event_log(run, task_id=a.pk)} == {a.pk}
    newest = seqs[0]
    assert event_log(run, after_seq=newest) == []
    assert len(event_log(run, type_filter="all", limit=2)) == 2


def test_log_rows_read_one_statement_without_the_tasks_output_or_the_agents_prompt(
    run_with_events, django_assert_num_queries
):
    """A row shows its task's key: the task's output, its subtask's instructions and its agent's
    prompt (large in a real agent's run) are not read for it, and nothing is read row by row. The
    rows are plain values, not model instances (a fan-out's frame carries a page of them)."""
    run = run_with_events
    run.tasks.update(output="x" * 50_000)
    rows = event_log(run, type_filter="all")
    with django_assert_num_queries(0):
        keys = {e.task_key for e in rows if e.task_run_id}
        texts = [describe_event(e) for e in rows]
    assert "scope" in keys and len(texts) == len(rows)
    assert all(isinstance(e, LogRow) for e in rows) and not any(e.task_key for e in rows if not e.task_run_id)
    progress = next(e for e in rows if e.type == "task.progress")
    assert (progress.payload, describe_event(progress)) == (
        {"progress": 10, "output_tokens": 5},
        "10% · output tokens 5",
    )
    with django_assert_num_queries(1) as captured:
        event_log(run)
    statement = captured.captured_queries[0]["sql"]
    assert '"output"' not in statement and "instructions" not in statement and "system_prompt" not in statement


def test_the_log_shows_money_as_the_runs_cards_do(launched):
    """A settled attempt's cost read "$0.012300" (its six stored decimals) and a budget "$5" in the
    log, where the run's cards say "$0.0123" and "$5.00"."""
    run = launched({"a": ("researcher", [])}, budget_usd="5")
    a = run.tasks.get(subtask__key="a")
    with transaction.atomic():
        events.record(
            "task.succeeded",
            run=run,
            task=a,
            payload={"attempt": 1, "input_tokens": 300, "output_tokens": 40, "cost_usd": "0.012300"},
        )
    rows = {row.type: row for row in event_log(run, type_filter="all")}
    assert describe_event(rows["task.succeeded"]) == "attempt 1 · output tokens 40 · input tokens 300 · $0.0123"
    assert "budget $5.00," in describe_event(rows["run.created"])
