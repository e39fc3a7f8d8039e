"""The live view's frames: the events a viewer has not seen yet, turned into one websocket message.

`render_batch` sends the log rows of those events plus the current state of every part of the
run page they touched (the partials of dashboard/fragments.py, with `hx-swap-oob`; see
LIVE_PROTOCOL in dashboard/consumers.py). Parts show the state *now*, not at the event:
replaying a hundred events of one task re-renders its row once. The running tasks' saved
progress and output are not events: `saved_progress` reads them for the broadcaster's poll.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator import events, sql
from orchestrator.models import Event, Run, TaskRun
from orchestrator.readmodels import graph as run_graph
from orchestrator.readmodels import log as run_log
from orchestrator.readmodels import steps as run_steps
from orchestrator.readmodels import tasks as run_tasks

from .fragments import (
    Viewer,
    base_context,
    render,
    render_panel_head,
    render_panel_parts,
    render_parts,
    render_path_steps,
)

# Event families whose events change the timeline (attempts start and end) or the result.
GANTT_TYPES = {
    "task.queued",
    "task.started",
    "task.succeeded",
    "task.output_ready",
    "task.failed",
    "task.retry_scheduled",
    "task.cancelled",
    "attempt.lost",
    "attempt.late_result_discarded",
    "attempt.cancelled",
    "attempt.handed_back",
}
# Events after which the run's workspace may hold new files (a tool wrote one; an attempt ended).
ARTIFACT_TYPES = {"tool.result", "task.succeeded", "task.failed", "task.cancelled", "attempt.lost", "attempt.cancelled"}
# Run events that change no task row (the others, a run's start and end, may change every task).
RUN_TYPES_SPARING_TASKS = {"run.created", "run.paused", "run.resumed", "run.budget_changed"}
# Events of a task that change only its path and its head (the panel sends those alone).
PATH_TYPES = set(run_steps.STEP_EVENT_TYPES) | {"task.progress"}


# --- Live batches -------------------------------------------------------------------------------


@dataclass
class Batch:
    html: str
    from_seq: int
    to_seq: int
    # What the events were about, for the watched task's panel (render_watched_panel).
    task_ids: tuple[int, ...] = ()
    full: bool = False
    tasks_beyond_progress: frozenset[int] = frozenset()  # tasks with events other than task.progress


def parts_for(types: set[str], *, touches_final: bool = False) -> set[str]:
    """Which parts of the page events of these types change (besides task rows and the log).

    Streamed progress changes only the rows and the lanes; the timeline gets the bars of the
    attempts concerned (`gantt_bars`) unless the run itself changed; the result gets its final
    outputs again only when a final task changed (`touches_final`). A run's start and end change
    tasks with no event of their own (the plan's approval clears every task's wait for it, its
    rejection cancels them all): those frames carry the whole task table.
    """
    parts: set[str] = set()
    families = {t.split(".", 1)[0] for t in types}
    if types - set(run_log.NOISY_TYPES):
        parts.add("totals")
    if "run" in families or "checkpoint" in families:
        parts |= {"header", "checkpoints", "result_final"}
    if {t for t in types if t.startswith("run.")} - RUN_TYPES_SPARING_TASKS:
        # Its end also decides which tasks "Every task's output" lists (result.other_outputs).
        parts |= {"task_table", "result"}
    if "plan" in families:
        parts |= {"checkpoints", "graph", "task_table", "lanes", "header", "gantt", "result"}
    if families & {"task", "attempt", "provider", "run"}:
        parts.add("lanes")
    if "run" in families:
        parts.add("gantt")
    elif types & GANTT_TYPES:
        parts.add("gantt_bars")
    if touches_final and {t for t in types if t.startswith("task.")} - {"task.progress"}:
        # A final task's entry shows its state ("queued" stayed on it while it ran) and its output.
        parts.add("result_final")
    if types & ARTIFACT_TYPES or "run" in families:
        parts.add("artifacts")
    return parts


def latest_seq(run_id: int) -> int | None:
    """The run's last event number (None for an unknown run)."""
    return events.latest_seq(run_id)


def render_batch(
    run_id: int, after_seq: int, viewer: Viewer, watched_task: int | None = None, *, in_step: bool = False
) -> Batch | None:
    """One websocket message with everything after event `after_seq`, or None when nothing is new.

    The run's parts and the log (render_run_batch) followed by the watched task's panel parts
    (render_watched_panel). The live view renders the two separately, once for all the viewers
    that share them (dashboard/broadcast.py); this is what each viewer receives.
    """
    batch = render_run_batch(run_id, after_seq, viewer, in_step=in_step)
    if batch is None:
        return None
    panel = render_watched_panel(run_id, batch, viewer, watched_task)
    return Batch(
        batch.html + panel, batch.from_seq, batch.to_seq, batch.task_ids, batch.full, batch.tasks_beyond_progress
    )


