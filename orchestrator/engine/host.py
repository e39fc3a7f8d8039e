"""The agent host: one asyncio event loop per worker process running many attempts at once (DESIGN §9).

An agent call mostly waits (on the model, on tools), so holding a whole worker process per call
made parallelism equal to the process count. Each django-q2 worker process now has one host:

- **Dispatch stays django-q2's.** The q2 task `orchestrator.tasks.execute_attempt` hands the
  attempt to its process's host (`submit`) and returns once the host accepted it. While the host
  runs `GLASSBOX_SLOTS_PER_WORKER` attempts, `submit` blocks: the q2 worker takes no more work,
  so the broker hands it to other processes (back-pressure). q2's own timeout no longer bounds an
  attempt, which may run for hours.
- **Per attempt, as before**: leases, cancellation, timeouts (orchestrator/engine/agent_runner.py
  runs one attempt). What is per host is how often the database hears of them: one heartbeat a
  second asks which of the host's tasks were cancelled or lost (one query), renews every lease
  every third of `GLASSBOX_LEASE_S` (one statement), and every `GLASSBOX_PROGRESS_SAVE_S` saves
  the output and usage of the attempts that changed (one transaction). Nothing of this touches the
  run row or writes an event.
- **Live progress** goes to viewers without the database when a shared channel layer carries it
  (orchestrator/engine/live.py); otherwise viewers poll the saved progress.
- **Chaining.** When an attempt ends, the host advances its run — the successes of one run that
  end while one of its steps is under way recorded together, with one step for all — and runs
  the newly admitted attempts in the slots that just freed and those still free, without a
  broker round trip (the others go to the broker, so that work spreads over processes).
- **Draining** (graceful shutdown, a recycled worker): the host stops accepting at once (attempts
  waiting in `submit` go back to the broker), lets running attempts finish within the grace period
  (less than a lease), then hands back the rest: their tasks are ready again at once, and no retry
  is spent. A killed process's attempts are recovered by the reaper when their leases expire.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from multiprocessing import util as mp_util

from django.conf import settings

from orchestrator import db_threads, events, parent_death
from orchestrator.db_threads import run as db
from orchestrator.engine import agent_runner, attempt_ends, dispatch, execution, live, scheduler
from orchestrator.engine.agent_runner import AttemptRun
from orchestrator.providers.base import Usage

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
# How long draining waits for the loop to stop, then for its thread to end.
STOP_S = 10.0
# The most deliveries one claim transaction takes (a cap of 64 delivers its first wave in one).
CLAIM_BATCH = 64
# How many ids of attempts claimed ahead of their deliveries a host remembers (see `submit`).
CLAIMED_AHEAD_KEPT = 10_000


@dataclass
class _Waiter:
    """An attempt of this host waiting for its run's next step: whether it would run an attempt
    the step keeps, and the success it has to record first, if any."""

    future: asyncio.Future
    keep: bool
    success: attempt_ends.Success | None = None


@dataclass
class _Advance:
    """Pending scheduling steps of one run in this host: who waits, and whether a step is under way."""

    waiters: list[_Waiter] = field(default_factory=list)
    running: bool = False


class AgentHost:
    """Runs attempts on an event loop in a thread of its own (see the module docstring)."""

    def __init__(self, *, slots: int | None = None, db_threads_count: int | None = None, worker: str | None = None):
        self.slots = slots or settings.GLASSBOX_SLOTS_PER_WORKER
        self.worker = worker or execution.worker_name()
        self.free = threading.Semaphore(self.slots)
        self.accepting = True
        self.attempts: dict[int, AttemptRun] = {}  # by task id
        self.in_flight = 0  # attempts accepted and not yet ended (claimed or not)
        self.outcomes: dict[str, int] = {}
        self._advances: dict[int, _Advance] = {}
        self._to_claim: list[tuple[int, asyncio.Future]] = []  # deliveries waiting for `_claim`
        self._claiming = False
        # Attempts claimed with an earlier delivery of their wave (`_claim_delivered`), whose own
        # deliveries are still to come: answered at once, without a slot or a transaction. Bounded:
        # a delivery that went to another worker, or came first, leaves its id here.
        self._claimed_ahead: OrderedDict[int, None] = OrderedDict()
        self._claimed_ahead_lock = threading.Lock()
        self._idle = threading.Condition()
        self._draining = threading.Lock()
        self.pool = db_threads.DatabaseThreads(
            db_threads_count or settings.GLASSBOX_HOST_DB_THREADS,
            session_settings={"synchronous_commit": settings.GLASSBOX_HOST_SYNCHRONOUS_COMMIT},
        )
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(self.pool)
        self._thread = threading.Thread(target=self._run_loop, name="glassbox-agent-host", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()

    # --- Called from other threads -----------------------------------------------------------------

    def submit(self, attempt_id: int) -> str:
        """Hand an attempt to the host; blocks while every slot is taken. Called by the q2 task."""
        with self._claimed_ahead_lock:
            ahead = self._claimed_ahead.pop(attempt_id, False) is None
        if ahead:  # this host claimed it with an earlier delivery of its wave
            return "claimed already by this worker"
        while not self.free.acquire(timeout=HEARTBEAT_S):
            if not self.accepting:
                break
        else:
            if self.accepting:
                with self._idle:
                    self.in_flight += 1
                asyncio.run_coroutine_threadsafe(self._host_attempt(attempt_id), self.loop)
                return "accepted"
            self.free.release()
        dispatch.enqueue_attempt(attempt_id)  # draining: another process takes it
        return "handed to the broker (this worker is stopping)"

    def drain(self, grace_s: float | None = None) -> None:
        """Stop accepting, let running attempts finish for up to `grace_s`, hand back the rest,
        stop the loop and close the database threads. Safe to call more than once, and from two
        threads at once (SIGTERM and the worker's exit): the second waits for the first."""
        with self._draining:
            if self._thread.is_alive():
                self._drain(grace_s)

    def _drain(self, grace_s: float | None) -> None:
        grace_s = settings.GLASSBOX_DRAIN_S if grace_s is None else grace_s
        self.accepting = False
        deadline = time.monotonic() + grace_s
        with self._idle:
            self._idle.wait_for(lambda: self.in_flight == 0, timeout=max(0.0, deadline - time.monotonic()))
        if self.in_flight:
            log.info("handing back %s attempts that did not finish within %.0f s", self.in_flight, grace_s)
            asyncio.run_coroutine_threadsafe(self._hand_back_all(), self.loop)
            with self._idle:
                self._idle.wait_for(lambda: self.in_flight == 0, timeout=settings.GLASSBOX_LEASE_S)
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(timeout=STOP_S)
        except TimeoutError:  # a stop must not keep a draining worker from exiting
            log.warning("agent host: the loop did not stop within %s s; stopping it as it is", STOP_S)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=STOP_S)
        self.pool.shutdown(wait=True)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no attempt is in flight (tests, benchmarks)."""
        with self._idle:
            return self._idle.wait_for(lambda: self.in_flight == 0, timeout=timeout)

    # --- The loop --------------------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self._close_loop()

    def _close_loop(self) -> None:
        """Close the stopped loop here, in its own thread: what `_stop` cancelled ends first (up to
        STOP_S), then the loop's resources go. Left open, the loop was closed by the garbage
        collector in whatever thread it ran, where channels_redis's close hook, which runs a flush
        on the loop, failed if another loop was running there."""
        pending = asyncio.all_tasks(self.loop)
        if pending:
            self.loop.run_until_complete(asyncio.wait(pending, timeout=STOP_S))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    async def _start(self) -> None:
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name="glassbox-heartbeat")
        self._publisher = live.Publisher(self)
        events.set_doorbell(self._ring_doorbell)

    async def _stop(self) -> None:
        self._heartbeat.cancel()
        await self._publisher.close()
        events.set_doorbell(None)
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        self.loop.call_soon(self.loop.stop)

    def _ring_doorbell(self, run_id: int, seq: int) -> None:
        """events' doorbell from a database thread: sent from the loop, coalesced per run."""
        self.loop.call_soon_threadsafe(self._publisher.doorbell, run_id, seq)

    def free_slots(self) -> int:
        return self.slots - self.in_flight

    def wait_for_room(self, timeout: float) -> bool:
        """Wait up to `timeout` for a free slot; True once there is one, or once the host stops
        accepting (a stopping host hands what it is given back to the broker)."""
        with self._idle:
            return self._idle.wait_for(lambda: self.in_flight < self.slots or not self.accepting, timeout=timeout)

    async def _host_attempt(
        self, attempt_id: int | None, claimed: execution.Claim | None = None, *, holds_slot: bool = True
    ) -> None:
        """One slot's life: run the attempt (or one a scheduling step claimed for this host), then
        the attempts its success kept for this host — the first in this slot, the others each in
        a slot of their own — until none is left."""
        next_id, next_claim = attempt_id, claimed
        running = attempt_id
        try:
            while next_id is not None or next_claim is not None:
                # What a success may keep: this slot's next attempt, and more while slots are free.
                keep = 1 + self.free_slots() if settings.GLASSBOX_CLAIM_NEXT and self.accepting else 0
                running = next_claim.attempt.pk if next_claim is not None else next_id
                if next_claim is None:
                    assert next_id is not None
                    next_claim = await self._claim(next_id)
                claim: execution.Claim | None = next_claim
                if next_claim is not None:
                    outcome = await agent_runner.run_claimed(self, next_claim, keep=keep)
                else:
                    log.info("attempt %s is not ours to run (already claimed, finished or cancelled)", next_id)
                    outcome = "not claimed"
                next_id = next_claim = None
                self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
                if claim is None:
                    break
                if claim.advanced:  # its success advanced the run and claimed what it kept for us
                    kept = list(claim.kept)
                    next_claim = kept.pop(0) if kept else None
                    for extra in kept:
                        self._run_kept(extra)
                else:
                    next_claim = await self.advance(claim.task.run_id, keep=bool(keep))
        except Exception:
            # Its attempt keeps its lease: the reaper recovers it when the lease runs out, as for a
            # killed worker (a claim a step made for this host is in no broker queue to hand back).
            log.exception("agent host: attempt %s failed outside its own handling", running)
        finally:
            if holds_slot:
                self.free.release()
            with self._idle:
                self.in_flight -= 1
                self._idle.notify_all()

    async def _claim(self, attempt_id: int) -> execution.Claim | None:
        """Claim an attempt the broker delivered, together with those delivered meanwhile
        (execution.claim_attempts): a run's first wave arrives as dozens of deliveries at once,
        and one transaction claims them all, not one each. One batch at a time per host."""
        waiter: asyncio.Future = self.loop.create_future()
        self._to_claim.append((attempt_id, waiter))
        if not self._claiming:
            self._claiming = True
            asyncio.create_task(self._claim_delivered())
        return await waiter

    async def _claim_delivered(self) -> None:
        try:
            while self._to_claim:
                batch, self._to_claim = self._to_claim[:CLAIM_BATCH], self._to_claim[CLAIM_BATCH:]
                delivered = [attempt_id for attempt_id, _ in batch]
                # The rest of the wave these belong to, as far as this host has room: taken now, so
                # that the broker's deliveries meanwhile find the slots taken (see _advance_run).
                more = self._reserve(self.free_slots()) if settings.GLASSBOX_CLAIM_NEXT and self.accepting else 0
                try:
                    pending = [attempt_id for attempt_id, _ in self._to_claim]  # delivered, claimed next
                    claims = await db(execution.claim_attempts, delivered, self.worker, more=more, pending=pending)
                except Exception as exc:
                    self._release(more)
                    for _, waiter in batch:
                        if not waiter.done():
                            waiter.set_exception(exc)
                    continue
                for attempt_id, waiter in batch:
                    if not waiter.done():
                        waiter.set_result(claims.get(attempt_id))
                taken = [claim for attempt_id, claim in claims.items() if attempt_id not in delivered]
                for claim in taken[:more]:  # claimed ahead of their deliveries: each in a slot of its own
                    self._remember_claimed_ahead(claim.attempt.pk)
                    self._run_kept(claim, reserved=True)
                self._release(more - len(taken[:more]))
        finally:
            self._claiming = False

    def _remember_claimed_ahead(self, attempt_id: int) -> None:
        with self._claimed_ahead_lock:
            self._claimed_ahead[attempt_id] = None
            while len(self._claimed_ahead) > CLAIMED_AHEAD_KEPT:
                self._claimed_ahead.popitem(last=False)

    def _run_kept(self, claim: execution.Claim, *, reserved: bool = False) -> None:
        """Run an attempt a scheduling step claimed for this host, in a slot of its own (`reserved`
        for it before the step: already counted in flight). It was claimed because slots were
        free; should `submit` have taken them meanwhile, it runs anyway (the slots are
        back-pressure for the broker, not a hard limit)."""
        holds_slot = self.free.acquire(blocking=False)  # released when it ends, like any slot
        if not reserved:
            with self._idle:
                self.in_flight += 1
        asyncio.create_task(self._host_attempt(None, claim, holds_slot=holds_slot))

    def _reserve(self, slots: int) -> int:
        """Count up to `slots` free slots in flight ahead of a step that may keep attempts for them;
        returns how many. `_run_kept(reserved=True)` takes them up, `_release` gives back the rest."""
        with self._idle:
            taken = max(0, min(slots, self.slots - self.in_flight))
            self.in_flight += taken
        return taken

    def _release(self, slots: int) -> None:
        if slots:
            with self._idle:
                self.in_flight -= slots
                self._idle.notify_all()

    async def succeed(self, claim: execution.Claim, output: str, usage: Usage, *, keep: int) -> str:
        """Record a success and take its run's scheduling step (agent_runner.succeed); what the
        step kept for this slot is in `claim.kept`, claimed already.

        Coalesced: the successes of one run that end while a step of it is under way in this host
        are recorded together, with one step for all, in the next transaction (`_advance_run`). At
        cap 64 a fan-out's wave ends within a few hundred milliseconds, and a transaction per
        success waited on the run's row for all the others (docs/benchmarks.md)."""
        outcome, kept = await self._step(claim.task.run_id, keep > 0, attempt_ends.Success(claim, output, usage))
        claim.advanced, claim.kept = True, [kept] if kept is not None else []
        assert outcome is not None
        return outcome

    async def advance(self, run_id: int, *, keep: bool) -> execution.Claim | None:
        """Advance a run after an attempt ended; returns an admitted attempt kept for the caller,
        claimed for this host already. Coalesced with the run's other steps in this host, as
        `succeed` is."""
        return (await self._step(run_id, keep))[1]

    async def _step(
        self, run_id: int, keep: bool, success: attempt_ends.Success | None = None
    ) -> tuple[str | None, execution.Claim | None]:
        state = self._advances.setdefault(run_id, _Advance())
        waiter = _Waiter(self.loop.create_future(), keep, success)
        state.waiters.append(waiter)
        if not state.running:
            state.running = True
            asyncio.create_task(self._advance_run(run_id, state))
        if success is None:
            return await waiter.future
        # A success is recorded even if its attempt is stopped meanwhile (as agent_runner.record).
        try:
            return await asyncio.shield(waiter.future)
        except asyncio.CancelledError:
            agent_runner.uncancel()
            return await waiter.future

    async def _advance_run(self, run_id: int, state: _Advance) -> None:
        waiting: list[_Waiter] = []
        try:
            while state.waiters:
                waiting, state.waiters = state.waiters, []
                keepers = [w for w in waiting if w.keep] if self.accepting else []
                # One for each waiting slot, and more for the slots that are free: taken now, so
                # that the broker's deliveries meanwhile find them taken (else a fan-out's first
                # wave, kept here, met a dozen deliveries it had no room for).
                extra = self._reserve(self.free_slots()) if keepers else 0
                keep = len(keepers) + extra if keepers else 0
                successes = [w.success for w in waiting if w.success is not None]
                try:
                    outcomes, result = await self._record_and_step(run_id, successes, keep)
                except Exception as exc:
                    self._release(extra)
                    log.exception("agent host: advancing run %s failed", run_id)
                    for w in waiting:
                        if not w.future.done():
                            w.future.set_exception(exc)
                    continue
                ended = dict(zip((id(s) for s in successes), outcomes, strict=True))
                kept = list(result.claims)
                for w in waiting:
                    outcome = ended.get(id(w.success)) if w.success is not None else None
                    if w.future.done():
                        continue
                    if isinstance(outcome, Exception):
                        w.future.set_exception(outcome)
                    else:
                        w.future.set_result((outcome, kept.pop(0) if kept and w in keepers else None))
                for claim in kept:  # claimed for this host beyond its waiters: each in a slot of its own
                    self._run_kept(claim, reserved=extra > 0)
                    extra -= 1
                self._release(max(0, extra))
        finally:
            state.running = False
            for w in waiting + state.waiters:  # cut off (the loop is going away): nobody waits for ever
                if not w.future.done():
                    w.future.cancel()
            if self._advances.get(run_id) is state and not state.waiters:
                del self._advances[run_id]

    async def _record_and_step(self, run_id: int, successes: list[attempt_ends.Success], keep: int):
        """The successes recorded and the run's step taken, in one transaction. Should that fail
        with several successes (one of them may be what fails), each is recorded alone, then the
        step: the others are not lost with it. Returns each success's outcome (or exception)."""
        if not successes:
            return [], await db(scheduler.advance, run_id, keep=keep, claim_for=self.worker)
        try:
            return await db(attempt_ends.complete_all, run_id, successes, keep=keep, claim_for=self.worker)
        except Exception:
            if len(successes) == 1:
                raise
            log.exception("agent host: recording %d successes of run %s at once failed", len(successes), run_id)
        outcomes: list = []
        for s in successes:
            try:
                outcomes.append(await db(attempt_ends.complete, s.claim, s.output, s.usage, advance=False))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes, await db(scheduler.advance, run_id, keep=keep, claim_for=self.worker)

    # --- Tracking running attempts (agent_runner.Tracker) -------------------------------------------

    def track(self, attempt: AttemptRun) -> None:
        self.attempts[attempt.task_id] = attempt

    def untrack(self, attempt: AttemptRun) -> None:
        if self.attempts.get(attempt.task_id) is attempt:
            del self.attempts[attempt.task_id]
        self._publisher.forget(attempt)

    # --- Heartbeat -----------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        last_renewal = last_save = time.monotonic()
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                now = time.monotonic()
                running = list(self.attempts.values())
                gone = await db(execution.still_ours, [a.claim for a in running])
                for attempt in running:
                    if attempt.task_id in gone:
                        attempt.stop(
                            agent_runner.CANCELLED if gone[attempt.task_id] == "cancelled" else agent_runner.LOST
                        )
                if now - last_renewal >= settings.GLASSBOX_LEASE_S / 3:
                    last_renewal = now
                    await db(execution.renew_leases, self.worker, [a.task_id for a in running if a.task_id not in gone])
                if now - last_save >= settings.GLASSBOX_PROGRESS_SAVE_S:
                    last_save = now
                    await self.save_progress()
                if self.accepting and not await db(cluster_still_running):
                    log.info("agent host: the cluster is stopping; this worker stops taking work")
                    self.accepting = False
            except Exception:  # the heartbeat must survive a database hiccup; leases are renewed next time
                log.exception("agent host: heartbeat failed")

    async def save_progress(self) -> None:
        """Save the output and usage of attempts that changed since they were last saved."""
        changed = [a for a in self.attempts.values() if a.version != a.saved_version and a.stop_reason is None]
        if not changed:
            return
        versions = {a.task_id: a.version for a in changed}
        await db(execution.save_progress, [(a.claim, _copy(a.progress)) for a in changed])
        for attempt in changed:
            attempt.saved_version = versions[attempt.task_id]

    async def _hand_back_all(self) -> None:
        for attempt in list(self.attempts.values()):
            attempt.stop(agent_runner.SHUTDOWN)


