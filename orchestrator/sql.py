"""The statements every attempt runs, as SQL text: no query building on the hot path (DESIGN §9).

The engine goes through Django's ORM everywhere but on the path from one attempt's end to the
next attempt's start: a success recorded, its run's scheduling step, the next task admitted and
claimed, their events — about fourteen statements in one transaction, on the critical path of
every chain. The ORM spent 0.2–1 ms of CPU building each of them (a QuerySet, its compilation,
model instances): most of the ~13 ms that transaction took on PostgreSQL, and nearly all of it
on SQLite, where the statements themselves take microseconds (docs/benchmarks.md).

These helpers write the same statements as text and keep what the ORM guarantees: values are adapted
by their fields (`get_db_prep_save`), rows are converted by the backend's and the fields'
converters, objects are made by `Model.from_db` — a row read here is the instance the ORM would have
made. Conditions are `filter()`-style lookups (`name=value`, `name__in=[...]`, `name__gt=value` and
the other comparisons, `name__isnull=bool`); values set by an UPDATE are plain values, `Add(n)`
(``column = column + n``) or `PerRow({pk: value})` (a value for each of those rows, the others
unchanged). Only what the hot path needs, and the live view's reads that run several times a second
for every watched run (its poll's latest event and saved progress, a frame's events, agents,
provider limits and pending checkpoints: the ORM took ~0.3 ms of CPU to build each of them, these
~0.07 ms on PostgreSQL); anything else goes through the ORM. On PostgreSQL a list of values (an IN
list, a row match, per-row values, a multi-row insert's columns) is one array parameter
(`takes_arrays`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field, Model

M = TypeVar("M", bound=Model)
Match = tuple[tuple[str, ...], Sequence[tuple]]
MAX_PARAMETERS = 65_535


@dataclass(frozen=True)
class Add:
    """An UPDATE's ``column = column + amount`` (a negative amount subtracts)."""

    amount: Any


@dataclass(frozen=True)
class PerRow:
    """An UPDATE's value per row: ``values[pk]`` for the rows whose primary key is there, the
    others unchanged (``CASE pk WHEN … THEN … ELSE column END``, or the value at the row's key's
    position in an array of the keys where the database takes arrays)."""

    values: dict[Any, Any]


class OnlyWhere:
    """A field read only on the rows matching `lookups` (as `select`'s conditions), NULL on the
    others: ``CASE WHEN … THEN column END``. For a column that costs a conversion per row (a time
    parsed) where the reader needs it on a few rows of many."""

    def __init__(self, name: str, **lookups: Any):
        self.name, self.lookups = name, lookups


def _db():
    """The database connection of this thread, looked up once per statement: `connection` is a proxy
    whose every attribute costs a thread-local lookup (thousands for a fan-out's events)."""
    return connections[DEFAULT_DB_ALIAS]


@functools.cache
def quote(name: str) -> str:
    """A table or column name quoted for the database (one database per process)."""
    return _db().ops.quote_name(name)


def lock_clause() -> str:
    """The row lock of the engine's transactions: FOR NO KEY UPDATE on PostgreSQL (see
    scheduler.lock_run); nothing on SQLite, whose immediate transactions hold the database."""
    return " FOR NO KEY UPDATE" if _db().features.has_select_for_no_key_update else ""


def can_return_from_update() -> bool:
    """UPDATE … RETURNING: PostgreSQL, and SQLite from 3.35."""
    vendor = _db().vendor
    if vendor == "sqlite":
        import sqlite3

        return sqlite3.sqlite_version_info >= (3, 35)
    return vendor == "postgresql"


def in_list(values: Sequence[Any]) -> str:
    """`%s` placeholders for an IN list of `values`."""
    return ", ".join(["%s"] * len(values))


def takes_arrays(db) -> bool:
    """Whether a list of values goes to the database as one array parameter (PostgreSQL) rather
    than a placeholder per value. psycopg splits a statement's text on its placeholders in Python
    and caches the split only for statements of at most 50 parameters: a 300-task run's INSERT of
    its tasks (5,000 placeholders) took 60-100 ms there before PostgreSQL saw it, and a wave's
    attempts and events a few ms each on the path from one attempt's end to the next's start.
    With arrays every statement has a placeholder per column, whatever the number of rows (as
    Django's own bulk_create does on PostgreSQL, with UNNEST)."""
    return db.vendor == "postgresql"


