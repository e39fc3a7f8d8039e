"""The hot path's statements as text (orchestrator/sql.py) read and write what the ORM would."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from orchestrator import sql
from orchestrator.engine import runs
from orchestrator.models import Attempt, Event, Run, TaskRun

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(make_agent, make_plan):
    make_agent("researcher")
    return runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("researcher", [])}))


def fields_of(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_objects_are_the_instances_the_orm_makes(run):
    TaskRun.objects.filter(run=run).update(cost_usd=Decimal("0.012345"), started_at=timezone.now(), skip_cascades=True)
    (locked,) = sql.objects(Run, lock=True, pk=run.pk)
    assert fields_of(locked) == fields_of(Run.objects.get(pk=run.pk))
    made = {t.pk: fields_of(t) for t in sql.objects(TaskRun, run_id=run.pk)}
    assert made == {t.pk: fields_of(t) for t in TaskRun.objects.filter(run=run)}
    task = next(iter(made.values()))
    assert isinstance(task["cost_usd"], Decimal) and task["cost_usd"] == Decimal("0.012345")
    assert task["started_at"].tzinfo is not None and task["skip_cascades"] is True
    assert not locked._state.adding


def test_select_reads_fields_by_lookups_in_order(run):
    ids = sorted(TaskRun.objects.filter(run=run).values_list("pk", flat=True))
    assert sql.select(TaskRun, ("pk",), order_by=("pk",), pk__in=ids) == [(pk,) for pk in ids]
    assert sql.select(TaskRun, ("pk",), pk__in=[]) == []
    assert sql.select(TaskRun, ("pk",), pk__gt=ids[0], pk__lte=ids[1]) == [(ids[1],)]
    assert {row[0] for row in sql.select(TaskRun, ("pk",), run_id=run.pk, finished_at=None)} == set(ids)
    TaskRun.objects.filter(pk=ids[0]).update(started_at=timezone.now())
    assert sql.select(TaskRun, ("pk",), run_id=run.pk, started_at__isnull=False) == [(ids[0],)]
    assert sql.select(TaskRun, ("pk",), order_by=("pk",), run_id=run.pk, started_at__isnull=True) == [
        (pk,) for pk in ids[1:]
    ]
    assert sql.select(Run, ("pk",)) == [(run.pk,)]  # no lookup: every row
    with pytest.raises(ValueError, match="unsupported lookup 'pk__contains'"):
        sql.select(TaskRun, ("pk",), pk__contains=1)


def test_update_sets_values_adds_and_per_row_values(run):
    a, b, c = TaskRun.objects.filter(run=run).order_by("pk")
    now = timezone.now()
    changed = sql.update(
        TaskRun,
        {
            "output": "text",
            "input_tokens": sql.Add(7),
            "cost_usd": sql.Add(Decimal("0.5")),
            "ready_at": sql.PerRow({a.pk: now}),
            "finished_at": None,
        },
        pk__in=[a.pk, b.pk],
    )
    assert changed == 2
    a.refresh_from_db()
    b.refresh_from_db()
    c.refresh_from_db()
    assert (a.output, a.input_tokens, a.cost_usd, a.ready_at) == ("text", 7, Decimal("0.5"), now)
    assert (b.output, b.input_tokens, b.cost_usd, b.ready_at) == ("text", 7, Decimal("0.5"), None)
    assert c.output == "" and c.input_tokens == 0
    sql.update(TaskRun, {"cost_usd": sql.Add(Decimal("-0.25"))}, pk=a.pk)
    a.refresh_from_db()
    assert a.cost_usd == Decimal("0.25")


def test_update_matches_combinations_of_fields(run):
    a, b, c = TaskRun.objects.filter(run=run).order_by("pk")
    TaskRun.objects.filter(pk__in=[a.pk, c.pk]).update(attempt_count=1)
    TaskRun.objects.filter(pk=b.pk).update(attempt_count=2)
    changed = sql.update(
        TaskRun,
        {"error": sql.PerRow({a.pk: "first", b.pk: "second"})},
        match=(("pk", "attempt_count"), [(a.pk, 1), (b.pk, 1), (c.pk, 1)]),
    )
    assert changed == 2  # not b: its attempt count is 2
    assert dict(TaskRun.objects.filter(run=run).values_list("pk", "error")) == {a.pk: "first", b.pk: "", c.pk: ""}
    assert sql.select(TaskRun, ("pk",), match=(("pk", "attempt_count"), [])) == []


def test_update_can_return_the_rows_as_changed(run):
    a = TaskRun.objects.filter(run=run).order_by("pk").first()
    (moved,) = sql.update(TaskRun, {"attempt_count": sql.Add(1), "lease_owner": "w1"}, returning=True, pk=a.pk)
    assert fields_of(moved) == fields_of(TaskRun.objects.get(pk=a.pk))
    assert moved.attempt_count == a.attempt_count + 1 and moved.lease_owner == "w1"
    assert sql.update(TaskRun, {"lease_owner": "w2"}, returning=True, pk=a.pk, state="no such state") == []


def test_update_without_returning_in_the_database_reads_the_rows(run, monkeypatch):
    monkeypatch.setattr(sql, "can_return_from_update", lambda: False)
    a = TaskRun.objects.filter(run=run).order_by("pk").first()
    (moved,) = sql.update(TaskRun, {"lease_owner": "w1"}, returning=True, pk=a.pk, lease_owner="")
    assert moved.pk == a.pk and moved.lease_owner == "w1"
    assert sql.update(TaskRun, {"lease_owner": "w2"}, returning=True, pk=a.pk, lease_owner="") == []


def test_insert_gives_primary_keys_and_writes_every_field(run):
    task = TaskRun.objects.filter(run=run).order_by("pk").first()
    now = timezone.now()
    made = [
        Attempt(task_run=task, number=n, queued_at=now, reserved_usd=Decimal("0.01"), request={"prompt": f"p{n}"})
        for n in (5, 6)
    ]
    with transaction.atomic():
        sql.insert(Attempt, made)
    assert all(a.pk is not None and not a._state.adding for a in made)
    for attempt in made:
        assert fields_of(Attempt.objects.get(pk=attempt.pk)) == fields_of(attempt)
    sql.insert(Attempt, [])  # nothing to do


def test_events_are_written_in_one_statement_with_their_numbers(run):
    """On PostgreSQL the statement that takes the run's event numbers inserts the events too; on
    SQLite (no UPDATE inside a WITH) the numbers are taken first, and the events inserted in one."""
    from orchestrator import events

    before = Event.objects.filter(run=run).count()
    with CaptureQueriesContext(connection) as queries, events.atomic():
        for n in range(3):
            events.record("run.note", run=run, message=f"note {n}", payload={"n": n})
    statements = [q["sql"] for q in queries.captured_queries if "orchestrator_event" in q["sql"]]
    if connection.vendor == "postgresql":
        assert len(statements) == 1 and "orchestrator_eventsequence" in statements[0]
    else:
        assert [s.split()[0] for s in statements] == ["UPDATE", "INSERT"]
    written = list(Event.objects.filter(run=run).order_by("seq")[before:])
    assert [(e.message, e.payload) for e in written] == [(f"note {n}", {"n": n}) for n in range(3)]
    assert [e.seq for e in written] == list(range(written[0].seq, written[0].seq + 3))
    assert all(timezone.now() - e.created_at < timedelta(seconds=60) for e in written)


def test_events_of_a_run_without_its_sequence_row_are_numbered_after_the_last(run):
    """A run made before event numbers had a row of their own: its row is made, and the numbers
    go on from the run's last event (nothing inserted half-numbered)."""
    from orchestrator import events
    from orchestrator.models import EventSequence

    last = Event.objects.filter(run=run).order_by("-seq").values_list("seq", flat=True).first()
    EventSequence.objects.filter(run=run).delete()
    with events.atomic():
        events.record("run.note", run=run, message="one")
        events.record("run.note", run=run, message="two")
    written = list(Event.objects.filter(run=run, type="run.note").order_by("seq").values_list("message", "seq"))
    assert written == [("one", last + 1), ("two", last + 2)]


