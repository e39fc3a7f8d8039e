"""The pusher→workers queue survives a worker killed while it waits (orchestrator/management/task_queue.py)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import time

import pytest
from django_q.queues import Queue

from orchestrator.management.task_queue import KillSafeQueue


def wait_for_work(tasks, done) -> None:
    """A django-q2 worker's loop: take tasks until STOP, saying on `done` which it took."""
    for task in iter(tasks.get, "STOP"):
        done.send((os.getpid(), task))


class Deliveries:
    """What the workers took, each reporting on a pipe of its own. A shared result queue would not
    do: a worker killed just after it reported may still hold that queue's write lock, and then
    no survivor could report again."""

    def __init__(self, context) -> None:
        self.context, self.readers, self.writers = context, [], []

    def pipe(self):
        """A new worker's end (the reader stays here, the writer too: a killed worker's pipe never
        reads as ready)."""
        reader, writer = self.context.Pipe(duplex=False)
        self.readers.append(reader)
        self.writers.append(writer)
        return writer

    def get(self, timeout: float) -> tuple[int, object]:
        ready = multiprocessing.connection.wait(self.readers, timeout)
        if not ready:
            raise queue.Empty
        return ready[0].recv()


def deliveries_after_killing_idle_workers(queue_class, kills: int = 3, workers: int = 4) -> list[bool]:
    """Start idle workers on one queue; SIGKILL them one by one, each time handing the survivors a
    task and saying whether one of them took it within 3 s (stopping at the first that was not)."""
    context = multiprocessing.get_context("fork")
    tasks, done = queue_class(), Deliveries(context)
    processes = [context.Process(target=wait_for_work, args=(tasks, done.pipe()), daemon=True) for _ in range(workers)]
    for process in processes:
        process.start()
    delivered = []
    try:
        for victim in processes[:kills]:
            # Every worker is idle, waiting in get(). Right after a delivery the others may still
            # be taking the read lock in turn to find the message gone (a few microseconds each,
            # but longer on a loaded machine): killed then, a worker is not idle (CI saw it once).
            time.sleep(0.3)
            os.kill(victim.pid, signal.SIGKILL)
            victim.join()
            tasks.put(f"after {victim.pid}")
            try:
                done.get(timeout=3)
            except queue.Empty:
                delivered.append(False)
                break  # wedged: the rest would wait too
            delivered.append(True)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    return delivered


def test_killing_idle_workers_leaves_the_survivors_taking_tasks():
    assert deliveries_after_killing_idle_workers(KillSafeQueue) == [True, True, True]


def test_the_stdlib_queue_this_replaces_wedges_when_the_worker_holding_its_lock_dies():
    """The failure KillSafeQueue prevents: one of the idle workers holds the read lock while it
    waits; killing all but one of them kills the holder unless the survivor held it (1 in 4), so
    eight rounds all escape it about once in 65,000."""
    assert any(False in deliveries_after_killing_idle_workers(Queue) for _ in range(8))


def test_it_still_delivers_each_task_once_and_in_order():
    queue = KillSafeQueue()
    for n in range(5):
        queue.put(n)
    assert [queue.get() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert queue.qsize() == 0


def work_while(has_room, tasks, done) -> None:
    """A worker whose agent host has room as `has_room()` says (its own process's answer)."""
    KillSafeQueue.has_room = staticmethod(lambda timeout: has_room() or bool(time.sleep(min(timeout, 0.05))))
    wait_for_work(tasks, done)


def test_a_worker_whose_host_is_full_leaves_tasks_to_a_worker_with_room():
    context = multiprocessing.get_context("fork")
    tasks, done, room = KillSafeQueue(), Deliveries(context), context.Event()
    full = context.Process(target=work_while, args=(room.is_set, tasks, done.pipe()), daemon=True)
    free = context.Process(target=work_while, args=(lambda: True, tasks, done.pipe()), daemon=True)
    for process in (full, free):
        process.start()
    try:
        for n in range(6):
            tasks.put(n)
        taken = [done.get(timeout=10) for _ in range(6)]
        assert {pid for pid, _ in taken} == {free.pid}
        assert sorted(task for _, task in taken) == list(range(6))

        free.kill()  # the full worker takes tasks again once its host has room
        free.join()
        tasks.put("later")
        with pytest.raises(queue.Empty):  # still full: it leaves the task where it is
            done.get(timeout=0.5)
        room.set()
        assert done.get(timeout=10) == (full.pid, "later")
    finally:
        for process in (full, free):
            if process.is_alive():
                process.kill()
                process.join()