@functools.cache
def _array_type(vendor: str, field: Field) -> str:
    """The array type of `field`'s column, without a length or precision (varchar[], numeric[]),
    so that no value is cut short by the cast."""
    db_type = field.db_type(_db())
    assert db_type, f"{field} has no column type"
    return re.sub(r"\s*\([^)]*\)", "", db_type) + "[]"


def _array(db, field: Field) -> str:
    return f"%s::{_array_type(db.vendor, field)}"


def _uniform(field: Field, values: list) -> list:
    """`values` as one array parameter takes them: psycopg refuses a list of mixed Python types
    (ints and floats for a FloatField, say), which a placeholder per value accepted; such a list
    is converted by the field (`to_python`), None left as it is."""
    if len({type(v) for v in values if v is not None}) <= 1:
        return values
    return [None if v is None else field.to_python(v) for v in values]


def one_of(column: str, field: Field, values: Sequence[Any]) -> tuple[str, list]:
    """The condition that `column` (a column of `field`, as the statement names it) holds one of
    `values`, and its parameters: ``column IN (…)``, or ``column = ANY(array)`` where the database
    takes arrays (`takes_arrays`)."""
    db = _db()
    if not values:
        return "1 = 0", []
    adapted = [_adapt(db, field, v) for v in values]
    if takes_arrays(db):
        return f"{column} = ANY({_array(db, field)})", [_uniform(field, adapted)]
    return f"{column} IN ({in_list(adapted)})", adapted


# --- Fields: their columns, how their values go in and come out ------------------------------


@functools.cache
def _field(model: type[Model], name: str) -> Field:
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    assert isinstance(field, Field), f"{model.__name__}.{name} is not a column"
    return field


@functools.cache
def _columns(model: type[Model], names: tuple[str, ...]) -> str:
    return ", ".join(quote(_field(model, name).column) for name in names)


@functools.cache
def _all_fields(model: type[Model]) -> tuple[str, ...]:
    return tuple(f.attname for f in model._meta.concrete_fields)


@functools.cache
def _converters(vendor: str, model: type[Model], names: tuple[str, ...]) -> tuple[tuple[int, list, Any], ...]:
    """The ORM's converters of each column read (index, converters, the column's expression)."""
    db, found = _db(), []
    for index, name in enumerate(names):
        field = _field(model, name)
        column = field.cached_col
        converters = db.ops.get_db_converters(column) + field.get_db_converters(db)  # type: ignore[attr-defined]
        if converters:
            found.append((index, converters, column))
    return tuple(found)


def _convert(db, rows: list[tuple], converters: tuple[tuple[int, list, Any], ...]) -> list[tuple]:
    if not converters:
        return rows
    converted = []
    for row in rows:
        values = list(row)
        for index, funcs, column in converters:
            for convert in funcs:
                values[index] = convert(values[index], column, db)
        converted.append(tuple(values))
    return converted


# Fields whose value the ORM passes to the database as it is (after a type coercion the engine's
# values never need): the adapters below skip their preparation, a call chain per value.
_PLAIN = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "BigIntegerField",
        "BooleanField",
        "CharField",
        "FloatField",
        "IntegerField",
        "PositiveBigIntegerField",
        "PositiveIntegerField",
        "PositiveSmallIntegerField",
        "SmallIntegerField",
        "TextField",
    }
)


@functools.cache
def _adapter(vendor: str, field: Field):
    """How a value of `field` goes to the database: as it is, or through the field's preparation."""
    target = field.target_field if field.is_relation else field  # type: ignore[attr-defined]
    if target.get_internal_type() in _PLAIN:
        return lambda value, db: value
    return field.get_db_prep_save


def _adapt(db, field: Field, value: Any) -> Any:
    """`value` as the ORM would send it for `field`."""
    return _adapter(db.vendor, field)(value, db)


# --- Conditions -----------------------------------------------------------------------------------