def _copy(progress: execution.Progress) -> execution.Progress:
    return execution.Progress(progress.output, progress.progress, progress.usage)


def cluster_still_running() -> bool:
    """False once this worker's qcluster is stopping (SIGTERM to its main process): django-q2 tells
    its workers only through a STOP in their task queue, which a busy worker reads late."""
    from django_q.conf import Conf
    from django_q.status import Stat

    sentinel = os.getppid()
    for stat in Stat.get_all():
        if stat.sentinel == sentinel:
            return stat.status not in (Conf.STOPPING, Conf.STOPPED)
    return True  # no stat seen (yet): keep working


# --- One host per worker process --------------------------------------------------------------------

_host: AgentHost | None = None
_host_pid: int | None = None
_lock = threading.Lock()


def current() -> AgentHost:
    """This process's host, started on first use (after a fork, a new one)."""
    global _host, _host_pid
    with _lock:
        if _host is None or _host_pid != os.getpid():
            _host, _host_pid = AgentHost(), os.getpid()
            mp_util.Finalize(_host, _host.drain, exitpriority=100)
        return _host


def submit(attempt_id: int) -> str:
    return current().submit(attempt_id)


def wait_for_room(timeout: float) -> bool:
    """Before this worker process takes a task from its cluster's queue: wait up to `timeout` while
    its host is full. A full host that took the task would hold it until one of its own attempts
    ended, however free the other workers are (orchestrator/management/task_queue.py).

    Takes no module lock: it runs in every worker's queue wait, and a process forked while another
    thread held that lock (a test's, say) would wait on it for ever. A host set up meanwhile is
    seen at the next call."""
    host, pid = _host, _host_pid
    return host is None or pid != os.getpid() or host.wait_for_room(timeout)


def prepare_worker_process() -> None:
    """In a q2 worker process (post_spawn): SIGTERM drains the host instead of killing the process,
    and so does the death of the worker's sentinel.

    systemd (and `kill` of a process group) sends SIGTERM to every process of the cluster at once;
    django-q2 leaves its workers' default action, death, so every attempt in flight was lost. The
    worker now stops taking work, finishes or hands back what it runs, and then exits.

    A sentinel killed alone (SIGKILL: it cannot stop its cluster) left its workers hosting their
    attempts on, re-parented, with nobody to stop them. The kernel now sends the worker a SIGTERM
    when its sentinel dies (orchestrator/parent_death.py), and it drains the same way.
    """

    def terminate(signum, frame) -> None:
        threading.Thread(target=_drain_and_exit, name="glassbox-drain", daemon=True).start()

    signal.signal(signal.SIGTERM, terminate)
    if (sentinel := multiprocessing.parent_process()) is not None and sentinel.pid is not None:
        parent_death.signal_when_parent_dies(signal.SIGTERM, sentinel.pid)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by our qcluster for its sentinel


def _drain_and_exit() -> None:
    with _lock:
        host = _host if _host_pid == os.getpid() else None
    if host is not None:
        host.drain()
    os._exit(0)