def test_insert_keeps_within_the_databases_parameter_limit(run, monkeypatch):
    monkeypatch.setattr(sql, "takes_arrays", lambda db: False)  # a placeholder per value, as on SQLite
    monkeypatch.setattr(sql, "MAX_PARAMETERS", 30)  # fewer than three events' worth of fields
    made = [
        Event(run_id=run.pk, seq=10_000 + n, type="run.note", message=f"n{n}", created_at=timezone.now())
        for n in range(7)
    ]
    with CaptureQueriesContext(connection) as queries:
        sql.insert(Event, made)
    assert len([q for q in queries.captured_queries if q["sql"].startswith("INSERT")]) == 4  # 2 + 2 + 2 + 1
    assert sorted(Event.objects.filter(seq__gte=10_000).values_list("message", flat=True)) == [
        f"n{n}" for n in range(7)
    ]
    assert all(e.pk is not None for e in made)


def test_many_rows_are_written_and_read_by_the_databases_own_form(run):
    """300 rows, their values of every kind (JSON, None, decimals, long text), each given its own key;
    on PostgreSQL the INSERT, the IN list, the row-value match and the per-row values are each a
    parameter per column (arrays), not a placeholder per value."""
    task = TaskRun.objects.filter(run=run).order_by("pk").first()
    now = timezone.now()
    made = [
        Attempt(
            task_run=task,
            number=100 + n,
            queued_at=now,
            started_at=None if n % 2 else now,
            reserved_usd=Decimal(n) / 1000,
            request={"prompt": f"p{n}", "n": [n]},
            output="x" * (n * 20),
        )
        for n in range(300)
    ]
    statements: list[tuple[str, int]] = []  # each statement's text and its number of parameters

    def capture(execute, text, params, many, context):
        statements.append((text, len(params or ())))
        return execute(text, params, many, context)

    with connection.execute_wrapper(capture), transaction.atomic():
        sql.insert(Attempt, made)
    for attempt in made:
        assert fields_of(Attempt.objects.get(pk=attempt.pk)) == fields_of(attempt)
    ids = [a.pk for a in made]
    with connection.execute_wrapper(capture):
        assert [row[0] for row in sql.select(Attempt, ("number",), order_by=("pk",), pk__in=ids)] == list(
            range(100, 400)
        )
        changed = sql.update(
            Attempt,
            {"error": sql.PerRow({pk: f"e{pk}" for pk in ids[::3]}), "output_tokens": sql.Add(1)},
            match=(("pk", "number"), [(a.pk, a.number) for a in made[:150]]),
        )
    assert changed == 150
    errors = dict(Attempt.objects.filter(pk__in=ids).values_list("pk", "error"))
    assert errors == {pk: (f"e{pk}" if i % 3 == 0 and i < 150 else "") for i, pk in enumerate(ids)}
    if sql.takes_arrays(connection):
        fields = len(Attempt._meta.concrete_fields) - 1  # all but the key
        assert [count for _, count in statements] == [fields, 1, 3 + 1 + 2]  # insert, select, update


