"""The API's endpoints: thin, each one checks a permission and calls the engine.

Runs (launch from a plan document or a saved plan; list; detail with tasks and totals; pause,
resume, cancel, change its budget), tasks (retry, skip), checkpoints (list; approve; reject with a comment),
a run's events (`?after=SEQ`, in pages) and agents (list, add, change). The permission is checked before
anything is looked up, so that an outsider learns nothing, not even whether an id exists.
"""

from __future__ import annotations

import json
from typing import Annotated

from django.contrib.auth import get_user_model
from ninja import Path, Query, Router, Status
from ninja.errors import ValidationError

from dashboard.permissions import CONTROL_RUN, DECIDE_CHECKPOINT, LAUNCH_RUN, VIEW_RUN
from orchestrator.engine import runs
from orchestrator.engine.launching import launch_document
from orchestrator.engine.run_settings import RunSettings
from orchestrator.governance import registry
from orchestrator.models import Agent, Checkpoint, Plan, Run, TaskRun
from orchestrator.readmodels.checkpoint_event_records import CheckpointRecord, EventRecord, event_rows
from orchestrator.readmodels.records import AgentRecord, Record, RunRecord, RunTotals, TaskRunRecord
from orchestrator.readmodels.run_export import checkpoint_records, run_tasks, task_run_records
from orchestrator.readmodels.snapshot import read_snapshot

from .auth import require
from .errors import ApiError, detail, not_found
from .schemas import (
    MAX_ID,
    MAX_OFFSET,
    AgentChangeIn,
    AgentCreateIn,
    AgentPage,
    AgentProvider,
    AgentStatus,
    ApproveIn,
    BudgetIn,
    CheckpointPage,
    CheckpointStatus,
    CheckpointWithRun,
    ErrorOut,
    EventPage,
    RejectIn,
    RunCreateIn,
    RunDetailOut,
    RunPage,
    RunStatus,
    SkipIn,
)

VIEW_AGENT = "orchestrator.view_agent"
ADD_AGENT = "orchestrator.add_agent"
CHANGE_AGENT = "orchestrator.change_agent"
VIEW_CHECKPOINT = "orchestrator.view_checkpoint"

PathId = Annotated[int, Path(ge=1, le=MAX_ID)]
Limit = Annotated[int, Query(ge=1, le=200, description="Items per page")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Items to skip")]
# ASCII letters and digits, as the schema's (ECMAScript) pattern reads `\w`; Python's would also take é.
Username = Annotated[
    str | None, Query(max_length=150, pattern=r"^[A-Za-z0-9_.@+-]+$", description="Launched by (username)")
]

# Every answer an endpoint can give besides its success, in the one error shape.
READ_ERRORS = {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut}
WRITE_ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}

router = Router()


# --- Lookups -------------------------------------------------------------------------------------


def _get(queryset, pk: int, what: str):
    try:
        return queryset.get(pk=pk)
    except queryset.model.DoesNotExist:
        raise not_found(what, pk) from None


def run_detail(run: Run) -> dict:
    """The run, its totals and its tasks as of one moment: a running attempt's tokens are counted
    the same in the totals and in its task's record."""
    with read_snapshot():
        run = Run.objects.select_related("plan", "launched_by").get(pk=run.pk)
        return {
            "run": RunRecord.of(run),
            "totals": RunTotals.of(runs.progress(run)),
            "tasks": task_run_records(run_tasks(run)),
            "checkpoints": checkpoint_records(run),
        }


def page(queryset, record: type[Record], limit: int, offset: int) -> dict:
    return {
        "count": queryset.count(),
        "limit": limit,
        "offset": offset,
        "items": record.many(list(queryset[offset : offset + limit])),
    }


# --- Runs ----------------------------------------------------------------------------------------


