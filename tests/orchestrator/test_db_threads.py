"""Database threads for asyncio code: each keeps its connection, and a pool's PostgreSQL sessions
take the pool's settings (the agent host's commit without waiting for the disk)."""

from __future__ import annotations

import pytest
from django.db import connection

from orchestrator.db_threads import DatabaseThreads

pytestmark = pytest.mark.django_db(transaction=True)


def session_setting(name: str) -> tuple[str, str]:
    """(vendor, the setting's value in this thread's session; "" where the database has none)."""
    if connection.vendor != "postgresql":
        connection.ensure_connection()
        return connection.vendor, ""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s)", [name])
        return connection.vendor, cursor.fetchone()[0]


@pytest.mark.parametrize("value", ["off", "on"])
def test_a_pools_sessions_take_its_settings_and_no_other_session_does(value):
    pool = DatabaseThreads(2, name="test-db", session_settings={"synchronous_commit": value})
    try:
        in_pool = {pool.submit(session_setting, "synchronous_commit").result(timeout=30) for _ in range(4)}
    finally:
        pool.shutdown()
    plain = DatabaseThreads(1, name="test-db-plain")
    try:
        elsewhere = plain.submit(session_setting, "synchronous_commit").result(timeout=30)
    finally:
        plain.shutdown()
    vendor, _ = elsewhere
    if vendor == "postgresql":
        assert in_pool == {("postgresql", value)}
        assert elsewhere == ("postgresql", "on")  # the server's default, untouched
    else:  # SQLite has no such setting: the pool opens its connections as any other
        assert in_pool == {(vendor, "")}


def test_a_reopened_connection_takes_the_settings_again():
    pool = DatabaseThreads(1, name="test-db", session_settings={"synchronous_commit": "off"})
    try:
        first = pool.submit(session_setting, "synchronous_commit").result(timeout=30)
        pool.submit(lambda: connection.close()).result(timeout=30)  # as after a connection error
        again = pool.submit(session_setting, "synchronous_commit").result(timeout=30)
    finally:
        pool.shutdown()
    assert again == first
    if first[0] == "postgresql":
        assert again == ("postgresql", "off")
