"""The pusher→workers queue survives a worker killed while it waits (orchestrator/management/task_queue.py)."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time

from django_q.queues import Queue

from orchestrator.management.task_queue import KillSafeQueue


def wait_for_work(tasks, done) -> None:
    """A django-q2 worker's loop: take tasks until STOP."""
    for task in iter(tasks.get, "STOP"):
        done.put((os.getpid(), task))


def deliveries_after_killing_idle_workers(queue_class, kills: int = 3, workers: int = 4) -> list[bool]:
    """Start idle workers on one queue; SIGKILL them one by one, each time handing the survivors a
    task and saying whether one of them took it within 3 s (stopping at the first that was not)."""
    context = multiprocessing.get_context("fork")
    tasks, done = queue_class(), context.Queue()
    processes = [context.Process(target=wait_for_work, args=(tasks, done), daemon=True) for _ in range(workers)]
    for process in processes:
        process.start()
    delivered = []
    try:
        time.sleep(0.3)  # every worker is waiting in get()
        for victim in processes[:kills]:
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