@router.get("/runs", response={200: RunPage, **READ_ERRORS}, tags=["runs"])
def list_runs(
    request,
    status: Annotated[RunStatus | None, Query(description="Only runs in this status")] = None,
    plan: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Only runs of this plan")] = None,
    launched_by: Username = None,
    limit: Limit = 50,
    offset: Offset = 0,
):
    """Runs, newest first."""
    require(request, VIEW_RUN)
    queryset = Run.objects.select_related("plan", "launched_by", "event_sequence").order_by("-created_at", "-pk")
    if status:
        queryset = queryset.filter(status=status)
    if plan:
        queryset = queryset.filter(plan_id=plan)
    if launched_by:
        queryset = queryset.filter(**{f"launched_by__{get_user_model().USERNAME_FIELD}": launched_by})
    return page(queryset, RunRecord, limit, offset)


@router.post("/runs", response={201: RunDetailOut, **WRITE_ERRORS}, tags=["runs"])
def create_run(request, body: RunCreateIn):
    """Launch a run of a saved plan or of a plan document (validated whole; on any error nothing is saved).

    A plan over its budget is refused with both numbers (422 launch_refused); an invalid plan
    lists every problem in `details` (422 invalid_plan).
    """
    user = require(request, LAUNCH_RUN)
    settings = RunSettings.of(
        cap=body.cap,
        budget_usd=body.budget_usd,
        failure_policy=body.failure_policy,
        require_plan_approval=body.require_plan_approval,
    )
    if body.plan_id is not None:
        run = runs.launch(_get(Plan.objects.all(), body.plan_id, "plan"), launched_by=user, **settings.as_dict())
    elif body.document is not None:
        run = launch_document(
            body.document,
            filename=body.filename,
            source_name=body.filename or "api",
            settings=settings,
            launched_by=user,
        )
    else:  # RunCreateIn.one_source lets no body through without one of them
        raise ValueError("a run needs plan_id or document")
    return Status(201, run_detail(run))


@router.get("/runs/{run_id}", response={200: RunDetailOut, **READ_ERRORS}, tags=["runs"])
def get_run(request, run_id: PathId):
    """One run: its fields, task totals, every task with its attempts, its checkpoints."""
    require(request, VIEW_RUN, run=run_id)
    return run_detail(_get(Run.objects.all(), run_id, "run"))


def _run_action(request, run_id: int, action) -> dict:
    user = require(request, CONTROL_RUN, run=run_id)
    run = _get(Run.objects.all(), run_id, "run")
    action(run, user=user)
    return run_detail(run)


@router.post("/runs/{run_id}/pause", response={200: RunDetailOut, **WRITE_ERRORS}, tags=["runs"])
def pause_run(request, run_id: PathId):
    """Stop admitting new tasks; running tasks finish."""
    return _run_action(request, run_id, runs.pause)


@router.post("/runs/{run_id}/resume", response={200: RunDetailOut, **WRITE_ERRORS}, tags=["runs"])
def resume_run(request, run_id: PathId):
    """Admit tasks again after a pause."""
    return _run_action(request, run_id, runs.resume)


@router.post("/runs/{run_id}/cancel", response={200: RunDetailOut, **WRITE_ERRORS}, tags=["runs"])
def cancel_run(request, run_id: PathId):
    """Cancel every unfinished task and end the run."""
    return _run_action(request, run_id, runs.cancel)


@router.post("/runs/{run_id}/budget", response={200: RunDetailOut, **WRITE_ERRORS}, tags=["runs"])
def change_run_budget(request, run_id: PathId, body: BudgetIn):
    """Change a run's budget (not below what it spent and holds); a run stopped over budget goes on
    once a task is retried. Written to the run's events as `run.budget_changed`, naming who."""
    user = require(request, CONTROL_RUN, run=run_id)
    run = _get(Run.objects.all(), run_id, "run")
    runs.change_budget(run, body.budget_usd, user=user)
    return run_detail(run)


