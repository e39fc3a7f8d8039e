"""A run's progress as a watcher follows it: its totals, status, summary and open checkpoints as
of one moment (the command line's `launch --follow` and `run_status`, the API's run totals).
"""

from __future__ import annotations

from django.db.models import Count
from django.utils import timezone
from pydantic import ConfigDict, Field

from orchestrator.models import Checkpoint, Run, TaskRun
from orchestrator.readmodels import tasks as run_tasks
from orchestrator.readmodels import totals as run_totals
from orchestrator.readmodels.records import RunTotals
from orchestrator.readmodels.snapshot import read_snapshot
from orchestrator.readmodels.tasks import run_tokens

State = TaskRun.State


class RunProgress(RunTotals):
    """A run's totals plus what a watcher follows: its status, summary and open checkpoints."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_id: int
    status: str
    summary: str
    pending_checkpoints: list[Checkpoint] = Field(default_factory=list)
    # `waiting` told apart, in the run page's words: at a gate (and, of the `running` ones, those
    # whose agent waits for a tool call's approval: the page says they need approval too), and
    # done but in review.
    needs_approval: int = 0
    awaiting_tool_approval: int = 0
    in_review: int = 0
    # Of the `ready` tasks, those a cap or a pause holds back (the page's "held back"), and those
    # waiting for their retry's backoff to pass (the page's "retrying").
    held_back: int = 0
    retrying: int = 0

    @property
    def running_now(self) -> int:
        """The running tasks whose agent waits for no person: `running` less `awaiting_tool_approval`."""
        return self.running - self.awaiting_tool_approval

    @property
    def ready_now(self) -> int:
        """The ready tasks nothing holds back: `ready` less `held_back` and `retrying`."""
        return self.ready - self.held_back - self.retrying


def progress(run: Run) -> RunProgress:
    """The run's counts, totals and pending checkpoints as of one moment (`read_snapshot`): read
    one query after another, an attempt that stopped between the run's row and the count of
    attempts still stopping read as "none stopping" beside totals without its usage."""
    with read_snapshot():
        return _progress(run)


def _progress(run: Run) -> RunProgress:
    run.refresh_from_db()
    rows = list(
        run.tasks.order_by()
        .values_list("state")
        .annotate(
            n=Count("pk"),
            held=Count("pk", filter=run_tasks.HELD_BACK),
            retrying=Count("pk", filter=run_tasks.RETRYING_NOW),
            approval=Count("pk", filter=run_tasks.AWAITING_TOOL_APPROVAL),
        )
    )
    counts = {state: n for state, n, *_ in rows}
    end = run.finished_at or timezone.now()
    tokens = run_tokens(run)
    return RunProgress(
        run_id=run.pk,
        status=run.status,
        summary=run.summary,
        total=sum(counts.values()),
        succeeded=counts.get(State.SUCCEEDED, 0),
        failed=counts.get(State.FAILED, 0),
        skipped=counts.get(State.SKIPPED, 0),
        cancelled=counts.get(State.CANCELLED, 0),
        running=counts.get(State.RUNNING, 0),
        queued=counts.get(State.QUEUED, 0),
        ready=counts.get(State.READY, 0),
        throttled=counts.get(State.THROTTLED, 0),
        waiting=counts.get(State.WAITING_GATE, 0) + counts.get(State.AWAITING_REVIEW, 0),
        awaiting_tool_approval=sum(approval for *_, approval in rows),
        needs_approval=counts.get(State.WAITING_GATE, 0) + sum(approval for *_, approval in rows),
        in_review=counts.get(State.AWAITING_REVIEW, 0),
        held_back=sum(held for _, _, held, _, _ in rows),
        retrying=sum(retrying for _, _, _, retrying, _ in rows),
        pending=counts.get(State.PENDING, 0),
        done=sum(counts.get(s, 0) for s in TaskRun.TERMINAL),
        elapsed_s=(end - run.started_at).total_seconds() if run.started_at else 0.0,
        cost_usd=run.cost_usd,
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        input_tokens_so_far=tokens.input_so_far,
        streaming_tokens=tokens.streaming,
        pending_checkpoints=list(
            run.checkpoints.filter(status=Checkpoint.Status.PENDING).select_related("task_run__subtask")
        ),
        attempts_stopping=run_totals.attempts_stopping(run) if run.is_finished else 0,
    )
