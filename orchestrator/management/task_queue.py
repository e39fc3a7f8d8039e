"""The queue between django-q2's pusher and its workers, made safe against a worker's SIGKILL.

django-q2's workers wait for tasks in ``task_queue.get()``, and `multiprocessing.Queue.get()` waits
*while holding the queue's read lock*, a semaphore shared by every worker. With the agent host
(orchestrator/engine/host.py) a worker's q2 loop is idle almost all the time — a task only hands
an attempt to the host — so the worker holding that lock is usually the one waiting. Kill it (the
OOM killer, an operator's `kill -9`) and the lock is never released: every other worker blocks on
it for ever, nothing more leaves the broker, and a run waits on attempts nobody will take (the
reaper hands them to the broker again and again). django-q2 reincarnates the dead worker but keeps
the queue.

:class:`KillSafeQueue` waits *without* the lock — it polls the pipe — and takes the lock only to
read a message already there, for microseconds. Our ``qcluster`` command installs it before the
cluster forks (:func:`install`).

It is also where a worker's back-pressure begins: a worker whose agent host has no free slot does
not take the next task (`host.wait_for_room`) and leaves it to a worker with room. Taken, the task
would wait inside the full host until one of its attempts ended — 20 s in the width benchmark,
where one attempt of 500 waited so while the other worker had a slot free.
"""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler

import django_q.cluster
from django_q.queues import Queue

from orchestrator.engine import host

# How long one wait on the pipe, or on the lock, lasts before it is tried again.
POLL_S = 0.5


class KillSafeQueue(Queue):
    """django-q2's Queue whose blocking ``get()`` holds no lock while it waits, and takes nothing
    while this process's agent host is full."""

    has_room = staticmethod(host.wait_for_room)

    def get(self, block: bool = True, timeout: float | None = None):
        if not block or timeout is not None:
            return super().get(block, timeout)  # django-q2 only ever blocks without a timeout
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        while True:
            if not self._reader.poll(POLL_S):  # waiting: no lock held
                continue
            if not self.has_room(POLL_S):  # full: the task is left to a worker with room
                continue
            if not self._rlock.acquire(timeout=POLL_S):
                continue
            try:
                if not self._reader.poll():  # another worker took it first
                    continue
                message = self._recv_bytes()
                self._sem.release()
            finally:
                self._rlock.release()
            self.size.increment(-1)
            return ForkingPickler.loads(message)


def install() -> None:
    """Make the clusters this process starts use :class:`KillSafeQueue` (django-q2's Sentinel
    builds its queues from the name ``django_q.cluster.Queue``)."""
    django_q.cluster.Queue = KillSafeQueue