@router.get("/runs/{run_id}/events", response={200: EventPage, **READ_ERRORS}, tags=["events"])
def run_events(
    request,
    run_id: PathId,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Sequence number of the last event seen")] = 0,
    limit: Limit = 100,
):
    """A run's events after sequence number `after`, oldest first; follow `next_after` while `has_more`."""
    require(request, VIEW_RUN, run=run_id)
    run = _get(Run.objects.all(), run_id, "run")
    events = list(event_rows(run.events.filter(seq__gt=after)).order_by("seq")[: limit + 1])
    has_more = len(events) > limit
    events = events[:limit]
    return {
        "items": [EventRecord.of(e) for e in events],
        "next_after": events[-1].seq if events else after,
        "has_more": has_more,
    }


# --- Tasks ---------------------------------------------------------------------------------------


def _task(task_id: int) -> TaskRun:
    return _get(TaskRun.objects.select_related("run", "subtask", "agent"), task_id, "task")


def _task_out(task: TaskRun) -> TaskRunRecord:
    with read_snapshot():
        (record,) = task_run_records(
            TaskRun.objects.filter(pk=task.pk).select_related("subtask", "agent").prefetch_related("attempts")
        )
    return record


@router.post("/tasks/{task_id}/retry", response={200: TaskRunRecord, **WRITE_ERRORS}, tags=["tasks"])
def retry_task(request, task_id: PathId):
    """Run a failed, cancelled or skipped task again; tasks skipped because of it wait again."""
    user = require(request, CONTROL_RUN)
    return _task_out(runs.retry_task(_task(task_id), user=user))


def optional_body(request, body):
    """An optional body, or None when there is none. A body that is not a JSON object is refused:
    django-ninja would quietly read `"garbage"` or `[null, null]` as an empty object."""
    raw = request.body.strip()
    if not raw:
        return None
    try:
        parsed = json.loads(raw)
        if parsed is None:  # the schema allows null for no body
            return None
        is_object = isinstance(parsed, dict)
    except ValueError:
        is_object = False
    if not is_object:
        raise ValidationError([{"loc": ("body",), "msg": "must be a JSON object, or no body at all"}])
    return body


@router.post("/tasks/{task_id}/skip", response={200: TaskRunRecord, **WRITE_ERRORS}, tags=["tasks"])
def skip_task(request, task_id: PathId, body: SkipIn | None = None):
    """Skip a task: downstream tasks go on without it. The body (a reason) is optional."""
    user = require(request, CONTROL_RUN)
    body = optional_body(request, body)
    reason = body.reason.strip() if body is not None else ""
    return _task_out(runs.skip_task(_task(task_id), user=user, reason=reason))


# --- Checkpoints ---------------------------------------------------------------------------------


@router.get("/checkpoints", response={200: CheckpointPage, **READ_ERRORS}, tags=["checkpoints"])
def list_checkpoints(
    request,
    status: Annotated[CheckpointStatus | None, Query(description="Default: pending")] = "pending",
    run: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Only this run's checkpoints")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
):
    """Checkpoints by when each opened (`created_at`), the longest waiting first: by default the
    pending ones, waiting for a decision. A task retried or re-run asks again with a new checkpoint,
    which comes after those opened before it; the one decided before keeps its decision."""
    require(request, VIEW_CHECKPOINT)
    queryset = Checkpoint.objects.select_related("task_run__subtask", "decided_by").order_by("created_at", "pk")
    if status:
        queryset = queryset.filter(status=status)
    if run:
        queryset = queryset.filter(run_id=run)
    return page(queryset, CheckpointWithRun, limit, offset)


def _decide(
    request, checkpoint_id: int, *, approve: bool, comment: str, plan_version: str | None = None
) -> CheckpointRecord:
    user = require(request, DECIDE_CHECKPOINT)
    checkpoint = _get(Checkpoint.objects.all(), checkpoint_id, "checkpoint")
    decided = runs.decide(checkpoint, approve=approve, user=user, comment=comment, plan_version=plan_version)
    decided = Checkpoint.objects.select_related("task_run__subtask", "decided_by").get(pk=decided.pk)
    return CheckpointRecord.of(decided)