def test_a_field_read_only_where_it_matters_is_none_elsewhere(run):
    a, b, c = TaskRun.objects.filter(run=run).order_by("pk")
    now = timezone.now().replace(microsecond=123456)
    TaskRun.objects.filter(pk__in=[a.pk, b.pk]).update(ready_at=now)
    TaskRun.objects.filter(pk=b.pk).update(state=TaskRun.State.READY)
    rows = sql.select(
        TaskRun,
        ("pk", sql.OnlyWhere("ready_at", state__in=[TaskRun.State.READY]), "state"),
        order_by=("pk",),
        run_id=run.pk,
    )
    assert rows == [(a.pk, None, a.state), (b.pk, now, TaskRun.State.READY), (c.pk, None, c.state)]


def test_a_list_of_mixed_number_types_is_written_and_matched(run):
    """Ints and floats for one float column, as the ORM takes them (one array parameter on
    PostgreSQL takes a single type: the field converts them)."""
    a, b, c = TaskRun.objects.filter(run=run).order_by("pk")
    assert sql.update(TaskRun, {"rank": sql.PerRow({a.pk: 1, b.pk: 2.5})}, pk__in=[a.pk, b.pk]) == 2
    assert dict(TaskRun.objects.filter(run=run).values_list("pk", "rank")) == {a.pk: 1.0, b.pk: 2.5, c.pk: c.rank}
    assert sql.select(TaskRun, ("pk",), order_by=("pk",), rank__in=[1, 2.5]) == [(a.pk,), (b.pk,)]
