"""History and re-runs as people see them: a plan's page with its runs side by side, "Launch
again", "Re-run from here", the request behind each attempt in the task panel, estimate against
actual at the end, and URLs that never end in a 404 when trimmed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from orchestrator.engine import runs
from orchestrator.models import Plan, ProviderLimit, Run
from tests.conftest import fast_latency
from tests.conftest import run_here as run_all

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_broker")]

HTMX = {"HTTP_HX_REQUEST": "true"}


def words(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.fixture
def finished(make_agent, make_plan, priced_limit, personas):
    make_agent("researcher", provider_options=fast_latency(0.01), system_prompt="You are careful.")
    make_agent("writer", provider_options=fast_latency(0.01))
    plan = make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}, goal="Compare two queues")
    return run_all(runs.launch(plan, cap=2, budget_usd="0.50", launched_by=personas["launcher"]))


@pytest.fixture
def launcher(client, personas):
    client.force_login(personas["launcher"])
    return client


def test_the_plan_page_lists_every_run_of_the_plan_side_by_side(launcher, finished, personas):
    second = run_all(runs.launch(finished.plan, cap=1, budget_usd="0.40"))
    runs.cancel(runs.launch(finished.plan))
    page = launcher.get(f"/plans/{finished.plan_id}/")
    assert page.status_code == 200
    rows = re.findall(r'<tr id="plan-run-(\d+)">(.*?)</tr>', page.text, re.S)
    assert [int(pk) for pk, _ in rows][1:] == [second.pk, finished.pk]  # newest first
    first_row = dict(rows)[str(finished.pk)]
    assert "Succeeded" in first_row and "2 of 2 tasks succeeded" in first_row
    assert "cap 2 · budget $0.50" in first_row and "launcher" in first_row
    assert "$0.0" in first_row  # its cost and its estimate
    assert "Cancelled" in dict(rows)[rows[0][0]]
    assert f'href="/runs/new/?plan={finished.plan_id}"' in page.text  # launch it again from here
    assert "Estimated cost" in page.text and "worst case" in page.text  # two answers per agent: not yet learned
    listing = launcher.get("/plans/").text
    assert f'id="plan-row-{finished.plan_id}"' in listing and ">3</td>" in listing  # three runs


def _duration_note(client, plan) -> str:
    page = client.get(f"/plans/{plan.pk}/").text
    return re.search(r'id="plan-duration">.*?<div class="stat-note">(.*?)</div>', page, re.S).group(1)


def test_the_plan_pages_duration_names_the_default_cap_and_each_number_once(launcher, make_agent, make_plan, settings):
    settings.GLASSBOX_DEFAULT_CAP = 4
    make_agent("researcher", max_concurrency=8)
    make_agent("writer", max_concurrency=1)
    wide = make_plan({f"probe_{n}": ("researcher", []) for n in range(8)})
    assert _duration_note(launcher, wide) == "set by the default cap of 4: critical path 0.2 s, total work 1.6 s"
    chain = make_plan({"scope": ("researcher", []), "write": ("researcher", ["scope"])})
    assert (
        _duration_note(launcher, chain) == "at the default cap of 4, set by the critical path (0.4 s); total work 0.4 s"
    )
    drafts = make_plan({f"draft_{n}": ("writer", []) for n in range(3)})
    assert (
        _duration_note(launcher, drafts)
        == "at the default cap of 4, set by the writer&#x27;s limit of 1 at once: critical path 0.2 s, total work 0.6 s"
    )


def test_launch_again_starts_a_new_run_with_the_same_settings(launcher, finished):
    response = launcher.post(f"/runs/{finished.pk}/launch-again/", **HTMX)
    again = Run.objects.exclude(pk=finished.pk).get()
    assert response["HX-Redirect"] == f"/runs/{again.pk}/"
    assert (again.plan_id, again.cap, again.budget_usd) == (finished.plan_id, 2, finished.budget_usd)
    page = launcher.get(f"/runs/{again.pk}/").text
    assert f"Run #{again.pk} launched: plan {finished.plan_id} again, with run #{finished.pk}&#x27;s settings." in page


def test_a_viewer_cannot_launch_again_and_sees_no_button(client, personas, finished):
    client.force_login(personas["viewer"])
    assert 'data-action="launch-again"' not in client.get(f"/runs/{finished.pk}/").text
    assert client.post(f"/runs/{finished.pk}/launch-again/").status_code == 403
    assert Run.objects.count() == 1


def test_rerun_from_here_in_the_task_panel(launcher, finished):
    scope = finished.tasks.get(subtask__key="scope")
    panel = launcher.get(f"/runs/{finished.pk}/tasks/{scope.pk}/", **HTMX).text
    assert 'data-action="rerun"' in panel and "the 1 task below it" in panel
    response = launcher.post(f"/runs/{finished.pk}/tasks/{scope.pk}/rerun/", **HTMX)
    assert "scope and 1 task below it will run again; the results above are kept." in response.text
    finished.refresh_from_db()
    assert finished.status == Run.Status.RUNNING
    assert dict(finished.tasks.values_list("subtask__key", "state")) == {"scope": "queued", "write": "pending"}
    refused = launcher.post(f"/runs/{finished.pk}/tasks/{scope.pk}/rerun/", **HTMX)
    assert refused["X-Glassbox-Refused"] == "1"
    assert '<span class="run-flash-text">Task scope is queued: only a task that has finished' in refused.text


def test_a_timeout_under_ten_seconds_reads_as_the_whole_seconds_it_was_set_to(launcher, finished):
    """A 6 s timeout read "timeout 6.0 s" beside "timeout 20 s" and "timed out after 6 s"."""
    write = finished.tasks.get(subtask__key="write")
    request = write.attempts.get().request
    write.attempts.update(request={**request, "timeout_s": 6})
    panel = launcher.get(f"/runs/{finished.pk}/tasks/{write.pk}/", **HTMX).text
    assert "max 1,024 tokens · timeout 6 s" in panel


def test_the_task_panel_shows_the_request_behind_each_attempt(launcher, finished):
    write = finished.tasks.get(subtask__key="write")
    scope = finished.tasks.get(subtask__key="scope")
    panel = launcher.get(f"/runs/{finished.pk}/tasks/{write.pk}/", **HTMX).text
    assert "Request sent: simulated:sim-1 · max 1,024 tokens · timeout 30 s" in panel
    assert "Goal of the whole team: Compare two queues" in panel
    summary_start = scope.summary.split()[0]
    assert f"- Scope (scope): {summary_start}" in panel  # the upstream summary it was given
    scope_panel = launcher.get(f"/runs/{finished.pk}/tasks/{scope.pk}/", **HTMX).text
    assert "You are careful." in scope_panel  # the system prompt


def test_the_finished_run_sets_its_cost_against_the_estimate(launcher, finished):
    page = launcher.get(f"/runs/{finished.pk}/").text
    match = re.search(r'id="cost-estimate">estimated (\$[\d.]+): it cost (\d+)% of that', page)
    assert match, "the cost card does not compare the cost with the estimate"
    assert 0 < int(match.group(2)) < 100  # simulated answers are shorter than the worst case


# --- URLs -------------------------------------------------------------------------------------------


def trimmed(url: str) -> list[str]:
    """Every prefix of `url` that ends at a slash: /runs/7/tasks/3/ → /runs/7/tasks/, /runs/7/, /runs/, /."""
    parts = url.strip("/").split("/")
    return ["/" + "/".join(parts[:n]) + ("/" if n else "") for n in range(len(parts) - 1, -1, -1)]


def test_no_url_a_person_can_reach_by_trimming_gives_a_404(client, make_agent, make_plan, django_user_model):
    admin = django_user_model.objects.create_superuser("root")
    client.force_login(admin)
    make_agent("researcher")
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])})
    run = runs.launch(plan, require_plan_approval=True)
    checkpoint = run.checkpoints.get()
    task = run.tasks.get(subtask__key="a")
    deep = [
        reverse("run_task_output", args=[run.pk, task.pk]),
        reverse("run_task_retry", args=[run.pk, task.pk]),
        reverse("run_plan_edit", args=[run.pk, checkpoint.pk, "a"]),
        reverse("run_checkpoint_decide", args=[run.pk, checkpoint.pk]),
        reverse("approval_approve", args=[checkpoint.pk]),
        reverse("plan_document", args=[plan.pk]),
        reverse("runs_table"),
        "/runs/new/some-token/",
        "/accounts/password_change/",
    ]
    seen = set()
    for url in deep:
        for prefix in trimmed(url):
            if prefix in seen:
                continue
            seen.add(prefix)
            response = client.get(prefix, follow=True)
            assert response.status_code != 404, f"{prefix} (trimmed from {url}) is a 404"
            assert response.status_code == 200, f"{prefix}: {response.status_code}"
    assert {"/", "/runs/", f"/runs/{run.pk}/tasks/", f"/runs/{run.pk}/checkpoints/{checkpoint.pk}/subtasks/a/"} <= seen
    assert client.get("/").url == "/runs/"
    assert client.get(f"/approvals/{checkpoint.pk}/").url == f"/runs/{run.pk}/#checkpoint-{checkpoint.pk}"


def test_the_plan_pages_estimate_names_the_models_it_counts_at_0(launcher, make_agent, make_plan):
    """The plan page's estimate counted a model with no price as $0 and did not say so, as New
    run's pre-flight does."""
    make_agent("researcher")
    plan = make_plan({"scope": ("researcher", [])})
    unpriced = re.search(r'id="plan-unpriced">(.*?)</div>', launcher.get(f"/plans/{plan.pk}/").text)
    assert unpriced is not None
    assert unpriced.group(1) == (
        "No price is known for simulated:sim-1: counted as $0 (set prices in the admin under provider limits)."
    )
    ProviderLimit.objects.create(provider="simulated", model="sim-1", input_price_per_mtok=3)
    assert 'id="plan-unpriced"' not in launcher.get(f"/plans/{plan.pk}/").text


