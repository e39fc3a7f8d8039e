"""The runs page: every run with its status, progress, elapsed time, cost against budget and who
launched it. The table is one partial, rendered inside the page and alone for the 2-second poll."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from orchestrator import wording
from orchestrator.models import Checkpoint, Run, TaskRun
from orchestrator.readmodels import prices, run_labels
from orchestrator.readmodels.launchers import launchers
from orchestrator.readmodels.run_counts import run_counts
from orchestrator.readmodels.tasks import StripSegment, count_text, counts_by_run, rejected_at_gate, state_strip
from orchestrator.readmodels.totals import run_idle_text
from orchestrator.wording import counted

from ..formatting import format_duration
from ..permissions import VIEW_RUN, permission_required

RUNS_PER_PAGE = 50


def run_url(run_id: int) -> str:
    """The run page (the `run_detail` URL of the run-page views)."""
    try:
        return reverse("run_detail", args=[run_id])
    except NoReverseMatch:  # the run page's URLs are included under runs/<id>/
        return f"/runs/{run_id}/"


@dataclass
class RunRow:
    run: Run
    url: str
    total: int
    done: int
    failed: int
    pending_checkpoints: int
    elapsed: str
    idle: str  # how much of the elapsed time nothing could start ("57 s of it paused"), or ""
    launched_by: str  # as its run.created event recorded: "alice", "root from the command line"
    status_label: str  # "Succeeded", "Plan rejected" (readmodels/run_labels.py)
    states: dict[str, int] = field(default_factory=dict)  # tasks by state
    rejected: list[str] = field(default_factory=list)  # keys of its tasks rejected at their gate
    unpriced: dict[str, int] = field(default_factory=dict)  # tokens on models with no price (prices.unpriced_by_run)

    @property
    def succeeded(self) -> int:
        return self.states.get(TaskRun.State.SUCCEEDED, 0)

    @property
    def strip(self) -> list[StripSegment]:
        return state_strip(self.states)

    @property
    def progress_text(self) -> str:
        """What the tasks came to, in words: "3 of 5 succeeded", then what else ended or runs."""
        return f"{self.succeeded} of {counted(self.total, 'task')} succeeded"

    @property
    def other_states(self) -> list[str]:
        """The states besides success that people must notice, e.g. ["1 failed", "2 cancelled"],
        or ["2 skipped (a rejected at its gate)"] beside a run that failed with no task failed."""
        shown = (
            TaskRun.State.FAILED,
            TaskRun.State.CANCELLED,
            TaskRun.State.SKIPPED,
            TaskRun.State.RUNNING,
            TaskRun.State.AWAITING_REVIEW,
        )
        return [count_text(s, self.states[s], self.rejected) for s in shown if self.states.get(s)]

    @property
    def went_wrong(self) -> bool:
        """A task failed or was rejected at its gate: its counts are shown as bad news."""
        return bool(self.failed or self.rejected)

    @property
    def cost_over_budget(self) -> bool:
        return self.run.cost_usd > self.run.budget_usd

    @property
    def budget_stop(self) -> str:
        """Under its meter, why a run stopped over budget: the badge "Over budget" beside "83%"
        read as if the budget had been spent and more."""
        return run_labels.budget_stop(self.run)

    @property
    def budget_used_percent(self) -> int:
        return wording.percent(self.run.cost_usd, self.run.budget_usd)

    @property
    def budget_used_text(self) -> str:
        return wording.percent_text(self.run.cost_usd, self.run.budget_usd)

    @property
    def unpriced_short(self) -> str:
        """Under its cost, what the cost leaves out: "+ 1,212 tokens with no price", or ""."""
        return prices.unpriced_short(self.unpriced)

    @property
    def unpriced_text(self) -> str:
        """The same, whole, as the run page's Cost card says it (the note's title)."""
        return prices.unpriced_text(self.unpriced)


def run_rows(runs) -> list[RunRow]:
    now = timezone.now()
    runs = list(runs)
    states = counts_by_run(run.pk for run in runs)
    rejected = rejected_at_gate(run.pk for run in runs if states.get(run.pk, {}).get(TaskRun.State.SKIPPED))
    launched_by = launchers([run.pk for run in runs])
    status_labels = run_labels.labels(runs)
    unpriced = prices.unpriced_by_run(run.pk for run in runs)
    rows = []
    for run in runs:
        if run.started_at:
            elapsed = format_duration(((run.finished_at or now) - run.started_at).total_seconds())
        else:
            elapsed = "not started"
        rows.append(
            RunRow(
                run=run,
                url=run_url(run.pk),
                total=run.n_tasks,
                done=run.n_done,
                failed=run.n_failed,
                pending_checkpoints=run.n_pending_checkpoints,
                elapsed=elapsed,
                idle=run_idle_text(run),
                launched_by=launched_by[run.pk],
                status_label=status_labels[run.pk],
                states=states.get(run.pk, {}),
                rejected=rejected.get(run.pk, []),
                unpriced=unpriced.get(run.pk, {}),
            )
        )
    return rows


def runs_queryset():
    return (
        Run.objects.select_related("plan")
        .annotate(
            n_tasks=Count("tasks", distinct=True),
            n_done=Count("tasks", filter=Q(tasks__state__in=TaskRun.TERMINAL), distinct=True),
            n_failed=Count("tasks", filter=Q(tasks__state=TaskRun.State.FAILED), distinct=True),
            n_pending_checkpoints=Count(
                "checkpoints", filter=Q(checkpoints__status=Checkpoint.Status.PENDING), distinct=True
            ),
        )
        .order_by("-created_at", "-pk")
    )


def runs_context(request) -> dict:
    paginator = Paginator(runs_queryset(), RUNS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    return {"page": page, "rows": run_rows(page.object_list), "run_counts": run_counts()}


@permission_required(VIEW_RUN)
def home(request):
    """`/`: the runs list lives at `/runs/`."""
    return redirect("runs")


@permission_required(VIEW_RUN)
def runs_list(request):
    return render(request, "dashboard/runs.html", runs_context(request))


@permission_required(VIEW_RUN)
def runs_table(request):
    """The table alone: the runs page polls it every 2 s."""
    return render(request, "dashboard/partials/runs_table.html", runs_context(request))