_COMPARISONS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def _match_condition(db, model: type[Model], match: Match) -> tuple[str, list]:
    """The rows whose fields `names` hold one of `combinations` (a row value IN list)."""
    names, combinations = match
    if not combinations:
        return "1 = 0", []
    fields = [_field(model, name) for name in names]
    if takes_arrays(db):
        arrays = ", ".join(_array(db, f) for f in fields)
        columns = [_uniform(f, [_adapt(db, f, row[index]) for row in combinations]) for index, f in enumerate(fields)]
        return f"({_columns(model, names)}) IN (SELECT * FROM UNNEST({arrays}))", columns
    row = "(" + in_list(fields) + ")"
    values = [_adapt(db, f, v) for combination in combinations for f, v in zip(fields, combination, strict=True)]
    return f"({_columns(model, names)}) IN ({', '.join([row] * len(combinations))})", values


def _where(db, model: type[Model], lookups: dict[str, Any], match: Match | None = None) -> tuple[str, list]:
    parts: list[str] = []
    params: list = []
    if match is not None:
        text, more = _match_condition(db, model, match)
        parts.append(text)
        params += more
    for key, value in lookups.items():
        name, _, op = key.partition("__")
        field = _field(model, name)
        column = quote(field.column)
        if op == "in":
            text, more = one_of(column, field, list(value))
            parts.append(text)
            params += more
        elif op in _COMPARISONS:
            parts.append(f"{column} {_COMPARISONS[op]} %s")
            params.append(_adapt(db, field, value))
        elif op == "isnull":
            parts.append(f"{column} IS {'' if value else 'NOT '}NULL")
        elif op:
            raise ValueError(f"sql: unsupported lookup {key!r}")
        elif value is None:
            parts.append(f"{column} IS NULL")
        else:
            parts.append(f"{column} = %s")
            params.append(_adapt(db, field, value))
    return " AND ".join(parts) or "1 = 1", params


# --- Statements ------------------------------------------------------------------------------------


def fetch(statement: str, params: Sequence[Any] = ()) -> list[tuple]:
    with _db().cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall()


def select(
    model: type[Model],
    names: Sequence[str | OnlyWhere],
    *,
    order_by: Sequence[str] = (),
    lock: bool = False,
    match: Match | None = None,
    extra: Sequence[str] = (),
    **where: Any,
) -> list[tuple]:
    """Rows of the fields `names` (attnames, or "pk") of `model`'s rows matching `where` (and
    `match`, as in `update`), converted as the ORM converts them, followed by the values of the SQL
    expressions `extra`; with `lock`, locked for the transaction (`lock_clause`). A name may be an
    `OnlyWhere`: that field's value on the rows it matches, None on the others."""
    db = _db()
    plain = tuple(n.name if isinstance(n, OnlyWhere) else n for n in names)
    params: list = []
    if any(isinstance(n, OnlyWhere) for n in names):
        expressions = []
        for n in names:
            if isinstance(n, OnlyWhere):
                when, more = _where(db, model, n.lookups)
                expressions.append(f"CASE WHEN {when} THEN {_columns(model, (n.name,))} END")
                params += more
            else:
                expressions.append(_columns(model, (n,)))
        columns = ", ".join(expressions)
    else:
        columns = _columns(model, plain)
    columns += "".join(f", {expression}" for expression in extra)
    condition, where_params = _where(db, model, where, match)
    order = f" ORDER BY {_columns(model, tuple(order_by))}" if order_by else ""
    lock_text = lock_clause() if lock else ""
    statement = f"SELECT {columns} FROM {quote(model._meta.db_table)} WHERE {condition}{order}{lock_text}"
    return _convert(db, fetch(statement, params + where_params), _converters(db.vendor, model, plain))