def render_run_batch(
    run_id: int, after_seq: int, viewer: Viewer, upto: int | None = None, *, in_step: bool = False
) -> Batch | None:
    """The events after `after_seq` (up to `upto`, else the latest) and the parts they changed.

    None when nothing is new. Two kinds of frame:

    * a live batch: the parts the events changed (parts_for), the row of every task they concern
      and the log's new rows, prepended; when there are more of those than a page of the log
      (PAGE_LOG_ROWS), the log's page instead, as a reload shows it (render_log_page). However
      many events it brings (a fan-out admits hundreds of tasks in one transaction), it carries
      only what they changed, so it is what a page that had every earlier event needs;
    * a full refresh (`data-full="1"`): every part and the log's page afresh, for a viewer that
      resumed (connected, reconnected, saw a gap) more events behind than the log holds
      (LOG_LIMIT). Such a page has been away a while and may be stale beyond the events: the
      running tasks' live progress is not an event, and frames it missed do not come again.

    `in_step`: the viewer has applied every frame of this live feed up to `after_seq` (the
    broadcaster sent them), so it gets a live batch however far the events reach.
    """
    latest = latest_seq(run_id) if upto is None else upto
    if latest is None or latest <= after_seq:
        return None
    run = Run.objects.select_related("plan").get(pk=run_id)
    meta = sql.select(
        Event, ("seq", "type", "task_run_id"), order_by=("seq",), run_id=run_id, seq__gt=after_seq, seq__lte=latest
    )
    types = {t for _, t, _ in meta}
    task_ids = list(dict.fromkeys(task for _, _, task in meta if task))
    full = not in_step and len(meta) > run_log.LOG_LIMIT
    log_page = full or len(meta) > run_log.PAGE_LOG_ROWS  # the log gets its page, not a row per event
    ctx = base_context(run, viewer, oob=True)
    seq = {"from_seq": after_seq + 1, "to_seq": latest, "full": full, "task_ids": task_ids, "oob": True}
    if log_page:
        seq["types"] = sorted(types)  # the filter lists them, though not every event has a row
    html = [render("seq", seq)]
    if full:
        parts = {"header", "totals", "checkpoints", "lanes", "gantt", "result", "task_table", "artifacts"}
        if "plan" in {t.split(".", 1)[0] for t in types}:
            parts.add("graph")
        html.append(render_parts(run, viewer, parts))
    else:
        finals = run_graph.final_task_ids(run)
        parts = parts_for(types, touches_final=bool(finals & set(task_ids)))
        html.append(render_parts(run, viewer, parts, tasks=task_ids))
    if log_page:
        html.append(render_log_page(run, ctx, upto=latest))
    else:
        events = run_log.log_rows(
            Event.objects.filter(run_id=run_id, seq__gt=after_seq, seq__lte=latest).order_by("-seq")
        )
        html.append(render("event_rows", {**ctx, "events": events, "replace": False}))
    beyond_progress = frozenset(tid for _, t, tid in meta if tid and t != "task.progress")
    return Batch("".join(html), after_seq + 1, latest, tuple(task_ids), full, beyond_progress)


def render_log_page(run: Run, ctx: dict, *, upto: int) -> str:
    """The log's rows replaced by its newest page up to event `upto`, and "Show older events"
    from there: what a reload shows, whatever rows the viewer had loaded before.

    Every type is sent (the live rows are filtered in the browser, log.js), so that the rows
    cover their range whatever the viewer's filter, and the button loads what comes before it
    in the filter's terms. The streamed-progress heartbeat is no longer written as an event, so
    for today's runs these are exactly the rows of a reload.
    """
    events = run_log.event_log(run, type_filter="all", before_seq=upto + 1, limit=run_log.PAGE_LOG_ROWS)
    page = {
        "events": events,
        "replace": True,
        "more_oob": True,
        "older_before": run_log.older_than(events, run_log.PAGE_LOG_ROWS),
    }
    return render("event_rows", {**ctx, **page})


def render_watched_panel(run_id: int, batch: Batch, viewer: Viewer, watched_task: int | None) -> str:
    """The watched task's panel parts when `batch`'s events concern it ("" otherwise): its
    header, output, attempts, path and checkpoints, or only header and output when it merely
    streamed progress."""
    if not watched_task or not (batch.full or watched_task in batch.task_ids):
        return ""
    task = TaskRun.objects.filter(pk=watched_task, run_id=run_id).select_related("run").first()
    if task is None:
        return ""
    progress_only = not batch.full and watched_task not in batch.tasks_beyond_progress
    if not batch.full and not progress_only:
        types = set(
            Event.objects.filter(
                run_id=run_id, task_run_id=watched_task, seq__gte=batch.from_seq, seq__lte=batch.to_seq
            ).values_list("type", flat=True)
        )
        if types <= PATH_TYPES:
            return render_path_steps(task, viewer, batch.from_seq, batch.to_seq)
    return render_panel_parts(task, viewer, output_only=progress_only)


