"""The embedded profile's broker: an idle pusher is rung awake when a task is queued."""

from __future__ import annotations

import shutil
import socket
import threading
import uuid

import pytest
from django_q.conf import Conf

from orchestrator import orm_broker
from orchestrator.orm_broker import DoorbellORM, bell_directory, ring
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queue_name():
    name = f"bell-test-{uuid.uuid4().hex[:8]}"
    yield name
    DoorbellORM(list_key=name).purge_queue()
    shutil.rmtree(bell_directory(name), ignore_errors=True)


def test_an_idle_pusher_takes_a_task_when_it_is_queued_not_at_its_next_poll(monkeypatch, queue_name):
    monkeypatch.setattr(Conf, "POLL", 60.0)  # a poll that would outlast the test's patience
    pusher, producer = DoorbellORM(list_key=queue_name), DoorbellORM(list_key=queue_name)
    first: list = []
    waiting = threading.Thread(target=lambda: first.append(pusher.dequeue()))
    waiting.start()
    wait_until(lambda: any(bell_directory(queue_name).glob("*.sock")), 10)
    producer.enqueue("the payload")
    waiting.join(timeout=20)
    assert not waiting.is_alive(), "the pusher slept through the ring"
    taken = first[0] or pusher.dequeue()  # rung while reading, it may have taken it at once
    assert [payload for _, payload in taken] == ["the payload"]
    pusher._bell.close()


def test_a_ring_reaches_every_pusher_of_the_queue_and_removes_dead_ones(queue_name):
    live = orm_broker.listen(queue_name)
    dead_path = bell_directory(queue_name) / "999999999.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(dead_path))
    dead.close()  # its process is gone; the file stays behind
    try:
        assert ring(queue_name) == 1
        assert live.recv(8) == b"\1"
        assert not dead_path.exists()
    finally:
        live.close()


def test_queues_and_databases_have_bells_of_their_own(settings, monkeypatch):
    assert bell_directory("glassbox") != bell_directory("glassbox-test")
    before = bell_directory("glassbox")
    monkeypatch.setitem(settings.DATABASES["default"], "NAME", "/elsewhere/other.sqlite3")
    assert bell_directory("glassbox") != before
    assert ring(f"nobody-listens-{uuid.uuid4().hex}") == 0


def test_without_a_bell_it_polls_as_django_q2_does(monkeypatch, queue_name, caplog):
    def refuse(list_key):
        raise PermissionError("not allowed here")

    monkeypatch.setattr(orm_broker, "listen", refuse)
    monkeypatch.setattr(Conf, "POLL", 0.01)
    pusher = DoorbellORM(list_key=queue_name)
    assert not pusher.dequeue()  # nothing queued: it slept the poll
    pusher.enqueue("queued anyway")
    assert [payload for _, payload in pusher.dequeue()] == ["queued anyway"]
    assert f"queue {queue_name}: no doorbell (not allowed here), polling every 0.01 s" in caplog.text


def test_a_sweep_removes_bells_nobody_listens_on_and_keeps_live_ones(queue_name):
    live = orm_broker.listen(queue_name)
    gone = orm_broker.listen(f"{queue_name}-gone")
    gone.close()
    try:
        orm_broker.sweep()
        assert list(bell_directory(queue_name).glob("*.sock"))
        assert not bell_directory(f"{queue_name}-gone").exists()
        assert live.recv(8) == b"\1"  # rung once: it reads its queue, finds nothing and waits again
    finally:
        live.close()
