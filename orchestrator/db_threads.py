"""Database work from asyncio code: a small pool of threads, each with its own connection.

Django's ORM is synchronous and its connections belong to the thread that opened them. The agent
host (orchestrator.engine.host) runs many attempts on one event loop; whatever they need from the
database (a claim, a result, a rate-limit counter) runs on one of these threads, so the loop never
blocks on a query. Connections stay open between jobs (opening a PostgreSQL connection costs
milliseconds of CPU); a job that fails with a connection error closes its thread's connection so
that the next job opens a fresh one; `shutdown` closes every connection in its own thread.

`DatabaseThreads` is installed as the event loop's default executor by whoever owns the loop, so
code below the engine (a provider's rate-limit check) reaches it through `run` without knowing
about the host.

A pool may give its PostgreSQL sessions settings of their own (`session_settings`), set once when
a thread opens its connection: the agent host's commit asynchronously
(GLASSBOX_HOST_SYNCHRONOUS_COMMIT), and nothing else in the process does.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.backends.signals import connection_created

T = TypeVar("T")
_STOP = object()
_this_thread = threading.local()  # .session_settings: those of the pool whose thread this is


class DatabaseThreads(ThreadPoolExecutor):
    """A fixed pool of worker threads that keep their database connections between jobs.

    A ThreadPoolExecutor by type (asyncio accepts nothing else as a loop's default executor) whose
    own threads do the work: ThreadPoolExecutor's are never started, since `submit` and `shutdown`
    are this class's. Unlike them, each of these closes its database connections when it stops.
    """

    def __init__(self, threads: int, name: str = "glassbox-db", *, session_settings: Mapping[str, str] | None = None):
        if threads < 1:
            raise ValueError(f"DatabaseThreads needs at least one thread, got {threads}")
        super().__init__(max_workers=threads, thread_name_prefix=name)
        self.session_settings = dict(session_settings or {})
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._workers = [
            threading.Thread(target=self._work, name=f"{name}-{index}", daemon=True) for index in range(threads)
        ]
        for thread in self._workers:
            thread.start()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if self._closed:
            raise RuntimeError("DatabaseThreads is shut down")
        future: Future[T] = Future()
        self._jobs.put((future, functools.partial(fn, *args, **kwargs)))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._workers:
            self._jobs.put(_STOP)
        if wait:
            for thread in self._workers:
                thread.join()

    def _work(self) -> None:
        _this_thread.session_settings = self.session_settings
        try:
            while (job := self._jobs.get()) is not _STOP:
                future, call = job
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = call()
                except BaseException as exc:
                    if isinstance(exc, InterfaceError | OperationalError):
                        _close_connections()  # broken or gone: the next job reconnects
                    future.set_exception(exc)
                else:
                    future.set_result(result)
        finally:
            _close_connections()


def _apply_session_settings(sender: Any, connection: Any, **kwargs: Any) -> None:
    """A PostgreSQL connection opened by a pool's thread gets the pool's session settings."""
    session_settings = getattr(_this_thread, "session_settings", None)
    if not session_settings or connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for name, value in session_settings.items():
            cursor.execute("SELECT set_config(%s, %s, false)", [name, value])


connection_created.connect(_apply_session_settings, dispatch_uid="glassbox-db-threads-session-settings")


def _close_connections() -> None:
    for connection in connections.all(initialized_only=True):
        try:
            connection.close()
        except DatabaseError:
            pass


async def run(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on the running loop's default executor (DatabaseThreads in a
    worker process) and return its result."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))


def in_fresh_thread_if_loop_running(fn: Callable[[], T]) -> T:
    """``fn()`` here, or on a thread of its own when this thread already runs an event loop.

    A sync caller (a management command, an admin view, a test) may sit under a running loop it
    does not own: Playwright's sync API and notebooks keep one running on the main thread, and
    asyncio refuses to start a second loop there. The work then runs on a short-lived thread and
    this thread waits for its result (or its exception)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    with ThreadPoolExecutor(1, thread_name_prefix="glassbox-fresh-loop") as one:
        return one.submit(fn).result()


def run_coroutine(coro_factory: Callable[[], Any]) -> Any:
    """``asyncio.run(coro_factory())`` from sync code, also under someone else's running loop."""
    return in_fresh_thread_if_loop_running(lambda: asyncio.run(coro_factory()))


def run_sync(coro_factory: Callable[[], Any], *, threads: int = 2) -> Any:
    """Run a coroutine to completion on a fresh event loop whose default executor is a
    DatabaseThreads pool, closed (with its connections) at the end. For commands and tests that
    run one attempt in the calling process."""
    return in_fresh_thread_if_loop_running(lambda: _run_on_fresh_loop(coro_factory, threads))


def _run_on_fresh_loop(coro_factory: Callable[[], Any], threads: int) -> Any:
    pool = DatabaseThreads(threads, name="glassbox-db-sync")
    loop = asyncio.new_event_loop()
    loop.set_default_executor(pool)
    try:
        return loop.run_until_complete(coro_factory())
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())  # the pool, with its connections
        finally:
            loop.close()
