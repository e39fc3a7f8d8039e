"""One consistent read: every query of a `read_snapshot` block sees the database as of its first,
while writers on other connections go on."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from orchestrator.models import Agent
from orchestrator.readmodels.snapshot import read_snapshot
from tests.conftest import in_another_connection


def rename(pk: int, name: str):
    return lambda: Agent.objects.filter(pk=pk).update(role=name)


@pytest.mark.django_db(transaction=True)
def test_every_read_of_a_snapshot_sees_the_database_as_of_its_first_read(make_agent):
    agent = make_agent("researcher")
    with read_snapshot():
        before = Agent.objects.get(pk=agent.pk).role
        in_another_connection(rename(agent.pk, "changed while the page rendered"))
        assert Agent.objects.get(pk=agent.pk).role == before
        assert Agent.objects.filter(role="changed while the page rendered").count() == 0
    assert Agent.objects.get(pk=agent.pk).role == "changed while the page rendered"


@pytest.mark.django_db(transaction=True)
def test_without_a_snapshot_a_second_read_sees_a_write_committed_in_between(make_agent):
    """What the snapshot prevents (and what shows the test above can fail)."""
    agent = make_agent("researcher")
    Agent.objects.get(pk=agent.pk)
    in_another_connection(rename(agent.pk, "changed"))
    assert Agent.objects.get(pk=agent.pk).role == "changed"


@pytest.mark.django_db(transaction=True)
def test_a_snapshot_ends_its_transaction_and_a_failure_inside_it_still_ends_it(make_agent):
    agent = make_agent("researcher")
    with pytest.raises(RuntimeError):
        with read_snapshot():
            Agent.objects.get(pk=agent.pk)
            raise RuntimeError("the page failed to render")
    assert not connection.in_atomic_block
    in_another_connection(rename(agent.pk, "after"))
    assert Agent.objects.get(pk=agent.pk).role == "after"  # no snapshot left open
    with transaction.atomic():  # the project's own transactions still start
        Agent.objects.filter(pk=agent.pk).update(role="written")
    assert Agent.objects.get(pk=agent.pk).role == "written"


@pytest.mark.django_db
def test_inside_an_atomic_block_the_blocks_own_transaction_is_the_snapshot(make_agent):
    agent = make_agent("researcher")
    with transaction.atomic():
        with read_snapshot():
            Agent.objects.filter(pk=agent.pk).update(role="in the block")
        assert Agent.objects.get(pk=agent.pk).role == "in the block"
