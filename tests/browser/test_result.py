"""The Result section of a run with many final tasks, in Chromium: each final task folds to its
heading and the start of its summary (the first few open), the section says how many final tasks
there are and how they ended, every full output is a click or two away, and a live update keeps
what the reader opened. Screenshots in test-artifacts/<test>/."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import expect

from dashboard.fragments import FINAL_TASKS_OPEN
from orchestrator import events
from orchestrator.models import Attempt, TaskRun
from tests.browser.test_narrow import PHONE
from tests.browser.test_run_layout import DESKTOP, open_page, part_shot
from tests.large_run import finished_large_run

pytestmark = [pytest.mark.browser]


def test_many_final_tasks_fold_and_each_full_output_stays_reachable(logged_in_page, browser_user, request):
    """Every one of the 16 final tasks' summaries, one after another, made the section 2,800 px
    tall at 1280 px (more on a phone); now the first three are open and the others are one line."""
    page = logged_in_page
    run = finished_large_run(launched_by=browser_user)
    open_page(page, f"/runs/{run.pk}/", DESKTOP)
    result = page.locator("#run-result")
    finals = result.locator(".final-output")
    expect(finals).to_have_count(16)
    expect(result.locator(".final-outcome")).to_have_text("16 final tasks: 16 of 16 succeeded")

    folds = result.locator(".final-fold")
    opened = [fold.get_attribute("open") is not None for fold in folds.all()]
    assert opened == [True] * FINAL_TASKS_OPEN + [False] * (16 - FINAL_TASKS_OPEN)
    expect(finals.first.locator(".final-summary")).to_be_visible()
    report = result.locator(f"#final-{run.tasks.get(subtask__key='report').pk}")
    expect(report.locator("h3")).to_contain_text("Write the migration report")
    expect(report.locator("h3 .state-badge")).to_have_text("succeeded")
    expect(report.locator(".final-preview")).to_contain_text("writer worked on")
    expect(report.locator(".final-summary")).to_be_hidden()
    height = result.bounding_box()["height"]
    assert height < 2 * DESKTOP["height"], f"the Result is {height:.0f} px tall"
    part_shot(page, request, "#run-result", "result-folded")

    # The report's whole output: open its fold, then "Full output".
    report.locator("summary").first.click()
    expect(report.locator(".final-preview")).to_be_hidden()
    expect(report.locator(".final-summary")).to_be_visible()
    report.get_by_text("Full output").click()
    expect(report.locator(".lazy-output h2")).to_have_text("writer: Write the migration report")

    page.set_viewport_size(PHONE)
    part_shot(page, request, "#run-result", "result-folded-390")
    height = result.bounding_box()["height"]
    assert height < 6 * PHONE["height"], f"the Result is {height:.0f} px tall at 390 px"


def test_the_folded_result_follows_a_final_task_that_fails_and_keeps_what_the_reader_opened(
    logged_in_page, browser_user, request
):
    page = logged_in_page
    run = finished_large_run(launched_by=browser_user)
    open_page(page, f"/runs/{run.pk}/", DESKTOP)
    result = page.locator("#run-result")
    opened = result.locator(f"#final-{run.tasks.get(subtask__key='check_5').pk}")
    opened.locator("summary").first.click()
    expect(opened.locator(".final-summary")).to_be_visible()

    check = run.tasks.get(subtask__key="check_7")
    with transaction.atomic():
        # As a provider's refusal leaves it: its attempt failed before writing a word.
        TaskRun.objects.filter(pk=check.pk).update(
            state=TaskRun.State.FAILED, error="provider refused the request", output=""
        )
        Attempt.objects.filter(task_run=check).update(state=Attempt.State.FAILED)
        events.record("task.failed", task=check, payload={"attempt": 1, "error": "provider refused the request"})

    expect(result.locator(".final-outcome")).to_have_text("16 final tasks: 15 of 16 succeeded · 1 failed")
    failed = result.locator(f"#final-{check.pk}")
    expect(failed.locator("h3 .state-badge")).to_have_text("failed")
    expect(failed.locator(".final-preview")).to_have_text("No output: provider refused the request")
    expect(opened.locator(".final-summary")).to_be_visible()  # still open after the section was sent again
    part_shot(page, request, "#run-result", "result-one-failed")