def objects(
    model: type[M],
    *,
    order_by: Sequence[str] = (),
    lock: bool = False,
    match: Match | None = None,
    extra: dict[str, str] | None = None,
    **where: Any,
) -> list[M]:
    """Instances of `model` for its rows matching `where` (and `match`), every concrete field
    loaded (`select`); `extra`: attributes to set on each, by name, from SQL expressions read with
    the row."""
    names = _all_fields(model)
    expressions = list((extra or {}).values())
    rows = select(model, names, order_by=order_by, lock=lock, match=match, extra=expressions, **where)
    made = []
    for row in rows:
        instance = model.from_db(DEFAULT_DB_ALIAS, names, row[: len(names)])
        for name, value in zip(extra or {}, row[len(names) :], strict=True):
            setattr(instance, name, value)
        made.append(instance)
    return made


def _assignment(db, field: Field, value: Any) -> tuple[str, list]:
    column = quote(field.column)
    if isinstance(value, Add):
        return f"{column} = {column} + %s", [_adapt(db, field, value.amount)]
    if isinstance(value, PerRow):
        if not value.values:
            return f"{column} = {column}", []
        pk_field = field.model._meta.pk
        pk = quote(pk_field.column)
        if takes_arrays(db):  # the value at the row's key's position in the keys
            keys = _uniform(pk_field, [_adapt(db, pk_field, k) for k in value.values])
            values = _uniform(field, [_adapt(db, field, v) for v in value.values.values()])
            position = f"array_position({_array(db, pk_field)}, {pk})"
            return (
                f"{column} = CASE WHEN {position} IS NULL THEN {column} ELSE ({_array(db, field)})[{position}] END",
                [keys, values, keys],
            )
        whens = " ".join(["WHEN %s THEN %s"] * len(value.values))
        params = [item for pk_value, v in value.values.items() for item in (pk_value, _adapt(db, field, v))]
        return f"{column} = CASE {pk} {whens} ELSE {column} END", params
    return f"{column} = %s", [_adapt(db, field, value)]


def update(
    model: type[M],
    values: dict[str, Any],
    *,
    returning: bool | Sequence[str] = False,
    match: Match | None = None,
    **where: Any,
) -> Any:
    """UPDATE `model`'s rows matching `where` with `values`; the count of rows changed, or with
    `returning` the rows as changed: instances (every concrete field) when True, rows of those
    fields when a list of names (UPDATE … RETURNING where the database has it, else a read of the
    same rows by primary key). `match`: ((field, …), [(value, …), …]), the rows whose fields hold
    one of those combinations (a row value IN list)."""
    if returning and not can_return_from_update():
        ids = [row[0] for row in select(model, ("pk",), match=match, **where)]
        update(model, values, match=match, **{**where, "pk__in": ids})
        if returning is True:
            return objects(model, pk__in=ids)
        return select(model, tuple(returning), pk__in=ids)
    db = _db()
    sets: list[str] = []
    params: list = []
    for name, value in values.items():
        text, more = _assignment(db, _field(model, name), value)
        sets.append(text)
        params += more
    condition, where_params = _where(db, model, where, match)
    statement = f"UPDATE {quote(model._meta.db_table)} SET {', '.join(sets)} WHERE {condition}"
    if not returning:
        with db.cursor() as cursor:
            cursor.execute(statement, params + where_params)
            return cursor.rowcount
    names = _all_fields(model) if returning is True else tuple(returning)
    rows = fetch(f"{statement} RETURNING {_columns(model, names)}", params + where_params)
    rows = _convert(db, rows, _converters(db.vendor, model, names))
    if returning is not True:
        return rows
    return [model.from_db(DEFAULT_DB_ALIAS, names, row) for row in rows]


def _insert_fields(model: type[Model]) -> list[Field]:
    """The columns an INSERT writes: every concrete field but an automatic primary key."""
    return [f for f in model._meta.concrete_fields if not (f.primary_key and f.auto_created)]


def _row_params(db, fields: Sequence[Field], instances: Sequence[Model]) -> list:
    """The parameters of `instances` as rows of `fields`, row after row, each value adapted as the
    ORM would send it (the rows of a batch share their times: each adapted once)."""
    adapters = [(f.attname, _adapter(db.vendor, f), f.get_internal_type() == "DateTimeField") for f in fields]
    adapted: dict[Any, Any] = {}
    params = []
    for obj in instances:
        for name, adapt, is_time in adapters:
            value = getattr(obj, name)
            if is_time and value is not None:
                if value not in adapted:
                    adapted[value] = adapt(value, db)
                params.append(adapted[value])
            else:
                params.append(adapt(value, db))
    return params


