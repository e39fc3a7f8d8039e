"""The run page's partial templates, rendered for the page, for htmx answers and for the websocket.

One partial per part of the page (`templates/dashboard/partials/<noun>_<role>.html`), each with
a stable root id. The page includes them; an action's htmx answer and the websocket send the
same partials again with `hx-swap-oob` set, so the live view can never drift from the page.

The live view's frames, which parts the events change and what they carry, are
dashboard/frames.py's.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.messages.storage.base import Message
from django.http import HttpRequest
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import mark_safe

from orchestrator import events, wording
from orchestrator.engine import approvers, checkpoint_questions
from orchestrator.engine import context as agent_context
from orchestrator.engine import runs as engine_runs
from orchestrator.models import Checkpoint, Run, TaskRun
from orchestrator.readmodels import checkpoints as run_checkpoints
from orchestrator.readmodels import gantt as run_gantt
from orchestrator.readmodels import graph as run_graph
from orchestrator.readmodels import lanes as run_lanes
from orchestrator.readmodels import launchers as run_launchers
from orchestrator.readmodels import log as run_log
from orchestrator.readmodels import other_runs as run_other_runs
from orchestrator.readmodels import result as run_result
from orchestrator.readmodels import run_labels
from orchestrator.readmodels import steps as run_steps
from orchestrator.readmodels import tasks as run_tasks
from orchestrator.readmodels import totals as run_totals
from orchestrator.readmodels.plan_review import plan_review
from orchestrator.tools import workspace

from . import task_rows
from .permissions import CONTROL_RUN, DECIDE_CHECKPOINT, LAUNCH_RUN

T = "dashboard/partials/"
TEMPLATES = {
    "header": T + "run_header.html",
    "totals": T + "run_totals.html",
    "checkpoints": T + "run_checkpoints.html",
    "approvals_count": T + "approvals_count.html",
    "lanes": T + "agent_lanes.html",
    "gantt": T + "run_gantt.html",
    "result": T + "run_result.html",
    "result_final": T + "run_result_final.html",
    "gantt_bar": T + "gantt_bar.html",
    "graph": T + "dag_graph.html",
    "task_table": T + "task_table.html",
    "task_count": T + "task_count.html",
    "event_rows": T + "event_rows.html",
    "event_rows_older": T + "event_rows_older.html",
    "panel": T + "task_panel.html",
    "panel_head": T + "task_head.html",
    "panel_output": T + "task_output.html",
    "panel_attempts": T + "task_attempts.html",
    "panel_path": T + "task_path.html",
    "panel_checkpoints": T + "task_checkpoints.html",
    "path_attempt": T + "path_attempt.html",
    "path_row": T + "path_row.html",
    "artifacts": T + "run_artifacts.html",
    "flash": T + "run_flash.html",
    "seq": T + "live_seq.html",
    "progress": T + "live_progress.html",
}


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
    return {
        "run_active": not run.is_finished,
        "launched_by": run_launchers.launched_by(run),
        "status_label": run_labels.status_label(run),
    }


def totals_context(run: Run, states=None, now: datetime | None = None, elsewhere=None, agents=None) -> dict:
    now = now or timezone.now()
    totals = run_totals.totals(run, states, now=now, elsewhere=elsewhere, agents=agents)
    eta_at = int((now.timestamp() + totals.eta_s) * 1000) if totals.eta_s is not None and totals.counts_down else None
    return {"totals": totals, "eta_at_ms": eta_at, "now_ms": int(now.timestamp() * 1000)}


def checkpoints_context(run: Run) -> dict:
    """The pending checkpoints, each with who may approve it (the same HTML for every viewer: the
    page's script hides Approve from a plan's launcher, whom separation of duties refuses)."""
    pending = run_checkpoints.pending_checkpoints(run)
    for checkpoint in pending:
        checkpoint.who_may_approve = approvers.who_may_approve(checkpoint, run)  # type: ignore[attr-defined]
        checkpoint.launcher_may_not_approve = approvers.launcher_may_not_approve(checkpoint, run)  # type: ignore[attr-defined]
        if checkpoint.kind == Checkpoint.Kind.TOOL:
            checkpoint.holds_up = checkpoint_questions.holds_up(checkpoint)  # type: ignore[attr-defined]
    plan_checkpoint = next((c for c in pending if c.kind == Checkpoint.Kind.PLAN), None)
    ctx: dict[str, Any] = {
        "pending": pending,
        "plan_checkpoint": plan_checkpoint,
        "decisions": run_checkpoints.recent_decisions(run),
    }
    if plan_checkpoint is not None:
        review = plan_review(run)
        ctx.update(plan_subtasks=review.rows, plan_count=review.count, plan_scrolls=review.scrolls)
    return ctx


def lanes_context(run: Run, states=None, elsewhere=None, agents=None) -> dict:
    return {"lanes": run_lanes.lanes(run, states, elsewhere, agents)}


def held_elsewhere(run: Run, states) -> run_other_runs.OtherRuns:
    """The slots other runs hold of the run's agents, read once for the totals and the lanes."""
    return run_other_runs.other_runs(run, {state.agent_id for state in states})


