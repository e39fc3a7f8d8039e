"""One consistent read of the database for everything a page or a live frame shows.

A frame reads the run, then its tasks, its events and its totals, one query after another. Under
the databases' default isolation each query sees what was committed when *it* ran, so a run that
ended between two of them showed up half-way: the header still said Running with one task
running, while the graph's last node was already green and the ETA said "ended". The next frame
corrected it, but a page that says something untrue is a bug, however briefly.

`read_snapshot` makes every query of a block see the database as of its first one:

* PostgreSQL: a REPEATABLE READ transaction (a snapshot taken at its first statement). Readers
  take no row locks, so writers are not held up.
* SQLite: a DEFERRED transaction. In WAL mode (DESIGN §8) its first read starts a read
  transaction that sees one state of the database until it ends, while writers go on. Django's
  own `atomic()` is not used: the project opens SQLite transactions IMMEDIATE (settings), which
  takes the write lock and would hold up every writer for as long as the page renders.

Inside an atomic block (a view that already runs in a transaction, a test's transaction) the
block's own transaction is the snapshot there is, and nothing changes. The block is for reading:
a write inside it is not supported. `read_snapshot()` is also a view decorator.

A query that fails on PostgreSQL aborts the whole transaction, where before it failed alone:
`part_of_snapshot` wraps a piece of the reading (one viewer's frame) that may fail without
failing the others, as each query could before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections, transaction


@contextmanager
def read_snapshot(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    connection = connections[using]
    if connection.in_atomic_block:
        yield
    elif connection.vendor == "postgresql":
        with transaction.atomic(using=using):
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield
    elif connection.vendor == "sqlite":
        with _sqlite_read_transaction(connection):
            yield
    else:  # another database: each query sees its own moment, as before
        yield


@contextmanager
def part_of_snapshot(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """A piece of a snapshot's reading that may fail alone: on PostgreSQL, a savepoint to roll
    back to (SQLite goes on after a failed statement)."""
    connection = connections[using]
    if connection.vendor == "postgresql" and connection.in_atomic_block:
        with transaction.atomic(using=using):
            yield
    else:
        yield


@contextmanager
def _sqlite_read_transaction(connection) -> Iterator[None]:
    connection.ensure_connection()
    raw = connection.connection  # Django runs SQLite in autocommit: the transaction is ours to end
    if raw.in_transaction:  # a snapshot already open (a read inside another's): it is the one there is
        yield
        return
    raw.execute("BEGIN DEFERRED")
    try:
        yield
    finally:
        try:
            if raw.in_transaction:
                raw.execute("COMMIT")  # it only read: ending it releases the snapshot
        except sqlite3.ProgrammingError:  # the block closed the connection: nothing is left to end
            pass
