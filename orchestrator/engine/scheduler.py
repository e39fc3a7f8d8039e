"""The scheduler step, `advance(run_id)` (DESIGN §3).

One call, one transaction: promote pending tasks whose upstreams are done (the ready rule),
open gates, cascade skips below failures, finish the run when nothing is left, and admit ready
tasks while every cap holds at once — the run's cap, each agent's `max_concurrency` counted
across all runs, the provider's in-flight cap, backoff and per-minute budgets, and the run's
cost budget. Admitted tasks start through engine/dispatch.py: a new Attempt each, claimed at once
by the host whose success took the step as far as it has room, the others handed to django-q2
after commit.

Every decision reads the database under row locks taken in one fixed order (run, agents,
provider limits), so several worker processes and several clusters can call `advance` at once
and nothing is admitted twice. On SQLite the immediate transaction serialises writers anyway.

A step is cheap because it is called after every attempt (DESIGN §9: fewer statements per
advance): the run's tasks are read once, as rows of plain values (`TaskRow`); the plan's graph
and the subtasks' fixed fields come from `run_shape` (read once per process); the decisions are
made in memory and written in a few statements — one UPDATE for the tasks that became ready, one
for those admitted, one INSERT for their attempts, one per group of tasks whose reason to wait
changed, one for the run's counters — besides the locks and the shared rate limits.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from orchestrator import events, sql, wording
from orchestrator.engine import admission, dispatch, run_shape, transitions, undecided, waits
from orchestrator.models import Attempt, Checkpoint, Run, Subtask, TaskRun
from orchestrator.readmodels import tasks as run_tasks

log = logging.getLogger(__name__)

State = TaskRun.State


@dataclass
class AdvanceResult:
    run_id: int
    promoted: int = 0
    admitted: list[int] = field(default_factory=list)  # attempt ids admitted (all enqueued but `kept`)
    finished: bool = False
    kept: list[int] = field(default_factory=list)  # with keep: admitted attempts left for the caller to run
    # with claim_for: the kept attempts, already claimed by the caller (execution.Claim)
    claims: list = field(default_factory=list)


def lock_run(run_id: int) -> Run:
    """Take the run's row lock: the first lock of every engine transaction that changes a run.

    FOR NO KEY UPDATE (no run's key ever changes): a plain FOR UPDATE would also block the key-share
    locks that PostgreSQL's foreign-key checks take on the run — at commit, since Django's
    constraints are deferred — so a transaction inserting an event of the run, holding the run's
    event numbers, would wait for a scheduling step that waits for those numbers: a deadlock.
    """
    locked = sql.objects(Run, lock=True, pk=run_id)
    if not locked:
        raise Run.DoesNotExist(f"run {run_id} does not exist")
    return locked[0]


def advance(run_id: int, *, keep: int = 0, claim_for: str = "") -> AdvanceResult:
    """Move a run forward as far as it can go now. Idempotent: a second call admits nothing new.

    ``keep``: the caller, an agent host whose attempts of this run have just ended, runs some of
    the admitted attempts itself (``result.kept``, the first admitted; see `kept_share`), so they
    are not handed to the broker: no queue round trip, and no second delivery that would find
    them claimed and take a transaction to say so. If the caller dies before claiming them, the
    reaper hands them to the broker once their queue lease (GLASSBOX_QUEUED_GRACE_S) expires, as
    for any attempt lost between commit and enqueue. With ``claim_for`` (the host's worker name)
    they are claimed for it here already (``result.claims``; see `advance_locked`).
    """
    with events.atomic():
        return advance_locked(lock_run(run_id), keep=keep, claim_for=claim_for)


def advance_locked(run: Run, *, keep: int = 0, claim_for: str = "", ended: Sequence[TaskRun] = ()) -> AdvanceResult:
    """`advance` inside a transaction that already holds the run's lock (`run` as locked, its
    counters up to date): an attempt's end and the step it triggers are then one transaction.

    `claim_for`: the worker (an agent host) that keeps attempts claims them here too — they are
    created running, leased to it, their requests built (`result.claims`) — which spares each a
    claim of its own (a transaction) on the way from one task to the next. `ended`: the tasks whose
    successes take this step, as they now are (their outputs are what their downstream's requests
    quote).
    """
    result = AdvanceResult(run.pk)
    if run.is_finished or run.status == Run.Status.AWAITING_APPROVAL:
        return result
    rows = read_tasks(run)
    shape = run_shape.of(run, {row.pk for row in rows.values()})
    result.promoted, fresh = promote_pending(run, shape, rows)
    if finish_if_done(run, rows):
        result.finished = True
        return result
    if run.status == Run.Status.RUNNING:
        result.admitted, result.claims = admit(
            run, shape, rows, keep=keep, claim_for=claim_for, ended=ended, fresh=fresh
        )
        result.kept = result.admitted[: dispatch.kept_share(len(result.admitted), keep)]
    else:
        write_ready(fresh)
        if run.status == Run.Status.PAUSED:
            hold_paused(run, rows)
    return result


@dataclass
class TaskRow:
    """One task of the run as a scheduling step reads it: plain values, no model instance."""

    pk: int
    subtask_id: int
    agent_id: int
    state: str
    skip_cascades: bool
    not_before: datetime | None
    wait_code: str
    wait_reason: str
    rank: float
    ready_at: datetime | None
    attempt_count: int


TASK_ROW_FIELDS = tuple(f.name for f in dataclass_fields(TaskRow))
# Admission alone reads a task's times, and only of the tasks it may admit (and, for its back-off,
# of the pending ones this step may promote: a task put back to pending can keep one): the others'
# are left unread (None), not parsed for every task of the run at every step (on PostgreSQL,
# parsing them was the largest CPU item of a 300-task run's step after the statements themselves).
_TASK_ROW_COLUMNS = tuple(
    sql.OnlyWhere(name, state__in=[*TaskRun.ADMISSIBLE, *([State.PENDING] if name == "not_before" else [])])
    if name in ("not_before", "ready_at")
    else name
    for name in TASK_ROW_FIELDS
)


def read_tasks(run: Run) -> dict[int, TaskRow]:
    """Every task of the run, by subtask id (one query); `ready_at` of the admissible ones only,
    `not_before` of those and the pending ones (the others' are None)."""
    return {values[1]: TaskRow(*values) for values in sql.select(TaskRun, _TASK_ROW_COLUMNS, run_id=run.pk)}


# --- The ready rule ---------------------------------------------------------------------------


def promote_pending(run: Run, shape: run_shape.RunShape, rows: dict[int, TaskRow]) -> tuple[int, list[TaskRow]]:
    """Apply the ready rule to every pending task; cascade skips below failed branches. Returns
    how many tasks it moved, and those that became ready.

    Decided on the rows in memory: every pending task once, then again each pending task below one
    just decided (a skip or a promotion can decide a task further down in the same step). Skips and gates are written one by one (they are rare
    and each has its own reason). The tasks that became ready are not written here: they are
    still pending in the database, and the step's admission writes each one once — those it admits
    straight to queued or running (`dispatch`), the rest to ready (`write_ready`). A chain's next
    task thus takes one UPDATE, not two.
    """
    to_decide = deque(sid for sid, row in rows.items() if row.state == State.PENDING)
    if not to_decide:
        return 0, []
    queued = set(to_decide)
    decided: list[tuple[int, str, list[int]]] = []  # (subtask id, new state, blockers), in decision order
    while to_decide:  # every pending task once, then the pending downstream of each decided
        sid = to_decide.popleft()
        queued.discard(sid)
        blockers, waiting = ready_rule(rows, shape.subtasks[sid].upstreams)
        if blockers:
            decided.append((sid, State.SKIPPED, blockers))
            rows[sid].state, rows[sid].skip_cascades = State.SKIPPED, True
        elif not waiting:
            promoted = State.WAITING_GATE if shape.subtasks[sid].gate == Subtask.Gate.BEFORE else State.READY
            decided.append((sid, promoted, []))
            rows[sid].state = promoted
        else:
            continue
        for down in shape.subtasks[sid].downstreams:
            if rows[down].state == State.PENDING and down not in queued:
                to_decide.append(down)
                queued.add(down)
    if not decided:
        return 0, []
    now = timezone.now()
    fresh = []
    for sid, new, blockers in decided:
        row = rows[sid]
        if new == State.READY:
            row.ready_at, row.wait_code, row.wait_reason = now, "", ""
            fresh.append(row)
            events.record("task.ready", run=run, task=row)
        elif new == State.SKIPPED:
            reason = blocked_reason([shape.subtasks[u].key for u in blockers])
            transitions.move_where(
                TaskRun.objects.filter(pk=row.pk),
                State.SKIPPED,
                from_states=[State.PENDING],
                skip_cascades=True,
                error=reason,
                finished_at=now,
            )
            events.record("task.skipped", run=run, task=row, message=reason, payload={"reason": reason})
        else:
            open_gate(TaskRun.objects.select_related("subtask").get(pk=row.pk), Checkpoint.Kind.BEFORE)
    return len(decided), fresh


def write_ready(fresh: list[TaskRow]) -> None:
    """Write the tasks this step found ready (`promote_pending`) that it did not admit: ready,
    since they became so (one statement)."""
    waiting = [row for row in fresh if row.state == State.READY]
    if waiting:
        transitions.move_where(
            TaskRun.objects.filter(pk__in=[row.pk for row in waiting]),
            State.READY,
            from_states=[State.PENDING],
            ready_at=waiting[0].ready_at,
        )


def ready_rule(rows: dict[int, TaskRow], upstreams: Sequence[int]) -> tuple[list[int], bool]:
    """A pending task's upstreams judged by the ready rule, in one pass (the step applies it to every
    pending task): those that block it — failed, cancelled, or skipped below a failure (a skip that
    cascades) — and whether any is yet to end. Succeeded and plainly skipped upstreams satisfy it."""
    blockers, waiting = [], False
    for sid in upstreams:
        up = rows[sid]
        if up.state == State.SUCCEEDED:
            continue
        if up.state in _BLOCKING or (up.state == State.SKIPPED and up.skip_cascades):
            blockers.append(sid)
        elif up.state != State.SKIPPED:
            waiting = True
    return blockers, waiting


_BLOCKING = frozenset({State.FAILED, State.CANCELLED})


_BLOCKED = ("upstream ", " did not succeed")


def blocked_reason(blocker_keys: Sequence[str]) -> str:
    """Why the ready rule skipped a task, naming the upstreams that block it."""
    return f"{_BLOCKED[0]}{', '.join(blocker_keys)}{_BLOCKED[1]}"


def blockers_named(reason: str) -> list[str]:
    """The upstream keys a `blocked_reason` names ([] for any other reason: a rejected gate's)."""
    if not (reason.startswith(_BLOCKED[0]) and reason.endswith(_BLOCKED[1])):
        return []
    return reason[len(_BLOCKED[0]) : -len(_BLOCKED[1])].split(", ")


def restate_blockers(run: Run, blockers: dict[int, list[str]], *, user) -> None:
    """Each task that stays skipped (by pk, with the keys of the upstreams that now block it) whose
    reason names an upstream that no longer blocks it is given the reason it has now, with a
    `task.skipped` event saying it stays so: a task below two failures said "upstream b did not
    succeed" after a person skipped b, while c, which had also failed, kept it skipped. A reason
    still true (every upstream it names still blocks) is left as it is, and nothing is said."""
    tasks = TaskRun.objects.filter(pk__in=blockers, state=State.SKIPPED).select_related("subtask")
    for task in sorted(tasks, key=lambda t: t.subtask.position):
        if not set(blockers_named(task.error)) - set(blockers[task.pk]):
            continue
        reason = blocked_reason(blockers[task.pk])
        TaskRun.objects.filter(pk=task.pk).update(error=reason)
        message = f"stays skipped: {reason}"
        events.record("task.skipped", run=run, task=task, user=user, message=message, payload={"reason": reason})


def skip_cascading(task: TaskRun, reason: str) -> None:
    transitions.move(task, State.SKIPPED, skip_cascades=True, error=reason, finished_at=timezone.now())
    events.record("task.skipped", run=task.run_id, task=task, message=reason, payload={"reason": reason})


def open_gate(task: TaskRun, kind: str) -> Checkpoint:
    """Hold a task at a human checkpoint: before it starts, or after it produced its output.

    A decided checkpoint is history: a retried or re-run task asks again with a new one, and the
    earlier decision keeps its decider, time and comment: the run page, the admin and the API list
    it beside the new one. (It was reset once, and a rejection then survived only in the event
    log.) A review's rejection is what the retried attempt is told (engine/review_feedback.py)."""
    transitions.move(task, State.WAITING_GATE if kind == Checkpoint.Kind.BEFORE else State.AWAITING_REVIEW)
    asked = Checkpoint.objects.filter(task_run=task, kind=kind)
    pending = asked.filter(status=Checkpoint.Status.PENDING).first()
    reopened = pending is None and asked.exists()
    checkpoint = pending or Checkpoint.objects.create(run_id=task.run_id, task_run=task, kind=kind)
    events.record(
        "checkpoint.created",
        run=task.run_id,
        task=task,
        message=f"{task.subtask.title}: approval needed {'before it starts' if kind == 'before' else 'of its output'}",
        payload={"checkpoint": checkpoint.pk, "kind": kind, "reopened": reopened},
    )
    return checkpoint


# --- Finishing ----------------------------------------------------------------------------------


def finish_if_done(run: Run, rows: dict[int, TaskRow] | None = None) -> bool:
    """End the run when every task is terminal, with a summary a person can read."""
    states = (
        [row.state for row in rows.values()] if rows is not None else list(run.tasks.values_list("state", flat=True))
    )
    if any(state not in TaskRun.TERMINAL for state in states):
        return False
    counts = Counter(states)
    if run.status == Run.Status.CANCELLED:
        return True
    failed = list(
        run.tasks.filter(state=State.FAILED).order_by("subtask__position").values_list("subtask__key", "error")
    )
    cascaded = (
        sum(1 for row in rows.values() if row.state == State.SKIPPED and row.skip_cascades)
        if rows is not None
        else run.tasks.filter(state=State.SKIPPED, skip_cascades=True).count()
    )
    # A task a person rejected at its gate is skipped like one below a failure (its branch must not
    # run), but it is a person's decision, not an upstream that did not succeed.
    rejected = rejected_at_gate(run) if cascaded else []
    by_person = counts.get(State.SKIPPED, 0) - cascaded  # skipped by a person: its branch goes on
    cascaded -= len(rejected)
    if failed or cascaded or rejected or counts.get(State.CANCELLED):
        # "a — timed out after 1 s, after 3 attempts": a reason in brackets nested its own.
        # A reviewer's comment may end a sentence ("… redo it."): cut so, it read "redo it.; 3 skipped".
        parts = [f"{key} {wording.EM_DASH} {(error or 'failed').rstrip(' .;')}" for key, error in failed[:10]]
        said = []
        if failed or not rejected:
            said.append(f"{len(failed)} of {wording.counted(len(states), 'task')} failed")
            if parts:
                said[0] += ": " + "; ".join(parts)
        if rejected:
            said.append(run_tasks.rejected_text(rejected))
        if by_person:  # "… rejected at its gate; 1 skipped because …" beside a card counting 3 skipped
            said.append(f"{by_person} skipped by a person")
        if cascaded:
            said.append(f"{cascaded} skipped because an upstream task did not succeed")
        end_run(run, Run.Status.FAILED, "; ".join(said))
    else:
        done = counts.get(State.SUCCEEDED, 0)
        if by_person:  # "all 3 tasks succeeded" of a run of 4 read as if it had 3
            summary = f"{done} of {wording.counted(len(states), 'task')} succeeded, {by_person} skipped by a person"
        else:
            summary = "the only task succeeded" if done == 1 else f"all {done} tasks succeeded"
        end_run(run, Run.Status.SUCCEEDED, summary)
    return True


def rejected_at_gate(run: Run) -> list[str]:
    """Keys of the run's tasks skipped because a person rejected them at their gate, in plan order."""
    return run_tasks.rejected_at_gate([run.pk]).get(run.pk, [])


def end_run(run: Run, status: str, summary: str, *, user=None, actor_name: str = "") -> None:
    """End `run` in `status`; `user` (or `actor_name`: `cli:<os user>`) is the person who ended it
    (a cancel, a rejected plan), named on its event as on the task events beside it, where the
    audit log said "system" for a run a person cancelled."""
    release_reservations(run)
    transitions.move(run, status, summary=summary, finished_at=timezone.now(), reserved_usd=Decimal("0"))
    events.record(
        f"run.{status}",
        run=run,
        user=user,
        actor_name=actor_name,
        message=summary,
        payload={"status": status, "summary": summary},
    )


def release_reservations(run: Run) -> None:
    """An ended run holds no money for work that will not settle.

    Attempts still queued are never claimed (a claim refuses an ended run): they are cancelled.
    An attempt still running finds its task stopped at its next beat and settles nothing
    (execution: a cancelled run, or a lost lease), so every reservation is given back here, once.
    """
    now = timezone.now()
    attempts = Attempt.objects.filter(task_run__run_id=run.pk)
    attempts.filter(state=Attempt.State.QUEUED).update(
        state=Attempt.State.CANCELLED, finished_at=now, error="the run ended before this attempt started"
    )
    attempts.filter(reserved_usd__gt=0).update(reserved_usd=Decimal("0"))


def admit(
    run: Run,
    shape: run_shape.RunShape,
    rows: dict[int, TaskRow],
    *,
    keep: int = 0,
    claim_for: str = "",
    ended: Sequence[TaskRun] = (),
    fresh: list[TaskRow] | None = None,
) -> tuple[list[int], list]:
    """Admit ready tasks in order while every cap holds (admission.decide), create and hand out
    their attempts, and show every other ready task why it waits. `fresh`: the tasks this step
    found ready, still pending in the database (`promote_pending`)."""
    now = timezone.now()
    fresh = fresh or []
    decision = admission.decide(run, shape, rows, now)
    if decision is None:
        write_ready(fresh)
        return [], []
    capacity = decision.capacity
    attempt_ids, claims = dispatch.start_attempts(
        run,
        decision.admitted,
        now,
        keep=keep,
        claim_for=claim_for,
        limits=capacity.limits,
        agents=capacity.agents,
        ended=ended,
        fresh={row.pk for row in fresh},
    )
    write_ready(fresh)
    note_waiting(run, decision.waiting, now)
    active = sum(1 for row in rows.values() if row.state in TaskRun.ACTIVE)
    added = sum((a.reserve for a in decision.admitted), Decimal("0"))
    if added or active > run.peak_running:
        Run.objects.filter(pk=run.pk).update(
            reserved_usd=F("reserved_usd") + added, peak_running=Greatest(F("peak_running"), Value(active))
        )
        run.reserved_usd += added
        run.peak_running = max(run.peak_running, active)
    if decision.budget_blocked and active == 0:
        stop_over_budget(run)
    return attempt_ids, claims


def hold_paused(run: Run, rows: dict[int, TaskRow]) -> None:
    """A paused run admits nothing: every task that could start says so (not an earlier cap)."""
    paused = waits.RunPaused()
    note_waiting(
        run,
        [
            (row, paused, 0.0)
            for row in rows.values()
            if row.state in TaskRun.ADMISSIBLE and not (row.state == State.READY and row.wait_code == paused.code)
        ],
        timezone.now(),
    )


def note_waiting(run: Run, waiting: list[tuple[TaskRow, waits.Wait, float]], now) -> None:
    """Show why ready tasks wait; an event only when a task's reason changes.

    A task held back by the provider's rate budget is THROTTLED and not looked at again until
    the budget may have freed (at most admission.THROTTLE_RECHECK_S later); a task held by a cap stays
    READY and is admitted as soon as a slot frees. The sentence takes part in "changes" only
    because it is what people see: a new one (another backoff deadline) must reach the page.
    Tasks that change alike are written together.
    """
    rechecks: dict[datetime, list[int]] = defaultdict(list)
    changes: dict[tuple[str, str, str], list[TaskRow]] = defaultdict(list)
    for row, reason, throttled_for in waiting:
        state: str = State.THROTTLED if throttled_for else State.READY
        if throttled_for:
            rechecks[now + timedelta(seconds=min(throttled_for, admission.THROTTLE_RECHECK_S))].append(row.pk)
        if (row.wait_code, row.wait_reason, row.state) != (reason.code, reason.message, state):
            changes[(state, reason.code, reason.message)].append(row)
    for not_before, ids in rechecks.items():
        TaskRun.objects.filter(pk__in=ids).update(not_before=not_before)
    for (state, code, message), changed in changes.items():
        transitions.move_where(
            TaskRun.objects.filter(pk__in=[row.pk for row in changed]),
            state,
            from_states=list(TaskRun.ADMISSIBLE),
            wait_code=code,
            wait_reason=message,
        )
        for row in changed:
            row.state, row.wait_code, row.wait_reason = state, code, message
            events.record(
                "task.throttled" if state == State.THROTTLED else "task.waiting",
                run=run,
                task=row,
                message=message,
                payload={"reason": message, "code": code, "state": state},
            )


# The error of the tasks a stop over budget cancelled: a retry after a raise sends them back to wait.
OVER_BUDGET_ERROR = "run over budget"


def stop_over_budget(run: Run) -> None:
    """Nothing is running and the next task would pass the budget: the run cannot go on until a
    person raises its budget (engine/run_budget.py) and retries a task, which the message says:
    it said "raise the budget and retry" while nothing could raise a run's budget."""
    spent = run.cost_usd
    message = (
        f"stopped: the budget of {wording.budget(run.budget_usd)} does not cover the next task "
        f"(spent {wording.usd(spent)}); raise the budget on the run's page, then retry a cancelled task"
    )
    for task in run.tasks.filter(state__in=[State.PENDING, *TaskRun.ADMISSIBLE, State.WAITING_GATE]):
        transitions.move(task, State.CANCELLED, error=OVER_BUDGET_ERROR, finished_at=timezone.now())
        events.record("task.cancelled", run=run, task=task, message=OVER_BUDGET_ERROR)
    close_pending_checkpoints(run, "the run went over its budget")
    end_run(run, Run.Status.OVER_BUDGET, message)


def close_pending_checkpoints(run: Run, why: str) -> None:
    """A run that stops leaves no question open: its pending checkpoints (plan, gates, reviews,
    tool calls) are closed without a decision, with the reason, so nobody decides a gate whose
    task was already cancelled."""
    undecided.close_undecided(run.checkpoints.all(), why)