def gantt_context(run: Run) -> dict:
    return {"gantt": run_gantt.gantt(run)}


# The result lists every other task's output (loaded when opened) up to this many tasks; a larger
# run points to the task panels and the downloads instead, so that its page stays light.
OTHER_TASKS_LISTED = 40


def result_context(run: Run) -> dict:
    finals = run_graph.final_tasks(run)
    final_ids = {t.pk for t in finals}
    others = run_result.other_outputs(
        run.is_finished, (t for t in run_tasks.tasks_query(run.pk).defer("output") if t.pk not in final_ids)
    )
    return {
        **finals_context(finals),
        "other_tasks": others.listed,
        "other_tasks_listed": OTHER_TASKS_LISTED,
        "never_ran": wording.counted(others.never_ran, "other task") if others.never_ran else "",
    }


# The run page lists this many of the workspace's files (sorted by path); the rest are counted.
ARTIFACTS_LISTED = 200


def artifacts_context(run: Run) -> dict:
    files = workspace.artifacts(run.pk)
    return {
        "artifacts": files[:ARTIFACTS_LISTED],
        "artifacts_unlisted": max(0, len(files) - ARTIFACTS_LISTED),
        "no_files": wording.no_files(run.is_finished),
    }


# Up to this many final tasks, each shows its summary (one alone, its whole output); beyond it,
# each folds to its heading and the first words of its summary, and this many stay open at first,
# so that a run with dozens of final tasks has a Result a reader can scan.
FINAL_TASKS_OPEN = 3


def finals_context(finals: list[TaskRun]) -> dict:
    """The final tasks, whether they fold, and how many of them succeeded and how the others ended."""
    outputs = run_result.result_outputs(finals)
    return {
        "final_tasks": finals,
        "final_items": [(task, outputs[task.pk]) for task in finals],
        "final_outcome": run_tasks.outcome_of(finals),
        "finals_folded": len(finals) > FINAL_TASKS_OPEN,
        "finals_open": FINAL_TASKS_OPEN,
    }


def result_final_context(run: Run) -> dict:
    return finals_context(run_graph.final_tasks(run))


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


def task_table_context(run: Run) -> dict:
    """The table's rows, rendered here (shared looks once: dashboard/task_rows.py) with what a row
    reads besides its task: the run and no out-of-band swap."""
    views = run_tasks.task_views(run)
    return {
        "tasks": views,
        "task_rows": mark_safe("".join(task_rows.render_rows({"run": run, "oob": False}, views))),
        "task_scroll_cue": run_tasks.task_table_scroll_cue(len(views)),
    }


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
    attempts = list(task.attempts.order_by("number"))
    return {
        "task": task,
        "view": run_tasks.task_view(task),
        "upstreams": upstreams,
        "fan_in": agent_context.is_fan_in(task, upstreams),
        "attempts": attempts,
        "output_heading": run_tasks.output_heading(task, attempts[-1] if attempts else None),
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
        # A cancelled run's task offers nothing: the panel said nothing either, where the command
        # line answers "run 5 was cancelled: launch it again instead".
        "none_because": "The run was cancelled: its tasks can no longer be retried or re-run. "
        "Launch again (above) starts a new run of the same plan."
        if task.run.status == Run.Status.CANCELLED
        else "",
    }