def test_the_plan_pages_times_are_to_the_second_in_utc_as_the_audit_logs(launcher, make_agent, make_plan):
    """The plans list and a plan's page gave "2026-11-28 10:31 UTC" where the admin, the audit log
    and the Markdown export give "2026-11-28 10:31:07 UTC": two runs launched a minute apart read alike."""
    make_agent("researcher")
    plan = make_plan({"scope": ("researcher", [])})
    saved = datetime(2026, 11, 28, 10, 31, 7, tzinfo=UTC)
    Plan.objects.filter(pk=plan.pk).update(created_at=saved)
    run = runs.launch(plan)
    Run.objects.filter(pk=run.pk).update(created_at=saved + timedelta(seconds=62))
    page = " ".join(re.sub(r"<[^>]+>", " ", launcher.get(f"/plans/{plan.pk}/").text).split())
    assert "saved 2026-11-28 10:31:07 UTC" in page
    assert "2026-11-28 10:32:09 UTC ·" in page
    listing = launcher.get("/plans/").text
    assert ">2026-11-28 10:32:09 UTC</td>" in listing


def test_a_plan_edited_before_approval_and_its_copy_link_to_each_other(launcher, make_agent, make_plan, personas):
    """An approver's edit copied the plan for its run: the original's page said "This plan has not
    run yet" and its copy's page never said whose copy it was."""
    from orchestrator.engine import plan_edits
    from orchestrator.models import Checkpoint

    make_agent("researcher")
    plan = make_plan({"scope": ("researcher", [], {"instructions": "Frame it."})}, goal="Compare two queues")
    run = runs.launch(plan, require_plan_approval=True)
    plan_edits.edit_instructions(run.checkpoints.get(kind=Checkpoint.Kind.PLAN), "scope", "Frame it well.")
    run.refresh_from_db()
    original = read(launcher, f"/plans/{plan.pk}/")
    assert (
        f"This plan has not run yet as it is. Edited before approval, it ran as plan {run.plan_id} (run #{run.pk})."
        in original
    )
    copy = read(launcher, f"/plans/{run.plan_id}/")
    assert f"An edited copy of plan {plan.pk}, made when its plan was edited before approval for run #{run.pk}." in copy


def read(client, url: str) -> str:
    """The page's words as a person reads them: no space a tag left before a comma or a stop."""
    return re.sub(r"\(\s+", "(", re.sub(r"\s+([,.)])", r"\1", words(client.get(url).content.decode())))