@router.post(
    "/checkpoints/{checkpoint_id}/approve", response={200: CheckpointRecord, **WRITE_ERRORS}, tags=["checkpoints"]
)
def approve_checkpoint(request, checkpoint_id: PathId, body: ApproveIn | None = None):
    """Approve a pending checkpoint (the plan, a gate before a task, a review after it).

    The body (a comment, and for the plan the version reviewed) is optional. With separation of
    duties on, the person who launched a run cannot approve its plan (409); an approval of a plan
    version that was edited since is refused too (409).
    """
    body = optional_body(request, body)
    return _decide(
        request,
        checkpoint_id,
        approve=True,
        comment=body.comment if body is not None else "",
        plan_version=body.plan_version if body is not None else None,
    )


@router.post(
    "/checkpoints/{checkpoint_id}/reject", response={200: CheckpointRecord, **WRITE_ERRORS}, tags=["checkpoints"]
)
def reject_checkpoint(request, checkpoint_id: PathId, body: RejectIn):
    """Reject a pending checkpoint; the comment saying why is required."""
    return _decide(request, checkpoint_id, approve=False, comment=body.comment)


# --- Agents --------------------------------------------------------------------------------------


@router.get("/agents", response={200: AgentPage, **READ_ERRORS}, tags=["agents"])
def list_agents(
    request,
    status: Annotated[AgentStatus | None, Query(description="Only agents in this lifecycle status")] = None,
    provider: Annotated[AgentProvider | None, Query(description="Only agents of this provider")] = None,
    limit: Limit = 100,
    offset: Offset = 0,
):
    """The agent registry, by name."""
    require(request, VIEW_AGENT)
    queryset = Agent.objects.order_by("name")
    if status:
        queryset = queryset.filter(status=status)
    if provider:
        queryset = queryset.filter(provider=provider)
    return page(queryset, AgentRecord, limit, offset)


def _save_agent(agent: Agent, body, user) -> AgentRecord:
    for field, value in body.model_dump(exclude_unset=True, exclude={"name"}).items():
        if value is not None:
            setattr(agent, field, value)
    try:
        registry.save_agent(agent, user=user)
    except registry.InvalidAgent as invalid:
        details = [
            detail("agent", problem, field) for field, problems in invalid.problems.items() for problem in problems
        ]
        raise ApiError(422, "invalid_agent", f"Agent {agent.name!r} not saved: {invalid}.", details) from None
    return AgentRecord.of(agent)


@router.post("/agents", response={201: AgentRecord, **WRITE_ERRORS}, tags=["agents"])
def create_agent(request, body: AgentCreateIn):
    """Add an agent to the registry; its settings and provider options are checked, every problem named."""
    user = require(request, ADD_AGENT)
    if Agent.objects.filter(name=body.name).exists():
        raise ApiError(
            409, "agent_exists", f"An agent named {body.name!r} exists: change it with PATCH /api/agents/{body.name}."
        )
    return Status(201, _save_agent(Agent(name=body.name), body, user))


@router.patch("/agents/{name}", response={200: AgentRecord, **WRITE_ERRORS}, tags=["agents"])
def change_agent(request, name: Annotated[str, Path(max_length=64)], body: AgentChangeIn):
    """Change an agent's settings (fields left out keep their value); checked as in the admin."""
    user = require(request, CHANGE_AGENT)
    agent = Agent.objects.filter(name=name).first()
    if agent is None:
        raise ApiError(404, "not_found", f"No agent named {name!r}.")
    return _save_agent(agent, body, user)


# --- Anything else under /api/ -------------------------------------------------------------------


@router.api_operation(["GET", "POST", "PUT", "PATCH", "DELETE"], "/{path:rest}", include_in_schema=False)
def unknown(request, rest: str):
    """A path the API does not have: a 404 in the API's error shape, not an HTML page."""
    raise ApiError(404, "not_found", f"No API endpoint at {request.path}; the endpoints are listed at /api/docs.")
