"""django-q2's ORM broker with a doorbell: an idle cluster wakes when a task is queued.

The embedded profile's broker is a table. django-q2's ORM broker reads it and, finding it empty,
sleeps the cluster's `poll` (0.1 s) before it reads again, so a task handed to an idle cluster
waited 50 ms on average and up to 100 ms for a worker: a run's first tasks, and in a fan-out every
task beyond the slots its finishing host keeps (docs/benchmarks.md, dispatch p95). Here each
cluster's pusher, once its queue is empty, waits on a local socket of its own for up to the poll,
and a process that queues a task rings every pusher of that queue: the task is read at once. The
table is still read after every poll, so a ring that does not arrive (a pusher that started after
it, a full socket buffer) costs at most the poll, as before; a ring is a hint, never the record.

The sockets are Unix datagram sockets in a directory private to this user, one per pusher, named
by its process; the directory is named by the database and the queue, so clusters of other
projects, test sessions and queues never ring each other. Where there are no Unix sockets the
broker is django-q2's, polling.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import select
import socket
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf

log = logging.getLogger(__name__)
UNIX_SOCKETS = hasattr(socket, "AF_UNIX")


def bells_root() -> Path:
    """The directory of this user's bells, one directory per database and queue inside."""
    return Path(tempfile.gettempdir()) / f"glassbox-bells-{os.getuid()}"


def bell_directory(list_key: str) -> Path:
    """Where the pushers of queue `list_key` on this database listen."""
    database = settings.DATABASES[Conf.ORM or "default"]["NAME"]
    digest = hashlib.sha256(f"{database}\x1f{list_key}".encode()).hexdigest()[:16]
    return bells_root() / digest


def ring(list_key: str) -> int:
    """Wake every pusher waiting on queue `list_key`; returns how many were rung. A socket
    nobody listens on any more (its process died) is removed."""
    return _ring_directory(bell_directory(list_key))


def sweep() -> None:
    """Remove this user's bells that nobody listens on, and the directories left empty (their
    pushers' processes end without removing them). A live pusher is rung: it reads its queue once."""
    try:
        directories = list(bells_root().iterdir())
    except FileNotFoundError:
        return
    for directory in directories:
        _ring_directory(directory)
        with contextlib.suppress(OSError):
            directory.rmdir()  # only if nothing listens there


def _ring_directory(directory: Path) -> int:
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    rung = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for name in names:
            path = directory / name
            try:
                sender.sendto(b"\1", str(path))
                rung += 1
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):
                    path.unlink()
            except OSError:
                pass  # its buffer is full: it has been rung already
    return rung


def listen(list_key: str) -> socket.socket:
    """A bound, non-blocking socket on which this process is rung for queue `list_key`."""
    directory = bell_directory(list_key)
    path = directory / f"{os.getpid()}.sock"
    bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        for last_try in (False, True):
            directory.parent.mkdir(mode=0o700, exist_ok=True)  # private to this user, as is the leaf
            directory.mkdir(mode=0o700, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # left by a dead process of the same number
            try:
                bell.bind(str(path))
                break
            except FileNotFoundError:  # a sweep removed the directory meanwhile
                if last_try:
                    raise
    except OSError:
        bell.close()
        raise
    bell.setblocking(False)
    return bell


class DoorbellORM(ORM):
    """The ORM broker; `enqueue` rings the queue's pushers and an empty `dequeue` waits for a
    ring, or the poll, instead of sleeping the poll."""

    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key)
        self._bell: socket.socket | None = None
        self._bell_pid = 0
        self._no_bell = not UNIX_SOCKETS

    def enqueue(self, task):
        package_id = super().enqueue(task)
        if UNIX_SOCKETS:
            # Rung once the row is there for others to read (at once outside a transaction).
            transaction.on_commit(lambda: ring(self.list_key), using=Conf.ORM)
        return package_id

    def dequeue(self):
        bell = self._listening()  # before the read: a ring that comes after it is not missed
        if bell is None:
            return super().dequeue()
        tasks = list(self.get_connection().filter(key=self.list_key, lock__lt=timezone.now())[: Conf.BULK])
        if not tasks:
            if select.select([bell], [], [], Conf.POLL)[0]:
                _drain(bell)
            return None
        taken = []
        for task in tasks:
            # Another cluster may have been faster on this one: only a changed lock takes it.
            if self.get_connection().filter(id=task.id, lock=task.lock).update(lock=self.timeout(task)):
                taken.append((task.pk, task.payload))
        return taken

    def _listening(self) -> socket.socket | None:
        """This process's bell (a forked child makes its own), or None: polling as django-q2 does."""
        if self._no_bell:
            return None
        if self._bell is None or self._bell_pid != os.getpid():
            try:
                self._bell = listen(self.list_key)
            except OSError as exc:
                log.warning("queue %s: no doorbell (%s), polling every %s s", self.list_key, exc, Conf.POLL)
                self._no_bell = True
                return None
            self._bell_pid = os.getpid()
        return self._bell


def _drain(bell: socket.socket) -> None:
    with contextlib.suppress(BlockingIOError):
        while True:
            bell.recv(64)