def _column_arrays(fields: Sequence[Field], params: list) -> list:
    """Row-after-row `params` as one array parameter per column (UNNEST)."""
    return [_uniform(f, params[index :: len(fields)]) for index, f in enumerate(fields)]


def _saved(model: type[Model], instances: Sequence[Model], ids: Sequence[Any]) -> None:
    for obj, pk in zip(instances, ids, strict=True):
        obj.pk = pk
        obj._state.adding = False
        obj._state.db = DEFAULT_DB_ALIAS


def insert(model: type[Model], instances: Iterable[Model]) -> None:
    """INSERT new instances of `model` (every concrete field but an automatic primary key, as the
    instances hold them: set `auto_now_add` fields first) and give each its primary key."""
    instances = list(instances)
    if not instances:
        return
    meta = model._meta
    fields = _insert_fields(model)
    columns = _columns(model, tuple(f.attname for f in fields))
    row_marks = "(" + in_list(fields) + ")"
    db = _db()
    arrays = takes_arrays(db) and len(instances) > 1  # a column per parameter (UNNEST)
    # SQLite's backend bounds a statement's parameters; PostgreSQL's protocol allows 65,535.
    batch = (
        len(instances)
        if arrays
        else max(1, min(db.ops.bulk_batch_size(fields, instances), MAX_PARAMETERS // len(fields)))
    )
    for start in range(0, len(instances), batch):
        chunk = instances[start : start + batch]
        params = _row_params(db, fields, chunk)
        if arrays:
            params = _column_arrays(fields, params)
            rows = f"SELECT * FROM UNNEST({', '.join(_array(db, f) for f in fields)})"
        else:
            rows = f"VALUES {', '.join([row_marks] * len(chunk))}"
        statement = f"INSERT INTO {quote(meta.db_table)} ({columns}) {rows}"
        if db.features.can_return_rows_from_bulk_insert:
            ids = [row[0] for row in fetch(f"{statement} RETURNING {quote(meta.pk.column)}", params)]
        else:
            with db.cursor() as cursor:
                cursor.execute(statement, params)
            ids = [None] * len(chunk)
        _saved(model, chunk, ids)


def insert_numbered(
    model: type[Model], instances: Sequence[Model], number: str, *, counter: str, counter_params: Sequence[Any]
) -> int | None:
    """INSERT new instances of `model` numbered in their order by the statement that takes their
    numbers, in one statement (PostgreSQL, `takes_arrays`: a data-modifying WITH): `counter` is an
    UPDATE … RETURNING the counter's new last value as `last`, already advanced by
    len(instances). Gives each instance its primary key and its number (field `number`); returns
    the last number, or None when the counter's row is missing (then nothing was inserted)."""
    db = _db()
    assert takes_arrays(db), "insert_numbered needs a database that takes arrays"
    fields = [f for f in _insert_fields(model) if f.attname != number]
    names = tuple(f.attname for f in fields)
    arrays = _column_arrays(fields, _row_params(db, fields, instances))
    aliases = [f"c{index}" for index in range(len(fields))]
    number_column = _columns(model, (number,))
    rows = fetch(
        f"WITH counter AS ({counter}) "
        f"INSERT INTO {quote(model._meta.db_table)} ({_columns(model, names)}, {number_column}) "
        f"SELECT {', '.join(f'item.{a}' for a in aliases)}, counter.last - %s + item.ordinal "
        f"FROM counter, UNNEST({', '.join(_array(db, f) for f in fields)}) "
        f"WITH ORDINALITY AS item({', '.join(aliases)}, ordinal) ORDER BY item.ordinal "
        f"RETURNING {_columns(model, ('pk', number))}",
        [*counter_params, len(instances), *arrays],
    )
    if not rows:
        return None
    by_number = {seq: pk for pk, seq in rows}
    last = max(by_number)
    first = last - len(instances) + 1
    for offset, obj in enumerate(instances):
        setattr(obj, number, first + offset)
    _saved(model, instances, [by_number[first + offset] for offset in range(len(instances))])
    return last