def page_context(run: Run, viewer: Viewer, *, selected: TaskRun | None = None) -> dict:
    """Everything the run page shows, read once (the task states shared by the totals and lanes)."""
    now = timezone.now()
    seq = events.latest_seq(run.pk) or 0
    run.refresh_from_db()
    states = run_tasks.task_states(run)
    elsewhere = held_elsewhere(run, states)
    agents = run_tasks.agents_of(states)
    ctx = base_context(run, viewer)
    ctx.update(header_context(run))
    ctx.update(totals_context(run, states, now, elsewhere, agents))
    ctx.update(checkpoints_context(run))
    ctx.update(lanes_context(run, states, elsewhere, agents))
    ctx.update(gantt_context(run))
    ctx.update(result_context(run))
    ctx.update(graph_context(run))
    ctx.update(task_table_context(run))
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
    # The totals and lanes read every task's state (plain values) and their agents, once for both;
    # only the rows shown get views.
    states = run_tasks.task_states(run) if parts & {"totals", "lanes"} else None
    elsewhere = held_elsewhere(run, states) if states is not None else None
    agents = run_tasks.agents_of(states) if states is not None else None
    html = []
    builders = {
        "header": lambda: header_context(run),
        "totals": lambda: totals_context(run, states, elsewhere=elsewhere, agents=agents),
        "checkpoints": lambda: checkpoints_context(run),
        "lanes": lambda: lanes_context(run, states, elsewhere, agents),
        "gantt": lambda: gantt_context(run),
        "result": lambda: result_context(run),
        "result_final": lambda: result_final_context(run),
        "graph": lambda: graph_context(run),
        "task_table": lambda: task_table_context(run),
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
            context = {**ctx, **builders[part]()}
            html.append(render(part, context))
            if part == "task_table":  # the card's count of the rows, which a plan edit changes
                html.append(render("task_count", context))
    if "checkpoints" in parts and viewer.can_decide:
        # The header's "Approvals N" counts every run's checkpoints waiting for the viewer: a frame
        # or answer that changed this run's brings it at once, not at the badge's next 5 s poll. The
        # same HTML serves every viewer who may decide; each launcher's page takes off the plans
        # they may not approve (data-own), as it hides their Approve button.
        count, own = approvers.awaiting_for_launchers()
        mine = " ".join(f"{user}:{n}" for user, n in sorted(own.items()))
        html.append(render("approvals_count", {**ctx, "count": count, "own": mine}))
    task_ids = [t for t in tasks if t]
    if task_ids and "task_table" not in parts:
        html.extend(task_rows.render_rows(ctx, run_tasks.task_views(run, task_ids)))
    if task_ids and "gantt_bars" in parts:
        # The bars of these tasks' attempts, each replacing its old self or joining its lane.
        for attempt in run_gantt.started_attempts(run.pk, task_ids):
            html.append(render("gantt_bar", {**ctx, "bar": run_gantt.gantt_bar(attempt)}))
    return "".join(html)


def render_panel_parts(task: TaskRun, viewer: Viewer, *, output_only: bool = False) -> str:
    """The parts of an open panel that its task's events change: its head and output, and unless
    `output_only` (it merely streamed) its attempts, path and checkpoints (a decision, a reopening
    or a closing is an event of the task)."""
    ctx = {**base_context(task.run, viewer, oob=True), **panel_context(task)}
    names = (
        ("panel_head", "panel_output")
        if output_only
        else ("panel_head", "panel_output", "panel_attempts", "panel_path", "panel_checkpoints")
    )
    return "".join(render(name, ctx) for name in names)


def render_panel_head(task: TaskRun, viewer: Viewer, *, with_attempts: bool = False) -> str:
    """The panel's head alone (its state, progress, tokens and the task's controls); with
    `with_attempts`, its attempts table too (a save's tokens of the running attempt)."""
    ctx = {**base_context(task.run, viewer, oob=True), "task": task}
    html = render("panel_head", {**ctx, "view": run_tasks.task_view(task), "task_actions": task_actions(task)})
    if with_attempts:
        html += render("panel_attempts", {**ctx, "attempts": list(task.attempts.order_by("number"))})
    return html


def render_path_steps(task: TaskRun, viewer: Viewer, from_seq: int, to_seq: int) -> str:
    """The panel's head and the path rows that events `from_seq`..`to_seq` added or completed,
    each upserted by id (a call's row is sent again when its result arrives); an attempt whose
    first step is among them is sent whole (the viewer has no list to add its rows to yet)."""
    ctx = base_context(task.run, viewer, oob=True)
    html = [render_panel_head(task, viewer)]
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


# Django's message levels that the message line keeps until dismissed; the others fade (flash.js).
KEPT_LEVELS = {"warning", "error"}


def stored_flash(stored: Iterable[Message]) -> dict[str, str]:
    """What the messages a redirect left for the run page ("Run #7 launched.", the answer to a
    plain form post) say in its message line: one line, an error when any of them warns (kept
    until dismissed), else a success (it fades, as an action's answer does); {} when none.
    Reading them uses them up: they are not said again on the next page."""
    said = list(stored)
    if not said:
        return {}
    level = "error" if any(message.level_tag in KEPT_LEVELS for message in said) else "success"
    return {"message": " ".join(str(message) for message in said), "level": level}
