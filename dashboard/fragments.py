"""The run page's partial templates, rendered for the page, for htmx answers and for the websocket.

One partial per part of the page (`templates/dashboard/partials/<noun>_<role>.html`), each with
a stable root id. The page includes them; an action's htmx answer and the websocket send the
same partials again with `hx-swap-oob` set, so the live view can never drift from the page.

`render_batch` turns the events a live client has not seen yet into one websocket message: the
log rows of those events plus the current state of every part they touched (see LIVE_PROTOCOL
in dashboard/consumers.py). Parts show the state *now*, not at the event: replaying a hundred
events of one task re-renders its row once.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import mark_safe

from orchestrator import events
from orchestrator.engine import approvers
from orchestrator.engine import context as agent_context
from orchestrator.engine import runs as engine_runs
from orchestrator.models import Checkpoint, Event, Run, TaskRun
from orchestrator.readmodels import checkpoints as run_checkpoints
from orchestrator.readmodels import gantt as run_gantt
from orchestrator.readmodels import graph as run_graph
from orchestrator.readmodels import lanes as run_lanes
from orchestrator.readmodels import log as run_log
from orchestrator.readmodels import steps as run_steps
from orchestrator.readmodels import tasks as run_tasks
from orchestrator.readmodels import totals as run_totals
from orchestrator.tools import workspace

from .permissions import CONTROL_RUN, DECIDE_CHECKPOINT, LAUNCH_RUN

T = "dashboard/partials/"
TEMPLATES = {
    "header": T + "run_header.html",
    "totals": T + "run_totals.html",
    "checkpoints": T + "run_checkpoints.html",
    "lanes": T + "agent_lanes.html",
    "gantt": T + "run_gantt.html",
    "result": T + "run_result.html",
    "result_final": T + "run_result_final.html",
    "gantt_bar": T + "gantt_bar.html",
    "graph": T + "dag_graph.html",
    "task_table": T + "task_table.html",
    "task_row": T + "task_row.html",
    "event_rows": T + "event_rows.html",
    "event_rows_older": T + "event_rows_older.html",
    "panel": T + "task_panel.html",
    "panel_head": T + "task_head.html",
    "panel_output": T + "task_output.html",
    "panel_attempts": T + "task_attempts.html",
    "panel_path": T + "task_path.html",
    "path_attempt": T + "path_attempt.html",
    "path_row": T + "path_row.html",
    "artifacts": T + "run_artifacts.html",
    "flash": T + "run_flash.html",
    "seq": T + "live_seq.html",
    "progress": T + "live_progress.html",
}
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
}
RESULT_TYPES = {"task.succeeded", "task.output_ready", "task.failed", "task.skipped", "task.cancelled"}
# Events after which the run's workspace may hold new files (a tool wrote one; an attempt ended).
ARTIFACT_TYPES = {"tool.result", "task.succeeded", "task.failed", "task.cancelled", "attempt.lost"}
# Run events that change no task row (the others, a run's start and end, may change every task).
RUN_TYPES_SPARING_TASKS = {"run.created", "run.paused", "run.resumed"}
# Events of a task that change only its path and its head (the panel sends those alone).
PATH_TYPES = set(run_steps.STEP_EVENT_TYPES) | {"task.progress"}


# Stands for the viewer's CSRF token in HTML rendered once for many viewers (see Viewer.shared).
# Random per process, so that no text a run shows (goals, outputs) can contain it by design.
CSRF_PLACEHOLDER = "csrfshared" + secrets.token_hex(16)


@dataclass(frozen=True)
class Viewer:
    """Who the fragments are rendered for: decides which controls are shown (the POST views
    check the permissions again on the server)."""

    can_control: bool
    can_decide: bool
    csrf_token: str = ""
    can_launch: bool = False  # "Launch again" with the run's settings

    @classmethod
    def for_user(cls, user, csrf_token: str = "") -> Viewer:
        return cls(user.has_perm(CONTROL_RUN), user.has_perm(DECIDE_CHECKPOINT), csrf_token, user.has_perm(LAUNCH_RUN))

    def shared(self) -> Viewer:
        """The viewer's permission class: what HTML rendered for it may be shared by.

        Viewers with the same permissions see the same HTML except for their CSRF token, which
        the shared render carries as CSRF_PLACEHOLDER (whether there is a token at all changes
        the forms, so it is part of the class). `personalise` puts the viewer's own token back.
        """
        return Viewer(self.can_control, self.can_decide, CSRF_PLACEHOLDER if self.csrf_token else "", self.can_launch)

    def personalise(self, html: str) -> str:
        """HTML rendered for `self.shared()` as if it had been rendered for this viewer."""
        return html.replace(CSRF_PLACEHOLDER, self.csrf_token) if self.csrf_token else html


def csrf_token_from_cookie(secret: str | None) -> str:
    """A masked CSRF token for the secret in a websocket's csrftoken cookie ("" without one), so
    that forms rendered for the websocket post like forms rendered for the page."""
    if not secret:
        return ""
    request = HttpRequest()
    request.META["CSRF_COOKIE"] = secret
    return get_token(request)


def base_context(run: Run, viewer: Viewer, oob: bool = False) -> dict:
    return {
        "run": run,
        "can_control": viewer.can_control,
        "can_decide": viewer.can_decide,
        "can_launch": viewer.can_launch,
        "csrf_token": viewer.csrf_token,
        "oob": oob,
    }


def render(part: str, ctx: dict) -> str:
    return render_to_string(TEMPLATES[part], ctx)


# --- Context per part ---------------------------------------------------------------------------


def header_context(run: Run) -> dict:
    return {"run_active": not run.is_finished}


def totals_context(run: Run, views=None, now: datetime | None = None) -> dict:
    now = now or timezone.now()
    totals = run_totals.totals(run, views, now=now)
    eta_at = int((now.timestamp() + totals.eta_s) * 1000) if totals.eta_s is not None else None
    return {"totals": totals, "eta_at_ms": eta_at, "now_ms": int(now.timestamp() * 1000)}


def checkpoints_context(run: Run) -> dict:
    """The pending checkpoints, each with who may approve it (the same HTML for every viewer: the
    page's script hides Approve from a plan's launcher, whom separation of duties refuses)."""
    pending = run_checkpoints.pending_checkpoints(run)
    for checkpoint in pending:
        checkpoint.who_may_approve = approvers.who_may_approve(checkpoint, run)  # type: ignore[attr-defined]
        checkpoint.launcher_may_not_approve = approvers.launcher_may_not_approve(checkpoint, run)  # type: ignore[attr-defined]
    plan_checkpoint = next((c for c in pending if c.kind == Checkpoint.Kind.PLAN), None)
    ctx: dict[str, Any] = {
        "pending": pending,
        "plan_checkpoint": plan_checkpoint,
        "decisions": run_checkpoints.recent_decisions(run),
    }
    if plan_checkpoint is not None:
        ctx["plan_subtasks"] = plan_review_rows(run)
    return ctx


@dataclass
class PlanRow:
    key: str
    title: str
    agent: str
    instructions: str
    depends_on: list[str]
    gate: str


def plan_review_rows(run: Run) -> list[PlanRow]:
    subtasks = list(run.plan.subtasks.select_related("agent").order_by("position"))
    ups: dict[int, list[str]] = {s.pk: [] for s in subtasks}
    edges = run.plan.dependencies.order_by("upstream__position").values_list("downstream_id", "upstream__key")
    for down, up_key in edges:
        ups.setdefault(down, []).append(up_key)
    return [PlanRow(s.key, s.title, s.agent.name, s.instructions, ups.get(s.pk, []), s.gate) for s in subtasks]


def lanes_context(run: Run, views=None) -> dict:
    return {"lanes": run_lanes.lanes(run, views)}


def gantt_context(run: Run) -> dict:
    return {"gantt": run_gantt.gantt(run)}


# The result lists every other task's output (loaded when opened) up to this many tasks; a larger
# run points to the task panels and the downloads instead, so that its page stays light.
OTHER_TASKS_LISTED = 40


def result_context(run: Run) -> dict:
    finals = run_graph.final_tasks(run)
    final_ids = {t.pk for t in finals}
    others = [t for t in run_tasks.tasks_query(run.pk).defer("output") if t.pk not in final_ids]
    return {"final_tasks": finals, "other_tasks": others, "other_tasks_listed": OTHER_TASKS_LISTED}


# The run page lists this many of the workspace's files (sorted by path); the rest are counted.
ARTIFACTS_LISTED = 200


def artifacts_context(run: Run) -> dict:
    files = workspace.artifacts(run.pk)
    return {"artifacts": files[:ARTIFACTS_LISTED], "artifacts_unlisted": max(0, len(files) - ARTIFACTS_LISTED)}


def result_final_context(run: Run) -> dict:
    return {"final_tasks": run_graph.final_tasks(run)}


def compact_graph(graph: run_graph.Graph) -> dict:
    """The page's copy of the graph: task ids only (titles and agents are on the task rows).

    `nodes`: [[task pk, fan-out group id or null], ...]; `edges`: [[upstream pk, downstream pk], ...];
    `groups`: [{id, mode, label, members: [task pk, ...], collapsed}, ...] for every grouping mode
    (readmodels/graph.py); `mode`: the mode the page starts in.
    """
    return {
        "nodes": [[n["task"], n["group"]] for n in graph.nodes],
        "edges": [[int(e["source"][1:]), int(e["target"][1:])] for e in graph.edges],
        "groups": [
            {
                "id": g["id"],
                "mode": g["mode"],
                "label": g["label"],
                "members": [int(m[1:]) for m in g["members"]],
                "collapsed": g["collapsed"],
            }
            for g in graph.groups
        ],
        "mode": graph.mode,
    }


# Characters that must not appear raw in a single-quoted attribute, as JSON string escapes (they
# can only occur inside JSON strings, where the escape means the same character).
_ATTRIBUTE_JSON_ESCAPES = {ord("&"): "\\u0026", ord("<"): "\\u003c", ord(">"): "\\u003e", ord("'"): "\\u0027"}


def attribute_json(value) -> str:
    """`value` as compact JSON that is safe in a single-quoted HTML attribute. Its double quotes
    stay as they are (escaping each as &quot; made a large run's graph three times heavier)."""
    return mark_safe(json.dumps(value, separators=(",", ":")).translate(_ATTRIBUTE_JSON_ESCAPES))


def graph_context(run: Run) -> dict:
    return {"graph_json": attribute_json(compact_graph(run_graph.graph(run)))}


def task_table_context(run: Run, views=None) -> dict:
    return {"tasks": views if views is not None else run_tasks.task_views(run)}


def log_context(run: Run, *, task_id=None, type_filter="") -> dict:
    events = run_log.event_log(run, task_id=task_id, type_filter=type_filter, limit=run_log.PAGE_LOG_ROWS)
    return {
        "events": events,
        "older_before": run_log.older_than(events, run_log.PAGE_LOG_ROWS),
        "event_types": run_log.event_types(run),
        "event_families": run_log.EVENT_FAMILIES,
    }


def panel_context(task: TaskRun) -> dict:
    task = TaskRun.objects.select_related("run__plan", "subtask", "agent").get(pk=task.pk)
    upstreams = run_graph.upstream_tasks(task)
    return {
        "task": task,
        "view": run_tasks.task_view(task),
        "upstreams": upstreams,
        "fan_in": agent_context.is_fan_in(task, upstreams),
        "attempts": list(task.attempts.order_by("number")),
        "paths": run_steps.attempt_paths(task),
        "checkpoints": list(task.checkpoints.order_by("created_at")),
        "task_actions": task_actions(task),
    }


def task_actions(task: TaskRun) -> dict:
    """Which task controls make sense now (the engine still checks when one is used)."""
    run_finished = task.run.is_finished
    rerun = task.state in (TaskRun.State.SUCCEEDED, TaskRun.State.FAILED) and task.run.status not in (
        Run.Status.CANCELLED,
        Run.Status.AWAITING_APPROVAL,
    )
    return {
        "retry": task.state in (TaskRun.State.FAILED, TaskRun.State.CANCELLED, TaskRun.State.SKIPPED)
        and task.run.status != Run.Status.CANCELLED,
        "skip": (not task.is_terminal or task.state == TaskRun.State.FAILED)
        and (not run_finished or task.run.status == Run.Status.FAILED),
        "rerun": rerun,
        "rerun_below": len(engine_runs.downstream_closure(task)) if rerun else 0,
    }


def page_context(run: Run, viewer: Viewer, *, selected: TaskRun | None = None) -> dict:
    """Everything the run page shows, read once (the task views are shared by the parts)."""
    now = timezone.now()
    seq = events.latest_seq(run.pk) or 0
    run.refresh_from_db()
    views = run_tasks.task_views(run)
    ctx = base_context(run, viewer)
    ctx.update(header_context(run))
    ctx.update(totals_context(run, views, now))
    ctx.update(checkpoints_context(run))
    ctx.update(lanes_context(run, views))
    ctx.update(gantt_context(run))
    ctx.update(result_context(run))
    ctx.update(graph_context(run))
    ctx.update(task_table_context(run, views))
    ctx.update(log_context(run))
    ctx.update(artifacts_context(run))
    ctx["state_legend"] = [(s, run_tasks.STATE_LABELS[s]) for s in run_tasks.DISPLAY_ORDER]
    # The page shows the state after event `seq` (read first: anything later is sent live).
    ctx["seq"] = seq
    if selected is not None:
        ctx.update(panel_context(selected))
        ctx["selected"] = selected
    return ctx


# --- Rendering parts ----------------------------------------------------------------------------


def render_parts(run: Run, viewer: Viewer, parts: Iterable[str], *, oob: bool = True, tasks: Iterable[int] = ()) -> str:
    """The named parts of the page, each as an out-of-band fragment (task rows for `tasks`)."""
    parts = set(parts)
    ctx = base_context(run, viewer, oob=oob)
    views = None
    if parts & {"totals", "lanes", "task_table"}:
        views = run_tasks.task_views(run)
    html = []
    builders = {
        "header": lambda: header_context(run),
        "totals": lambda: totals_context(run, views),
        "checkpoints": lambda: checkpoints_context(run),
        "lanes": lambda: lanes_context(run, views),
        "gantt": lambda: gantt_context(run),
        "result": lambda: result_context(run),
        "result_final": lambda: result_final_context(run),
        "graph": lambda: graph_context(run),
        "task_table": lambda: task_table_context(run, views),
        "artifacts": lambda: artifacts_context(run),
    }
    if "result" in parts:
        parts.discard("result_final")
    if "gantt" in parts:
        parts.discard("gantt_bars")
    for part in (
        "header",
        "totals",
        "checkpoints",
        "graph",
        "task_table",
        "lanes",
        "gantt",
        "result",
        "result_final",
        "artifacts",
    ):
        if part in parts:
            html.append(render(part, {**ctx, **builders[part]()}))
    task_ids = [t for t in tasks if t]
    if task_ids and "task_table" not in parts:
        wanted = set(task_ids)
        rows = [v for v in views if v.pk in wanted] if views is not None else run_tasks.task_views(run, task_ids)
        for view in rows:
            html.append(render("task_row", {**ctx, "view": view}))
    if task_ids and "gantt_bars" in parts:
        # The bars of these tasks' attempts, each replacing its old self or joining its lane.
        for attempt in run_gantt.started_attempts(run.pk, task_ids):
            html.append(render("gantt_bar", {**ctx, "bar": run_gantt.gantt_bar(attempt)}))
    return "".join(html)


def render_panel_parts(task: TaskRun, viewer: Viewer, *, output_only: bool = False) -> str:
    ctx = {**base_context(task.run, viewer, oob=True), **panel_context(task)}
    names = (
        ("panel_head", "panel_output")
        if output_only
        else ("panel_head", "panel_output", "panel_attempts", "panel_path")
    )
    return "".join(render(name, ctx) for name in names)


def render_path_steps(task: TaskRun, viewer: Viewer, from_seq: int, to_seq: int) -> str:
    """The panel's head and the path rows that events `from_seq`..`to_seq` added or completed,
    each upserted by id (a call's row is sent again when its result arrives); an attempt whose
    first step is among them is sent whole (the viewer has no list to add its rows to yet)."""
    ctx = base_context(task.run, viewer, oob=True)
    html = [
        render(
            "panel_head", {**ctx, "task": task, "view": run_tasks.task_view(task), "task_actions": task_actions(task)}
        )
    ]
    for path in run_steps.attempt_paths(task):
        touched = [row for row in path.rows if any(from_seq <= seq <= to_seq for seq in row.seqs)]
        if not touched:
            continue
        if min(row.seqs[0] for row in path.rows) >= from_seq:
            html.append(render("path_attempt", {**ctx, "task": task, "path": path}))
            continue
        for row in touched:
            html.append(render("path_row", {**ctx, "task": task, "row": row, "path_dom_id": path.dom_id}))
    return "".join(html)


def render_flash(message: str, level: str = "success") -> str:
    return render("flash", {"message": message, "level": level, "oob": True})


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
        parts.add("task_table")
    if "plan" in families:
        parts |= {"checkpoints", "graph", "task_table", "lanes", "header", "gantt", "result"}
    if families & {"task", "attempt", "provider", "run"}:
        parts.add("lanes")
    if "run" in families:
        parts.add("gantt")
    elif types & GANTT_TYPES:
        parts.add("gantt_bars")
    if touches_final and types & RESULT_TYPES:
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
    meta = list(
        Event.objects.filter(run_id=run_id, seq__gt=after_seq, seq__lte=latest).values_list(
            "seq", "type", "task_run_id"
        )
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
        events = list(
            Event.objects.filter(run_id=run_id, seq__gt=after_seq, seq__lte=latest)
            .select_related("task_run__subtask", "agent")
            .order_by("-seq")
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
    header, output and attempts, or only header and output when it merely streamed progress."""
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


def saved_progress(
    run_id: int, since: datetime | None, with_output: AbstractSet[int], *, seed: AbstractSet[int] = frozenset()
) -> SavedProgress:
    """Running tasks of the run whose host saved progress after `since` (one indexed query), with
    the output of those in `with_output`, and of those in `seed` (just watched) whatever their
    time."""
    rows = TaskRun.objects.filter(run_id=run_id, state=TaskRun.State.RUNNING, progress_at__isnull=False)
    if since is not None:
        rows = rows.filter(progress_at__gt=since)
    found = list(rows.values_list("pk", "progress", "progress_at"))
    changed = {pk for pk, _, _ in found}
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
    times: list[datetime] = [at for _, _, at in found if at is not None]
    latest = max(times) if times else since
    return SavedProgress({pk: progress for pk, progress, _ in found}, outputs, latest)


def render_live_progress(progress: dict[int, int]) -> str:
    """The #live-progress part: running tasks' percentages for run/progress.js."""
    return render("progress", {"progress": sorted(progress.items())}) if progress else ""


def render_live_output(run_id: int, task_id: int, text: str) -> str:
    """A running task's output part as it streams ("" once the task is no longer running: its
    events bring the final output)."""
    task = (
        TaskRun.objects.filter(pk=task_id, run_id=run_id, state=TaskRun.State.RUNNING).select_related("agent").first()
    )
    if task is None:
        return ""
    task.output = text
    return render("panel_output", {"task": task, "oob": True})