# --- Live progress (not events: orchestrator/engine/live.py) -------------------------------------


@dataclass
class SavedProgress:
    """What running attempts of a run saved since a moment (the live view's poll)."""

    progress: dict[int, int]  # task id -> percent, for tasks whose saved progress changed
    outputs: dict[int, str]  # task id -> saved output, for the changed tasks among those asked for
    latest: datetime | None  # the newest save seen (the next poll's `since`)
    # task id -> the number of the attempt that saved it (a percentage is of one attempt)
    attempts: dict[int, int] = field(default_factory=dict)


def saved_progress(
    run_id: int, since: datetime | None, with_output: AbstractSet[int], *, seed: AbstractSet[int] = frozenset()
) -> SavedProgress:
    """Running tasks of the run whose host saved progress after `since` (one indexed query), with
    the output of those in `with_output`, and of those in `seed` (just watched) whatever their
    time."""
    after = {"progress_at__isnull": False} if since is None else {"progress_at__gt": since}
    found = sql.select(
        TaskRun, ("pk", "progress", "progress_at", "attempt_count"), run_id=run_id, state=TaskRun.State.RUNNING, **after
    )
    changed = {pk for pk, *_ in found}
    wanted = (changed & with_output) | set(seed)
    outputs = (
        dict(
            TaskRun.objects.filter(pk__in=wanted, run_id=run_id, state=TaskRun.State.RUNNING).values_list(
                "pk", "output"
            )
        )
        if wanted
        else {}
    )
    times: list[datetime] = [at for _, _, at, _ in found if at is not None]
    latest = max(times) if times else since
    return SavedProgress(
        {pk: progress for pk, progress, _, _ in found},
        outputs,
        latest,
        {pk: attempt for pk, _, _, attempt in found},
    )


def running_progress(run_id: int, task_ids: AbstractSet[int]) -> dict[int, tuple[int, int]]:
    """Those of these tasks still running: task id -> (attempt number, saved percent). One query."""
    rows = sql.select(
        TaskRun, ("pk", "attempt_count", "progress"), run_id=run_id, state=TaskRun.State.RUNNING, pk__in=list(task_ids)
    )
    return {pk: (attempt, progress) for pk, attempt, progress in rows}


def render_saved_rows(run_id: int, task_ids: AbstractSet[int]) -> str:
    """The rows of running tasks whose host saved progress, the agent lanes and the totals: the
    tokens they streamed so far are saved with it (on the attempt), not sent as events, so without
    this the rows and the Tokens card would show their tokens at their last event while the lanes
    moved on. None of these parts carries controls, so one render serves every viewer."""
    if not task_ids:
        return ""
    run = Run.objects.select_related("plan").get(pk=run_id)
    return render_parts(run, Viewer(can_control=False, can_decide=False), {"totals", "lanes"}, tasks=sorted(task_ids))


def render_task_head(run_id: int, task_id: int, viewer: Viewer) -> str:
    """The head of a task's panel (its state, progress, tokens and controls) for `viewer`'s
    permission class, and its attempts table (the running attempt's tokens, as saved), for a saved
    progress of its running attempt ("" for a task not of the run)."""
    task = TaskRun.objects.filter(pk=task_id, run_id=run_id).select_related("run", "subtask", "agent").first()
    if task is None:
        return ""
    return render_panel_head(task, viewer, with_attempts=True)


def render_live_progress(progress: dict[int, int]) -> str:
    """The #live-progress part: running tasks' percentages for run/progress.js."""
    return render("progress", {"progress": sorted(progress.items())}) if progress else ""


def render_slots_elsewhere(run_id: int) -> str:
    """The agent lanes and the totals, for a change no event of this run brings: the slots other
    runs hold of its agents (the lanes' "+3 in other runs", the effective cap and the ETA, which
    wait for them: see broadcast.RunBroadcaster._other_runs_round). Neither carries controls, so
    one render serves every viewer."""
    run = Run.objects.select_related("plan").get(pk=run_id)
    return render_parts(run, Viewer(can_control=False, can_decide=False), {"lanes", "totals"})


def render_live_output(run_id: int, task_id: int, text: str) -> str:
    """A running task's output part as it streams ("" once the task is no longer running: its
    events bring the final output)."""
    task = (
        TaskRun.objects.filter(pk=task_id, run_id=run_id, state=TaskRun.State.RUNNING).select_related("agent").first()
    )
    if task is None:
        return ""
    task.output = text
    return render("panel_output", {"task": task, "output_heading": run_tasks.output_heading(task, None), "oob": True})
