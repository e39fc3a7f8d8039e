"""The run page ("the glass box") and the actions people take on it.

Every view is thin: it checks the permission (dashboard/permissions.py: a denial answers 403
and is audited), calls the engine (orchestrator.engine.runs, orchestrator.engine.plan_edits) which checks the
state, changes the rows and writes the Event, and answers with the page's partials. An htmx
request gets a status message and the changed parts as out-of-band fragments (the websocket
brings the rest); a plain form post is redirected back to the page with a message.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from django.contrib import messages
from django.http import FileResponse, Http404, HttpResponse, HttpResponseRedirect, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_GET, require_POST

from orchestrator.engine import plan_edits, reruns, runs
from orchestrator.engine.run_budget import changed as budget_changed
from orchestrator.models import Checkpoint, Run, TaskRun
from orchestrator.readmodels import tasks as run_tasks
from orchestrator.readmodels.graph import graph
from orchestrator.readmodels.log import PAGE_LOG_ROWS, event_log, older_than
from orchestrator.readmodels.records import AttemptOutput, is_partial_output
from orchestrator.readmodels.run_export import run_export, run_markdown
from orchestrator.readmodels.snapshot import read_snapshot
from orchestrator.readmodels.steps import attempt_path
from orchestrator.tools import workspace
from orchestrator.wording import counted, task_is

from .. import fragments
from ..markdown import render_markdown
from ..permissions import CONTROL_RUN, DECIDE_CHECKPOINT, LAUNCH_RUN, VIEW_RUN, permission_required


def is_htmx(request) -> bool:
    return request.headers.get("HX-Request") == "true"


def _run(run_id: int) -> Run:
    return get_object_or_404(Run.objects.select_related("plan", "launched_by"), pk=run_id)


def _task(run: Run, task_id: int) -> TaskRun:
    return get_object_or_404(TaskRun.objects.select_related("run", "subtask", "agent"), pk=task_id, run=run)


def _viewer(request) -> fragments.Viewer:
    return fragments.Viewer.for_user(request.user, get_token(request))


def _detail_url(run: Run, task: TaskRun | None = None) -> str:
    url = reverse("run_detail", args=[run.pk])
    return f"{url}?task={task.pk}" if task is not None else url


def _answer(
    request,
    run: Run,
    *,
    message: str,
    ok: bool,
    parts=(),
    tasks=(),
    panel: TaskRun | None = None,
):
    """The answer to an action: htmx gets the message and the changed parts, a form post a redirect.

    A refused action (the engine's message says why) still answers 200 to htmx, with the message
    as an error: the request was handled, and browsers log every 4xx answer as a console error.
    The header `X-Glassbox-Refused: 1` marks it for scripts.
    """
    if not is_htmx(request):
        (messages.success if ok else messages.error)(request, message)
        return HttpResponseRedirect(_detail_url(run, panel))
    viewer = _viewer(request)
    html = fragments.render_flash(message, "success" if ok else "error")
    if ok:
        with read_snapshot():  # the parts show one moment of the run (readmodels/snapshot.py)
            run.refresh_from_db()
            html += fragments.render_parts(run, viewer, parts, tasks=tasks)
            if panel is not None:
                html += fragments.render_panel_parts(panel, viewer)
    response = HttpResponse(html)
    if not ok:
        response["X-Glassbox-Refused"] = "1"
    return response


# --- The page and its parts ---------------------------------------------------------------------


@require_GET
@permission_required(VIEW_RUN)
@read_snapshot()  # every part of the page, and the event its live feed resumes after, show one moment
def run_detail(request, run_id: int):
    run = _run(run_id)
    selected = None
    if request.GET.get("task", "").isdigit():
        selected = TaskRun.objects.filter(pk=int(request.GET["task"]), run=run).first()
    ctx = fragments.page_context(run, _viewer(request), selected=selected)
    ctx["flash"] = fragments.stored_flash(messages.get_messages(request))
    return render(request, "dashboard/run_detail.html", ctx)


@require_GET
@permission_required(VIEW_RUN)
def run_part_redirect(request, run_id: int, anchor: str = ""):
    """A folder of the run's URLs (`tasks/`, `checkpoints/`): the run page, at that part."""
    run = _run(run_id)
    return HttpResponseRedirect(_detail_url(run) + (f"#{anchor}" if anchor else ""))


@require_GET
@permission_required(VIEW_RUN)
def run_checkpoint_redirect(request, run_id: int, checkpoint_id: int, key: str = ""):
    """A checkpoint's folder (or one of its plan subtasks'): the run page at its checkpoints."""
    run = _run(run_id)
    checkpoint = _checkpoint(run, checkpoint_id)
    return HttpResponseRedirect(_detail_url(run) + f"#checkpoint-{checkpoint.pk}")


@require_GET
@permission_required(VIEW_RUN)
def run_task(request, run_id: int, task_id: int):
    """The task panel (htmx), or the run page with the panel open."""
    run = _run(run_id)
    task = _task(run, task_id)
    if not is_htmx(request):
        return HttpResponseRedirect(_detail_url(run, task))
    ctx = {**fragments.base_context(run, _viewer(request)), **fragments.panel_context(task)}
    return render(request, fragments.TEMPLATES["panel"], ctx)


@require_GET
@permission_required(VIEW_RUN)
def run_task_redirect(request, run_id: int, task_id: int):
    """A task's attempts folder: the run page with the task's panel open."""
    run = _run(run_id)
    return HttpResponseRedirect(_detail_url(run, _task(run, task_id)))


@require_GET
@permission_required(VIEW_RUN)
def run_attempt(request, run_id: int, task_id: int, number: int):
    """One attempt's page: what it wrote, its request, its path and every tool result whole."""
    run = _run(run_id)
    task = _task(run, task_id)
    path = attempt_path(task, number, whole_results=True)
    if path.attempt is None and not path.rows:
        raise Http404(f"{task.subtask.key} has no attempt {number}")
    a = path.attempt
    last = task.attempts.order_by("-number").first()
    output = AttemptOutput.of(task, a, last) if a else None
    no_output = AttemptOutput.missing(a) if a and output is None else ""
    ctx = {**fragments.base_context(run, _viewer(request)), "task": task, "path": path, "a": a}
    ctx.update(output=output, no_output=no_output)
    return render(request, "dashboard/attempt_detail.html", ctx)


@require_GET
@permission_required(VIEW_RUN)
def run_task_output(request, run_id: int, task_id: int):
    """One task's output as sanitised HTML (the result section loads it when opened). A partial
    text is headed with what it is ("Partial output of attempt 1 (failed):"), unless the page heads
    it already (`headed`: the Result's final task said it twice, above and in what it opened)."""
    run = _run(run_id)
    task = _task(run, task_id)
    if task.output:
        if not is_partial_output(task) or request.GET.get("headed"):
            return HttpResponse(render_markdown(task.output))
        heading = run_tasks.output_heading(task, task.attempts.order_by("-number").first())
        return HttpResponse(format_html('<p class="muted">{}:</p>{}', heading, render_markdown(task.output)))
    reason = task.error if task.is_terminal and task.error else f"the task {task_is(task.state)}"
    return HttpResponse(format_html('<p class="muted">No output: {}.</p>', reason))


@require_GET
@permission_required(VIEW_RUN)
def run_events(request, run_id: int):
    """The event log's rows, filtered by task (`task`) and type (`type`: family, exact type, "all"):
    the newest page, or with `before=SEQ` the page of older ones (appended below the rows shown)."""
    run = _run(run_id)
    task_id = int(request.GET["task"]) if request.GET.get("task", "").isdigit() else None
    type_filter = request.GET.get("type", "").strip()[:64]
    before = int(request.GET["before"]) if request.GET.get("before", "").isdigit() else None
    events = event_log(run, task_id=task_id, type_filter=type_filter, before_seq=before, limit=PAGE_LOG_ROWS)
    ctx = {
        **fragments.base_context(run, _viewer(request)),
        "events": events,
        "replace": True,
        "more_oob": True,
        "older_before": older_than(events, PAGE_LOG_ROWS),
    }
    return render(request, fragments.TEMPLATES["event_rows_older" if before else "event_rows"], ctx)


@require_GET
@permission_required(VIEW_RUN)
def run_event_tasks(request, run_id: int):
    """The event filter's task choices, loaded when the filter is first used (a large run has
    hundreds of tasks: the page does not carry them)."""
    run = _run(run_id)
    keys = TaskRun.objects.filter(run=run).order_by("subtask__position", "pk").values_list("pk", "subtask__key")
    return HttpResponse(format_html_join("", '<option value="{}">{}</option>', keys))


@require_GET
@permission_required(VIEW_RUN)
def run_graph(request, run_id: int):
    """The DAG's structure as JSON: nodes, dependency edges and fan-out groups."""
    return JsonResponse(graph(_run(run_id)).as_dict())


# --- Downloads ----------------------------------------------------------------------------------


def _attachment(response: HttpResponse, filename: str) -> HttpResponse:
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
@permission_required(VIEW_RUN)
def run_download_markdown(request, run_id: int):
    run = _run(run_id)
    response = HttpResponse(run_markdown(run), content_type="text/markdown; charset=utf-8")
    return _attachment(response, f"glassbox-run-{run.pk}.md")


@require_GET
@permission_required(VIEW_RUN)
def run_download_json(request, run_id: int):
    run = _run(run_id)
    body = json.dumps(run_export(run), indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    return _attachment(response, f"glassbox-run-{run.pk}.json")


@require_GET
@permission_required(VIEW_RUN)
def run_artifact(request, run_id: int, name: str):
    """A file of the run's workspace, as a download: only a file inside that run's directory
    (no `..`, absolute path, hidden file or symbolic link: orchestrator/tools/workspace.py)."""
    run = _run(run_id)
    try:
        path = workspace.artifact_file(run.pk, name)
    except workspace.NotAnArtifact as error:
        raise Http404(str(error)) from None
    return FileResponse(path.open("rb"), as_attachment=True, filename=path.name)


# --- Run controls -------------------------------------------------------------------------------

RUN_PARTS = ("header", "totals", "lanes", "checkpoints")


def _run_action(request, run_id: int, action, done: str):
    run = _run(run_id)
    try:
        action(run, user=request.user)
    except runs.ActionError as error:
        return _answer(request, run, message=error.sentence, ok=False)
    return _answer(request, run, message=done.format(run=run), ok=True, parts=RUN_PARTS)


@require_POST
@permission_required(CONTROL_RUN)
def run_pause(request, run_id: int):
    return _run_action(request, run_id, runs.pause, "Run {run.pk} paused: running tasks finish, nothing new starts.")


@require_POST
@permission_required(CONTROL_RUN)
def run_resume(request, run_id: int):
    return _run_action(request, run_id, runs.resume, "Run {run.pk} resumed.")


@require_POST
@permission_required(CONTROL_RUN)
def run_cancel(request, run_id: int):
    return _run_action(request, run_id, runs.cancel, "Run {run.pk} cancelled.")


@require_POST
@permission_required(CONTROL_RUN)
def run_budget(request, run_id: int):
    """Change the run's budget (the header's Budget form)."""
    run = _run(run_id)
    try:
        runs.change_budget(run, request.POST.get("budget_usd", ""), user=request.user)
    except runs.ActionError as error:
        return _answer(request, run, message=error.sentence, ok=False)
    return _answer(request, run, message=budget_changed(run), ok=True, parts=RUN_PARTS)


@require_POST
@permission_required(LAUNCH_RUN)
def run_launch_again(request, run_id: int):
    """A new run of this run's plan with the same settings; the browser goes to it."""
    run = _run(run_id)
    try:
        again = reruns.launch_again(run, user=request.user)
    except runs.ActionError as error:
        return _answer(request, run, message=f"Not launched: {error}", ok=False)
    messages.success(request, f"Run #{again.pk} launched: plan {again.plan_id} again, with run #{run.pk}'s settings.")
    url = reverse("run_detail", args=[again.pk])
    if is_htmx(request):
        response = HttpResponse("")
        response["HX-Redirect"] = url
        return response
    return HttpResponseRedirect(url)


# --- Task controls ------------------------------------------------------------------------------


def _task_action(request, run_id: int, task_id: int, action, message: str | Callable[[TaskRun], str]):
    """Apply a task control through the engine and answer with the parts it changed (`message`:
    the answer, with {key}, or a function of the task that says what the action came to)."""
    run = _run(run_id)
    task = _task(run, task_id)
    try:
        done = action(task, user=request.user)
    except runs.ActionError as error:
        return _answer(request, run, message=error.sentence, ok=False)
    return _answer(
        request,
        run,
        message=message(done) if callable(message) else message.format(key=task.subtask.key),
        ok=True,
        parts=RUN_PARTS,
        tasks=[task.pk],
        panel=task,
    )


@require_POST
@permission_required(CONTROL_RUN)
def run_task_retry(request, run_id: int, task_id: int):
    return _task_action(request, run_id, task_id, runs.retry_task, "{key} will run again.")


@require_POST
@permission_required(CONTROL_RUN)
def run_task_skip(request, run_id: int, task_id: int):
    return _task_action(request, run_id, task_id, runs.skip_task, run_tasks.skip_said)


@require_POST
@permission_required(CONTROL_RUN)
def run_task_rerun(request, run_id: int, task_id: int):
    """Re-run from this task: it and its downstream start over; upstream results are kept."""
    run = _run(run_id)
    task = _task(run, task_id)
    try:
        keys = reruns.rerun_from(task, user=request.user)
    except runs.ActionError as error:
        return _answer(request, run, message=error.sentence, ok=False)
    below = f" and {counted(len(keys) - 1, 'task')} below it" if len(keys) > 1 else ""
    return _answer(
        request,
        run,
        message=f"{task.subtask.key}{below} will run again; the results above are kept.",
        ok=True,
        parts=(*RUN_PARTS, "task_table", "result", "gantt"),
        panel=task,
    )


# --- Checkpoints and plan edits -----------------------------------------------------------------


def _checkpoint(run: Run, checkpoint_id: int) -> Checkpoint:
    return get_object_or_404(Checkpoint.objects.select_related("task_run__subtask"), pk=checkpoint_id, run=run)


@require_POST
@permission_required(DECIDE_CHECKPOINT)
def run_checkpoint_decide(request, run_id: int, checkpoint_id: int):
    run = _run(run_id)
    checkpoint = _checkpoint(run, checkpoint_id)
    decision = request.POST.get("decision", "")
    if decision not in ("approve", "reject"):
        return _answer(request, run, message="Choose Approve or Reject.", ok=False)
    try:
        decided = runs.decide(
            checkpoint,
            approve=decision == "approve",
            user=request.user,
            comment=request.POST.get("comment", ""),
            plan_version=request.POST.get("plan_version") or None,
        )
    except runs.ActionError as error:
        return _answer(request, run, message=error.sentence, ok=False)
    tasks = [checkpoint.task_run_id] if checkpoint.task_run_id else []
    return _answer(
        request,
        run,
        message=runs.decision_in_words(decided),
        ok=True,
        parts=RUN_PARTS,
        tasks=tasks,
    )


PLAN_PARTS = ("header", "totals", "checkpoints", "graph", "task_table", "lanes")


@require_POST
@permission_required(DECIDE_CHECKPOINT)
def run_plan_edit(request, run_id: int, checkpoint_id: int, key: str):
    run = _run(run_id)
    checkpoint = _checkpoint(run, checkpoint_id)
    try:
        plan_edits.edit_instructions(checkpoint, key, request.POST.get("instructions", ""), user=request.user)
    except runs.ActionError as error:
        return _answer(request, run, message=error.sentence, ok=False)
    return _answer(request, run, message=f"Instructions of {key} saved.", ok=True, parts=("checkpoints",))


@require_POST
@permission_required(DECIDE_CHECKPOINT)
def run_plan_remove(request, run_id: int, checkpoint_id: int, key: str):
    run = _run(run_id)
    checkpoint = _checkpoint(run, checkpoint_id)
    try:
        downstream = plan_edits.remove_subtask(checkpoint, key, user=request.user)
    except runs.ActionError as error:
        return _answer(request, run, message=error.sentence, ok=False)
    message = f"{key} removed from the plan." + (
        f" {', '.join(downstream)} no longer {'waits' if len(downstream) == 1 else 'wait'} for it."
        if downstream
        else ""
    )
    return _answer(request, run, message=message, ok=True, parts=PLAN_PARTS)
