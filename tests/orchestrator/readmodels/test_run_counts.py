"""The runs list's line: how many runs, and which of them have not ended, each by its status."""

from __future__ import annotations

import pytest

from orchestrator.models import Run
from orchestrator.readmodels.run_counts import run_counts, run_counts_text

Status = Run.Status


@pytest.mark.parametrize(
    ("by_status", "text"),
    [
        ({}, "0 runs."),
        ({Status.SUCCEEDED: 1}, "1 run, all ended."),
        ({Status.SUCCEEDED: 2, Status.CANCELLED: 1, Status.OVER_BUDGET: 1}, "4 runs, all ended."),
        ({Status.RUNNING: 2, Status.FAILED: 1}, "3 runs, 2 running."),
        (
            {Status.AWAITING_APPROVAL: 1, Status.PAUSED: 1, Status.RUNNING: 1, Status.SUCCEEDED: 9},
            "12 runs, 1 running, 1 paused, 1 awaiting approval.",
        ),
        ({Status.PAUSED: 2}, "2 runs, 2 paused."),
    ],
)
def test_the_line_names_each_status_not_ended_and_never_calls_a_paused_run_in_progress(by_status, text):
    assert run_counts_text(by_status) == text


@pytest.mark.django_db
def test_runs_are_counted_by_their_status(launched):
    plan = {"a": ("researcher", [])}
    launched(plan)
    launched(plan, require_plan_approval=True)
    paused = launched(plan)
    Run.objects.filter(pk=paused.pk).update(status=Status.PAUSED)
    ended = launched(plan)
    Run.objects.filter(pk=ended.pk).update(status=Status.CANCELLED)
    assert run_counts() == "4 runs, 1 running, 1 paused, 1 awaiting approval."
