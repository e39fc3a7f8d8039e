"""The command-line interface: launch, approve/reject, runs, run_status, pause/resume/cancel.

In-process tests use call_command (a CommandError carries the exit code); the tests that
check what a person sees at the terminal (no traceback, exit codes) run manage.py as a real
subprocess against the test database, and the end-to-end test adds a real qcluster.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from datetime import UTC
from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.core.management.base import CommandError

from orchestrator.engine import runs
from orchestrator.engine.cluster import cluster_is_running
from orchestrator.management import console
from orchestrator.models import Attempt, Checkpoint, Plan, Run, TaskRun
from tests.conftest import ROOT, child_env, child_pids, wait_until

RESEARCH_BRIEF = str(ROOT / "examples" / "research_brief.yaml")
NO_CLUSTER = "No qcluster is running. Start one with `python manage.py qcluster` in another terminal"

BAD_PLAN = textwrap.dedent(
    """\
    goal: A plan with three problems
    subtasks:
      - key: first
        agent: researcher
        title: First
        depends_on: [second]
      - key: second
        agent: nobody
        title: Second
        depends_on: [first]
      - key: third
        agent: writer
        depends_on: [missing]
    """
)


def run_command(name: str, *args, **options) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(name, *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def manage(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run manage.py as a person would, against the test database."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def columns(line: str) -> list[str]:
    """The cells of a line of a console table (columns are two or more spaces apart)."""
    return re.split(r" {2,}", line)


@pytest.fixture
def no_cluster():
    """No cluster stats in the shared cache, whatever earlier tests left there."""
    cache.clear()
    assert not cluster_is_running()


@pytest.fixture
def running_cluster(qcluster):
    """A real qcluster, started and reporting itself running."""
    cache.clear()
    qcluster.start()
    wait_until(cluster_is_running, timeout=60, message="the qcluster to report itself running")
    return qcluster


@pytest.fixture
def bad_plan(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_PLAN)
    return path


@pytest.fixture
def gated_run(demo_agents, make_plan):
    """A running run whose first task waits at a `before` gate: one pending checkpoint."""
    plan = make_plan({"design": ("architect", [], {"gate": "before"}), "build": ("coder", ["design"])})
    run = runs.launch(plan)
    checkpoint = run.checkpoints.get(status=Checkpoint.Status.PENDING)
    return run, checkpoint


# --- launch ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_launch_refuses_without_a_cluster_and_keeps_nothing(demo_agents, no_cluster):
    plans_before = Plan.objects.count()
    with pytest.raises(CommandError) as refused:
        run_command("launch", RESEARCH_BRIEF)
    assert refused.value.returncode == 2
    assert str(refused.value).startswith(NO_CLUSTER)
    assert Plan.objects.count() == plans_before and not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_launch_without_a_cluster_exits_2_at_the_terminal(demo_agents, no_cluster):
    result = manage("launch", RESEARCH_BRIEF)
    assert result.returncode == 2
    assert NO_CLUSTER in result.stderr and "make run" in result.stderr
    assert "Traceback" not in result.stderr
    assert not Plan.objects.exists()


@pytest.mark.django_db
def test_launch_with_a_bad_plan_reports_every_problem_and_saves_nothing(demo_agents, bad_plan, no_cluster):
    with pytest.raises(CommandError) as invalid:
        run_command("launch", str(bad_plan))
    message = str(invalid.value)
    assert invalid.value.returncode == 1
    assert f"{bad_plan}: 4 problems" in message
    assert 'no agent named "nobody"' in message
    assert "title: is required" in message
    assert 'unknown subtask "missing"' in message
    assert "cycle: first → second → first" in message
    assert not Plan.objects.exists() and not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_bad_plan_at_the_terminal_exits_1_without_traceback(demo_agents, bad_plan):
    result = manage("launch", str(bad_plan), "--no-cluster-check")
    assert result.returncode == 1
    assert "4 problems" in result.stderr and 'no agent named "nobody"' in result.stderr
    assert "Traceback" not in result.stderr
    assert not Plan.objects.exists()


@pytest.mark.django_db
def test_launch_reports_the_run_and_honours_cap_budget_and_policy(demo_agents):
    out, _ = run_command(
        "launch", RESEARCH_BRIEF, "--no-cluster-check", "--cap", "2", "--budget", "1.25", "--policy", "fail_fast"
    )
    run = Run.objects.get()
    assert f"Launched run {run.pk} (6 tasks, cap 2)" in out
    assert run.cap == 2 and str(run.budget_usd) == "1.2500" and run.failure_policy == "fail_fast"
    assert run.plan.source_name == "research_brief.yaml"


@pytest.mark.django_db
@pytest.mark.parametrize("approval", ["--no-approval", "--approval"])
def test_the_audit_log_names_who_launched_from_the_command_line(demo_agents, approval):
    """The run's creation and start said "system", while pause, cancel and approve named `cli:<user>`."""
    from orchestrator.models import Event

    run_command("launch", RESEARCH_BRIEF, "--no-cluster-check", approval)
    run = Run.objects.get()
    launched = Event.objects.filter(run=run, type__in=["run.created", "run.started"]).order_by("seq")
    expected = ["run.created", "run.started"] if approval == "--no-approval" else ["run.created"]
    assert [(e.type, e.actor_kind, e.actor_name) for e in launched] == [
        (event_type, "system", console.cli_actor()) for event_type in expected
    ]
    if approval == "--approval":  # started later, by whoever approves the plan
        checkpoint = run.checkpoints.get()
        approver = "someone else"
        runs.decide(checkpoint, approve=True, user=None, actor_name=approver)
        assert Event.objects.get(run=run, type="run.started").actor_name == approver


@pytest.mark.django_db
def test_launch_over_budget_is_refused_with_the_numbers(demo_agents, priced_limit):
    refused = r"Run not launched: estimated cost \$0\.\d+ is over the budget of \$0\.0010"
    with pytest.raises(CommandError, match=refused):
        run_command("launch", RESEARCH_BRIEF, "--no-cluster-check", "--budget", "0.001")
    assert not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("option", [("--cap", "0"), ("--budget", "-1"), ("--budget", "lots"), ("--policy", "maybe")])
def test_launch_rejects_bad_options(demo_agents, option):
    with pytest.raises(CommandError):
        run_command("launch", RESEARCH_BRIEF, "--no-cluster-check", *option)
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_waiting_exits_1_with_a_json_line_when_the_run_does_not_succeed(demo_agents, monkeypatch):
    real_launch = runs.launch

    def launch_then_cancel(plan, **options):
        run = real_launch(plan, **options)
        return runs.cancel(run)

    monkeypatch.setattr(runs, "launch", launch_then_cancel)
    out, err = StringIO(), StringIO()
    with pytest.raises(SystemExit) as ended:
        call_command("launch", RESEARCH_BRIEF, "--no-cluster-check", "--json", stdout=out, stderr=err)
    assert ended.value.code == 1
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    assert summary["status"] == "cancelled" and summary["tasks"] == 6 and summary["cancelled"] == 6
    assert "Launched run" in err.getvalue()  # with --json, messages for people go to stderr


@pytest.mark.django_db
def test_watching_a_run_whose_plan_is_rejected_ends_saying_plan_rejected(demo_agents, monkeypatch):
    """Its closing line said "Run 7 cancelled", as for a run a person cancelled."""
    real_launch = runs.launch

    def launch_then_reject(plan, **options):
        run = real_launch(plan, **{**options, "require_plan_approval": True})
        run_command("reject", str(run.checkpoints.get().pk), "--comment", "wrong goal")
        run.refresh_from_db()
        return run

    monkeypatch.setattr(runs, "launch", launch_then_reject)
    out, err = StringIO(), StringIO()
    with pytest.raises(SystemExit) as ended:
        call_command("launch", RESEARCH_BRIEF, "--no-cluster-check", "--watch", stdout=out, stderr=err)
    assert ended.value.code == 1
    run = Run.objects.get()
    assert f"Run {run.pk} plan rejected: " in out.getvalue()
    assert "cancelled" not in out.getvalue().splitlines()[-1]


@pytest.mark.django_db
def test_ctrl_c_stops_watching_but_not_the_run(gated_run, monkeypatch):
    from orchestrator.management import console

    def interrupted(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(console.time, "sleep", interrupted)
    monkeypatch.setattr(runs, "launch", lambda plan, **options: gated_run[0])
    out, err = StringIO(), StringIO()
    with pytest.raises(SystemExit) as stopped:
        call_command("launch", RESEARCH_BRIEF, "--no-cluster-check", "--watch", stdout=out, stderr=err)
    run, checkpoint = gated_run
    assert stopped.value.code == 130
    assert f"Stopped watching. Run {run.pk} goes on" in out.getvalue()
    # the pending gate was announced with the commands that decide it
    assert f"python manage.py approve {checkpoint.pk}" in out.getvalue()
    assert f"python manage.py reject {checkpoint.pk} --comment" in out.getvalue()
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING


# --- approve / reject ------------------------------------------------------------------------


@pytest.mark.django_db
def test_reject_requires_a_comment(gated_run):
    _, checkpoint = gated_run
    with pytest.raises(CommandError, match="--comment"):
        run_command("reject", str(checkpoint.pk))
    with pytest.raises(CommandError, match="^A comment is required to reject: say what is wrong$"):
        run_command("reject", str(checkpoint.pk), "--comment", "   ")
    checkpoint.refresh_from_db()
    assert checkpoint.status == Checkpoint.Status.PENDING


@pytest.mark.django_db
def test_reject_with_a_comment_skips_the_gated_task(gated_run):
    run, checkpoint = gated_run
    out, _ = run_command("reject", str(checkpoint.pk), "--comment", "design the API first")
    checkpoint.refresh_from_db()
    assert checkpoint.status == Checkpoint.Status.REJECTED and checkpoint.comment == "design the API first"
    assert f"Rejected checkpoint {checkpoint.pk}" in out
    assert run.tasks.get(subtask__key="design").state == TaskRun.State.SKIPPED


@pytest.mark.django_db
def test_approve_opens_the_gate_and_cannot_decide_twice(gated_run):
    run, checkpoint = gated_run
    out, _ = run_command("approve", str(checkpoint.pk), "--comment", "looks right")
    assert f'Approved checkpoint {checkpoint.pk} of run {run.pk}: Gate: may “Design” start? (task "design")' in out
    checkpoint.refresh_from_db()
    assert checkpoint.status == Checkpoint.Status.APPROVED and checkpoint.comment == "looks right"
    assert run.tasks.get(subtask__key="design").state != TaskRun.State.WAITING_GATE
    with pytest.raises(CommandError, match="already approved"):
        run_command("approve", str(checkpoint.pk))


@pytest.mark.django_db
@pytest.mark.parametrize(
    "command, args, message",
    [
        ("approve", ["9999"], "No checkpoint with id 9999"),
        ("reject", ["9999", "--comment", "no"], "No checkpoint with id 9999"),
        ("run_status", ["9999"], "No run with id 9999"),
        ("pause", ["9999"], "No run with id 9999"),
        ("resume", ["9999"], "No run with id 9999"),
        ("cancel", ["9999"], "No run with id 9999"),
    ],
)
def test_unknown_ids_are_a_clear_error(command, args, message):
    with pytest.raises(CommandError, match=message):
        run_command(command, *args)


@pytest.mark.django_db(transaction=True)
def test_unknown_id_at_the_terminal_has_no_traceback():
    result = manage("run_status", "9999")
    assert result.returncode == 1
    assert "No run with id 9999" in result.stderr and "Traceback" not in result.stderr


# --- runs, run_status, pause / resume / cancel --------------------------------------------------


@pytest.mark.django_db
def test_runs_lists_runs_newest_first(gated_run, demo_agents, make_plan):
    first, _ = gated_run
    second = runs.launch(make_plan({"only": ("writer", [])}, goal="Second goal"), actor_name="cli:alice")
    out, _ = run_command("runs")
    lines = out.splitlines()
    assert columns(lines[0]) == ["id", "status", "tasks", "cost", "started", "launched by", "goal"]
    assert columns(lines[2])[:4] == [str(second.pk), "running", "0 of 1 succeeded", "$0.00"]
    # Who launched it, as the run page and the runs list say it (from its run.created event).
    assert columns(lines[2])[-2:] == ["alice from the command line", "Second goal"]
    assert columns(lines[3])[:3] == [str(first.pk), "running", "0 of 2 succeeded"]
    assert columns(lines[3])[-2] == "system"  # launched by neither a person nor the command line
    started = second.started_at.astimezone(UTC)  # named as the pages name their times
    assert columns(lines[2])[4] == f"{started:%Y-%m-%d %H:%M:%S} UTC"


@pytest.mark.django_db
def test_runs_counts_only_succeeded_tasks_and_names_the_other_ends(demo_agents, make_plan):
    """A cancelled or skipped task is not "done": "2/5" was printed as "5/5" for a run whose
    other three tasks were cancelled or skipped."""
    plan = make_plan({key: ("writer", []) for key in ("a", "b", "c", "d", "e")})
    run = runs.launch(plan)
    states = {"a": "succeeded", "b": "succeeded", "c": "cancelled", "d": "cancelled", "e": "skipped"}
    for key, state in states.items():
        run.tasks.filter(subtask__key=key).update(state=state)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
    out, _ = run_command("runs")
    assert columns(out.splitlines()[2])[:3] == [str(run.pk), "cancelled", "2 of 5 succeeded · 2 cancelled, 1 skipped"]


@pytest.mark.django_db
def test_a_run_whose_plan_was_rejected_reads_plan_rejected_not_cancelled(demo_agents, make_plan):
    """It read "cancelled", as a run a person cancelled does."""
    run = runs.launch(make_plan({"a": ("writer", [])}), require_plan_approval=True)
    run_command("reject", str(run.checkpoints.get().pk), "--comment", "wrong goal")
    assert columns(run_command("runs")[0].splitlines()[2])[:2] == [str(run.pk), "plan rejected"]
    assert f"Run {run.pk}: plan rejected" in run_command("run_status", str(run.pk))[0]


@pytest.mark.django_db
def test_a_run_a_gates_rejection_failed_says_so_where_its_tasks_are_counted(gated_run):
    """It said "failed · 0 of 2 succeeded · 2 skipped": nothing in the counts said why the run failed."""
    run, checkpoint = gated_run
    run_command("reject", str(checkpoint.pk), "--comment", "design the API first")
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    said = "0 of 2 succeeded · 2 skipped (design rejected at its gate)"
    assert columns(run_command("runs")[0].splitlines()[2])[:3] == [str(run.pk), "failed", said]
    assert f"Progress: {said}" in run_command("run_status", str(run.pk))[0]


@pytest.fixture
def cancelled_run(demo_agents, make_plan):
    """A cancelled run of 22 tasks of which 5 succeeded (the other 17 cancelled)."""
    run = runs.launch(make_plan({f"t{i}": ("writer", []) for i in range(22)}))
    runs.cancel(run)
    succeeded = run.tasks.order_by("subtask__position").values_list("pk", flat=True)[:5]
    run.tasks.filter(pk__in=list(succeeded)).update(state=TaskRun.State.SUCCEEDED)
    return run


@pytest.mark.django_db
def test_watching_a_cancelled_run_shows_what_succeeded_not_100_percent(cancelled_run):
    """The bar ended at "Run 12: 100%|██████████| 22/22 tasks" and the last line said "22/22 done"
    for a cancelled run where 5 of 22 tasks succeeded."""
    messages, bar = StringIO(), Terminal()
    final = console.watch(cancelled_run, messages=messages, bar_stream=bar, poll_s=0)
    last_bar = bar.getvalue().replace("\r", "\n").strip().splitlines()[-1]
    assert last_bar.startswith(f"Run {cancelled_run.pk}:  23%|") and "100%" not in bar.getvalue()
    assert re.search(r"\| 5 of 22 succeeded · 17 cancelled, elapsed [\d.]+ s$", last_bar), last_bar
    assert console.progress_counts(final) == "5 of 22 succeeded · 17 cancelled"


class Terminal(StringIO):
    """A stream that says it is a terminal, as a person's stderr does: the watch draws its bar there."""

    def isatty(self) -> bool:
        return True


@pytest.mark.django_db
def test_a_watch_into_a_log_writes_a_line_per_change_not_a_bar_per_poll(cancelled_run, monkeypatch):
    """Into a file or a pipe (CI), the bar redrawn at every poll was the same line again and again;
    there the watch writes a line when the counts change, and none while they stay the same."""
    task = cancelled_run.tasks.filter(state=TaskRun.State.CANCELLED).first()
    TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.RUNNING)
    Run.objects.filter(pk=cancelled_run.pk).update(status=Run.Status.RUNNING)
    polls = []
    real_progress = console.runs.progress

    def progress(run):  # three polls with a task running, then it is cancelled and the run ends
        polls.append(run.pk)
        if len(polls) == 4:
            TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.CANCELLED)
            Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
        return real_progress(run)

    monkeypatch.setattr(console.runs, "progress", progress)
    log = StringIO()
    console.watch(cancelled_run, messages=StringIO(), bar_stream=log, poll_s=0)

    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and "%|" not in log.getvalue()
    assert len(polls) == 4 and len(lines) == 2, lines
    assert re.fullmatch(
        rf"Run {cancelled_run.pk}: 5 of 22 succeeded · 16 cancelled · 1 running, elapsed [\d.]+ s", lines[0]
    )
    assert re.fullmatch(rf"Run {cancelled_run.pk}: 5 of 22 succeeded · 17 cancelled, elapsed [\d.]+ s", lines[1])


@pytest.mark.django_db
def test_run_status_says_how_much_of_the_elapsed_time_the_run_was_paused(gated_run, stopped_clock):
    """Elapsed is wall-clock time, as on the run page, and says so as the page does: "11 min 00 s"
    after a ten-minute pause read as eleven minutes of work."""
    run, _ = gated_run
    stopped_clock(60)
    runs.pause(run)
    paused_at = Run.objects.get(pk=run.pk).paused_at
    out, _ = run_command("run_status", str(run.pk))
    assert f"Elapsed:  1 min 00 s (paused since {paused_at:%H:%M:%S} UTC)   cost" in out
    stopped_clock(600)
    runs.resume(run)
    out, _ = run_command("run_status", str(run.pk))
    assert "Elapsed:  11 min 00 s (10 min 00 s of it paused)   cost" in out


@pytest.mark.django_db
def test_run_status_counts_tokens_with_thousands_separators(gated_run):
    """Exact counts, as a person checks them against a bill: "1,234,567 in", not "1234567 in"."""
    run, _ = gated_run
    Run.objects.filter(pk=run.pk).update(input_tokens=1_234_567, output_tokens=45_210)
    out, _ = run_command("run_status", str(run.pk))
    assert "tokens 1,234,567 in / 45,210 out   cap" in out


@pytest.mark.django_db
def test_run_status_counts_a_running_attempts_tokens_as_the_run_page_does(demo_agents, make_plan):
    """run_status said "tokens 0 in / 0 out" while the run page's Tokens card said "27 in · 0 out ·
    8 streaming": the input of a running attempt counts from its stream's start on the page, and
    must on the command line too, then count once when the attempt settles."""
    from orchestrator.engine import attempt_ends, execution
    from orchestrator.models import Attempt
    from orchestrator.providers.base import Usage
    from orchestrator.readmodels.totals import totals

    run = runs.launch(make_plan({"a": ("writer", [])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "host:1")
    assert claim is not None
    execution.save_progress([(claim, execution.Progress("Hel", 5, Usage(input_tokens=1_027, output_tokens=8)))])
    page = totals(run)
    assert (page.input_tokens_so_far, page.output_tokens, page.streaming_tokens) == (1_027, 0, 8)
    out, _ = run_command("run_status", str(run.pk))
    assert "tokens 1,027 in / 0 out / 8 streaming   cap" in out

    attempt_ends.complete(claim, "Hello", Usage(input_tokens=1_027, output_tokens=40), advance=False)
    page = totals(run)
    assert (page.input_tokens_so_far, page.output_tokens, page.streaming_tokens) == (1_027, 40, 0)
    out, _ = run_command("run_status", str(run.pk))
    assert "tokens 1,027 in / 40 out   cap" in out


@pytest.mark.django_db
def test_run_status_says_why_a_retried_task_waits_and_what_its_retry_does_as_the_run_page_does(
    demo_agents, make_plan, no_broker, settings
):
    """After a worker was killed, run_status gave every retried task the lost attempt's error
    ("lease expired: worker vm:19929 stopped responding") while the page's row said it waited for
    its retry, and went on saying it while the retry ran on another worker: the note read a past
    attempt's error before what the task does now. The error is the note of a task that ended
    without success, as on the page."""
    from orchestrator.engine import attempt_ends, execution, scheduler
    from orchestrator.models import Attempt
    from orchestrator.providers.base import ProviderError
    from orchestrator.readmodels.tasks import task_views

    settings.GLASSBOX_RETRY_BASE_S = 0.0
    run = runs.launch(make_plan({"a": ("writer", [])}))
    first = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "vm:19929")
    lost = "lease expired: worker vm:19929 stopped responding"
    assert attempt_ends.fail(first, lost, error=ProviderError(lost, retryable=True)) == "retry scheduled"
    waiting = task_rows(run_command("run_status", str(run.pk))[0])["a"]
    (row,) = task_views(run)  # the page's row: its state and its wait reason
    assert waiting[2] == row.state_label and row.wait_reason.startswith("retrying")
    assert waiting[6] == console.shorten(f"waiting: {row.wait_reason}", 70)

    scheduler.advance(run.pk)
    retry = Attempt.objects.get(task_run__run=run, number=2)
    assert execution.claim_attempt(retry.pk, "vm:21741") is not None
    running = task_rows(run_command("run_status", str(run.pk))[0])["a"]
    assert running[2:4] == ["running", "2"]
    assert "stopped responding" not in running[6]


@pytest.mark.django_db
def test_run_status_words_a_cancelled_run_as_the_runs_list_does(cancelled_run):
    out, _ = run_command("run_status", str(cancelled_run.pk))
    assert "Progress: 5 of 22 succeeded · 17 cancelled\n" in out  # it said "22/22 done, 5 succeeded, …"


@pytest.mark.django_db(transaction=True)
def test_a_watch_waits_for_the_attempts_a_cancel_stops_before_it_gives_the_cost(demo_agents, make_plan):
    """The watch's last line gave a cancelled run's cost at the moment it ended ("cost $0.0319"),
    before its running attempts stopped and added what they used (run_status then: "$0.0496")."""
    import threading

    from orchestrator.engine import attempt_ends, execution
    from orchestrator.models import Attempt
    from orchestrator.providers.base import Usage

    run = runs.launch(make_plan({"a": ("writer", [])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "host:1")
    runs.cancel(run)
    out, _ = run_command("run_status", str(run.pk))
    assert "(1 attempt still stopping: not counted yet)" in out

    def its_next_beat():
        attempt_ends.cancel_attempt(claim, Usage(input_tokens=300, output_tokens=100))

    beat = threading.Timer(0.5, its_next_beat)
    beat.start()
    try:
        final = console.watch(run, messages=StringIO(), bar_stream=None, poll_s=0.05)
    finally:
        beat.join()
    assert final.attempts_stopping == 0 and (final.input_tokens, final.output_tokens) == (300, 100)
    assert "still stopping" not in run_command("run_status", str(run.pk))[0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "limit, problem", [("0", "at least 1, got 0"), ("-1", "at least 1, got -1"), ("x", "a whole number, got 'x'")]
)
def test_runs_refuses_a_limit_below_one_naming_the_problem(gated_run, limit, problem):
    """`--limit 0` and `--limit -1` printed one run as if asked for it."""
    with pytest.raises(CommandError, match=f"argument --limit: must be {problem}"):
        run_command("runs", "--limit", limit)


@pytest.mark.django_db
def test_runs_without_runs_says_how_to_start_one():
    out, _ = run_command("runs")
    assert "No runs yet" in out and "launch examples/research_brief.yaml" in out


@pytest.mark.django_db
def test_run_status_shows_every_task_and_pending_checkpoints(gated_run):
    run, checkpoint = gated_run
    out, _ = run_command("run_status", str(run.pk))
    assert f"Run {run.pk}: running" in out
    assert "Progress: 0 of 2 succeeded · 1 needs approval, 1 pending" in out  # as the run page says it
    rows = task_rows(out)
    assert rows["design"][1:4] == ["architect", "needs approval", "0"]  # as the run page says it
    assert rows["build"][1:4] == ["coder", "pending", "0"]
    assert "Pending checkpoints:" in out
    assert f'Checkpoint {checkpoint.pk} waits — Gate: may “Design” start? (task "design")' in out
    assert f"python manage.py approve {checkpoint.pk}" in out


def task_rows(out: str) -> dict[str, list[str]]:
    """run_status's task table as cells by task key (the rows under the table's rule)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("task ")) + 2
    end = lines.index("", start)
    return {row[0]: row for row in map(columns, lines[start:end])}


@pytest.mark.django_db
def test_run_status_words_each_task_state_as_the_run_page_does(demo_agents, make_plan):
    """The task table printed the engine's names ("waiting_gate", "awaiting_review", "ready" for a
    task a cap held back) where the run page says "needs approval", "in review", "held back"; and
    the progress line counted a paused run's held-back tasks as "3 ready"."""
    keys = ("gate", "t0", "review", "t1", "t2", "t3")
    plan = make_plan({key: ("writer", [], {"gate": "before"} if key == "gate" else {}) for key in keys})
    run = runs.launch(plan, cap=1)  # t0 is queued; the cap holds back the others
    run.tasks.filter(subtask__key="review").update(state=TaskRun.State.AWAITING_REVIEW, wait_code="", wait_reason="")
    run.tasks.filter(subtask__key="t3").update(wait_code="", wait_reason="")  # ready, held by nothing
    out, _ = run_command("run_status", str(run.pk))
    states = {key: row[2] for key, row in task_rows(out).items()}
    assert states == {
        "gate": "needs approval",
        "review": "in review",
        "t0": "queued",
        "t1": "held back",
        "t2": "held back",
        "t3": "ready",
    }
    assert "Progress: 0 of 6 succeeded · 1 queued, 1 ready, 2 held back, 1 needs approval, 1 in review\n" in out

    runs.pause(run)
    out, _ = run_command("run_status", str(run.pk))
    assert "Progress: 0 of 6 succeeded · 1 queued, 3 held back, 1 needs approval, 1 in review\n" in out
    assert [row[2] for row in task_rows(out).values()].count("held back") == 3


@pytest.mark.django_db
def test_run_status_and_runs_word_a_run_s_status_as_the_run_page_does(demo_agents, make_plan):
    """They printed "awaiting_approval" and "over_budget" where the run page says "Awaiting
    approval" and "Over budget"."""
    run = runs.launch(make_plan({"only": ("writer", [])}), require_plan_approval=True)
    out, _ = run_command("run_status", str(run.pk))
    assert out.startswith(f"Run {run.pk}: awaiting approval\n")
    assert columns(run_command("runs")[0].splitlines()[2])[:2] == [str(run.pk), "awaiting approval"]
    Run.objects.filter(pk=run.pk).update(status=Run.Status.OVER_BUDGET)
    assert run_command("run_status", str(run.pk))[0].startswith(f"Run {run.pk}: over budget\n")
    assert columns(run_command("runs")[0].splitlines()[2])[:2] == [str(run.pk), "over budget"]


@pytest.mark.django_db
def test_run_status_gives_no_percentage_to_a_task_that_ended_without_success(demo_agents, make_plan):
    """A skipped task read "5%" and a rejected (failed) one "100%", as if done: a task that ended
    otherwise has no progress to give ("—"); a succeeded one is done (100%)."""
    run = runs.launch(make_plan({key: ("writer", []) for key in ("ok", "failed", "skipped", "cancelled", "runs")}))
    for key, state, progress in [
        ("ok", TaskRun.State.SUCCEEDED, 90),
        ("failed", TaskRun.State.FAILED, 100),
        ("skipped", TaskRun.State.SKIPPED, 5),
        ("cancelled", TaskRun.State.CANCELLED, 40),
        ("runs", TaskRun.State.RUNNING, 40),
    ]:
        run.tasks.filter(subtask__key=key).update(state=state, progress=progress, wait_code="", wait_reason="")
    out, _ = run_command("run_status", str(run.pk))
    progress = {key: row[4] for key, row in task_rows(out).items()}
    assert progress == {"ok": "100%", "failed": "—", "skipped": "—", "cancelled": "—", "runs": "40%"}


@pytest.fixture
def tool_checkpoint(demo_agents, make_plan):
    """The coder's running task asks to call workspace:write_file (as engine/tool_approvals opens it)."""
    from orchestrator.engine import execution, tool_approvals

    run = runs.launch(make_plan({"build": ("coder", [])}, goal="Build it"))
    claim = execution.claim_attempt(run.tasks.get().attempts.get().pk, "worker:1")
    long_text = "Figures: " + "1234 " * 80
    asked = tool_approvals.Asked(
        "toolu_7", "write_file", "workspace", "write_file", {"path": "notes/a.md", "text": long_text}
    )
    return run, Checkpoint.objects.get(pk=tool_approvals.open_checkpoint(claim, asked))


@pytest.mark.django_db
def test_a_tool_call_checkpoint_is_named_as_the_page_names_it_with_its_arguments(tool_checkpoint):
    """It was printed as 'review after "build" (…)', with nothing of the call to approve."""
    run, checkpoint = tool_checkpoint
    out, _ = run_command("run_status", str(run.pk))
    line = next(line for line in out.splitlines() if f"Checkpoint {checkpoint.pk} waits" in line)
    assert 'coder wants to call workspace:write_file with { "path": "notes/a.md", "text": "Figures: 1234' in line
    assert "review after" not in line and '(task "build")' in line
    assert len(line) < 400  # the 400-character argument shortened
    out, _ = run_command("reject", str(checkpoint.pk), "--comment", "no drafts")
    assert out.startswith(
        f"Rejected checkpoint {checkpoint.pk} of run {run.pk}: coder wants to call workspace:write_file with {{"
    )


@pytest.mark.django_db
def test_a_decision_from_the_command_line_names_its_decider(tool_checkpoint):
    """It recorded no one: the event's actor was "system", and the agent's path and the exports
    said "rejected (no drafts)" with no "by"."""
    from orchestrator.engine import tool_approvals
    from orchestrator.models import Event
    from orchestrator.readmodels.run_export import checkpoint_records

    run, checkpoint = tool_checkpoint
    run_command("reject", str(checkpoint.pk), "--comment", "no drafts")
    checkpoint.refresh_from_db()
    actor = console.cli_actor()
    assert (checkpoint.decided_by, checkpoint.decided_by_name, checkpoint.decider) == (None, actor, actor)
    event = Event.objects.get(run=run, type="checkpoint.rejected")
    assert (event.actor_kind, event.actor_name) == ("system", actor)
    assert tool_approvals.read(checkpoint.pk).decided_by == actor  # the path's "rejected by cli:… (no drafts)"
    assert checkpoint_records(run)[0].decided_by == actor  # the JSON download and the API


@pytest.mark.django_db
def test_approve_acts_as_no_user_so_the_launcher_may_approve_from_the_command_line(demo_agents, make_plan, personas):
    """The README's promise: separation of duties does not stop the command line's approval."""
    from orchestrator.models import Event

    run = runs.launch(make_plan({"only": ("writer", [])}), launched_by=personas["launcher"], require_plan_approval=True)
    checkpoint = run.checkpoints.get()
    run_command("approve", str(checkpoint.pk))
    checkpoint.refresh_from_db()
    assert (checkpoint.status, checkpoint.decided_by, checkpoint.decider) == ("approved", None, console.cli_actor())
    started = Event.objects.get(run=run, type="run.started")
    assert started.actor_name == console.cli_actor()


@pytest.mark.django_db
def test_plan_gate_and_review_checkpoints_ask_in_the_run_pages_words(gated_run):
    """The command line said 'before "design" (Design)' and 'review after "build" (Build)' for what
    the run page asks as "Gate: may Design start?" and "Review the output of Build"."""
    from orchestrator.engine.checkpoint_questions import question

    run, gate = gated_run
    review = Checkpoint.objects.create(run=run, task_run=run.tasks.get(subtask__key="build"), kind="after")
    plan = Checkpoint(run=run, kind="plan")
    assert console.checkpoint_target(gate) == 'Gate: may “Design” start? (task "design")'
    assert console.checkpoint_target(review) == 'Review the output of “Build” (task "build")'
    assert console.checkpoint_target(plan) == "Approve the plan before anything runs"
    for checkpoint in (gate, review, plan):
        assert console.checkpoint_target(checkpoint).startswith(question(checkpoint).text())
    out, _ = run_command("run_status", str(run.pk))
    assert f'  Checkpoint {gate.pk} waits — Gate: may “Design” start? (task "design"). Decide: ' in out
    out, _ = run_command("approve", str(gate.pk))
    assert out == f'Approved checkpoint {gate.pk} of run {run.pk}: Gate: may “Design” start? (task "design")\n'


@pytest.mark.django_db
def test_approving_a_plan_names_the_version_approved(demo_agents, make_plan):
    run = runs.launch(make_plan({"only": ("writer", [])}), require_plan_approval=True)
    checkpoint = run.checkpoints.get()
    out, _ = run_command("approve", str(checkpoint.pk))
    assert out == (
        f"Approved checkpoint {checkpoint.pk} of run {run.pk}: Approve the plan before anything runs "
        f"(plan version {checkpoint.plan_version})\n"
    )


@pytest.mark.django_db
def test_pause_resume_cancel(gated_run):
    run, _ = gated_run
    out, _ = run_command("pause", str(run.pk))
    assert f"Run {run.pk} paused; status is now paused." in out
    with pytest.raises(CommandError, match="cannot be paused"):
        run_command("pause", str(run.pk))
    out, _ = run_command("resume", str(run.pk))
    assert "status is now running" in out
    out, _ = run_command("cancel", str(run.pk))
    assert "status is now cancelled" in out
    assert set(run.tasks.values_list("state", flat=True)) == {TaskRun.State.CANCELLED}
    with pytest.raises(CommandError, match="already ended"):
        run_command("cancel", str(run.pk))
    # The audit log names the command line's user (it said "system"), the run's summary too.
    from orchestrator.models import Event

    done_here = Event.objects.filter(run=run, type__in=["run.paused", "run.resumed", "task.cancelled"])
    assert {e.actor_name for e in done_here} == {console.cli_actor()} and done_here.count() == 4
    run.refresh_from_db()
    # named as its launch is: "root from the command line", not "cli:root"
    assert run.summary == f"cancelled by {console.cli_actor().removeprefix('cli:')} from the command line"


@pytest.mark.django_db
def test_budget_changes_a_runs_budget_as_the_command_lines_user(demo_agents, make_plan):
    """No command could raise a run's budget, while a run stopped over budget said to."""
    from orchestrator.models import Event

    run = runs.launch(make_plan({"only": ("writer", [])}), budget_usd="1")
    out, _ = run_command("budget", str(run.pk), "2.50")
    assert out == f"Run {run.pk}'s budget is now $2.50.\n"
    event = Event.objects.get(run=run, type="run.budget_changed")
    assert (event.actor_name, event.message) == (
        console.cli_actor(),
        f"budget changed from $1.00 to $2.50 by {console.cli_actor().removeprefix('cli:')} from the command line",
    )
    with pytest.raises(CommandError, match=r"^Budget must have at most 4 decimal places, got \$0\.123456$"):
        run_command("budget", str(run.pk), "0.123456")


@pytest.mark.django_db
def test_retry_skip_and_rerun_control_a_task_by_its_key_as_the_command_lines_user(demo_agents, make_plan):
    """No command could retry a task, while `budget` said a stopped run goes on once one is retried."""
    from orchestrator.models import Event

    run = runs.launch(make_plan({"a": ("writer", []), "b": ("writer", ["a"])}), budget_usd="1")
    TaskRun.objects.filter(run=run, subtask__key="a").update(state=TaskRun.State.FAILED, error="simulated failure")
    TaskRun.objects.filter(run=run, subtask__key="b").update(
        state=TaskRun.State.SKIPPED, skip_cascades=True, error="upstream a did not succeed"
    )
    with pytest.raises(CommandError, match=rf"^Run {run.pk} has no task 'c': its tasks are a, b\.$"):
        run_command("retry", str(run.pk), "c")

    out, _ = run_command("retry", str(run.pk), "a")
    assert out.startswith(f"Task a of run {run.pk} will run again (it is ")
    retried = Event.objects.get(run=run, type="task.retried")
    assert (retried.actor_name, retried.message) == (console.cli_actor(), "a retried")
    assert Event.objects.get(run=run, type="task.reset").actor_name == console.cli_actor()  # b waits again
    with pytest.raises(CommandError, match=r"^Task a is .*: only a failed, cancelled or skipped task can be retried$"):
        run_command("retry", str(run.pk), "a")

    out, _ = run_command("skip", str(run.pk), "b", "--reason", "not needed")
    assert out == f"Task b of run {run.pk} skipped: the tasks after it go on without its output.\n"
    skipped = Event.objects.get(run=run, type="task.skipped")
    assert (skipped.actor_name, skipped.message) == (console.cli_actor(), "not needed")

    TaskRun.objects.filter(run=run).update(state=TaskRun.State.SUCCEEDED)
    Attempt.objects.filter(task_run__run=run).update(state=Attempt.State.SUCCEEDED)
    out, _ = run_command("rerun", str(run.pk), "a")
    assert out.startswith(f"Run {run.pk}: 2 tasks start over (a, b); ")
    assert Event.objects.get(run=run, type="task.rerun").actor_name == console.cli_actor()


# --- what a newcomer meets: each state of a run, refusals in sentences ----------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("command", ["pause", "resume", "cancel"])
def test_a_control_on_an_ended_run_says_it_ended_in_a_sentence(demo_agents, make_plan, command):
    """`pause` on a finished run said "run 3 is succeeded: it cannot be paused" (and the API capitalised
    its refusals, the command line not)."""
    run = runs.launch(make_plan({"only": ("writer", [])}))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    with pytest.raises(CommandError) as refused:
        run_command(command, str(run.pk))
    verb = {"pause": "paused", "resume": "resumed", "cancel": ""}[command]
    assert str(refused.value) == f"Run {run.pk} already ended (succeeded)" + (f": it cannot be {verb}" if verb else "")


@pytest.mark.django_db
def test_a_control_that_does_not_fit_the_state_is_a_capitalised_sentence(gated_run):
    run, _ = gated_run
    with pytest.raises(CommandError) as refused:
        run_command("resume", str(run.pk))
    assert str(refused.value) == f"Run {run.pk} is running: it cannot be resumed"


@pytest.mark.django_db
def test_deciding_a_decided_checkpoint_says_who_decided_it(gated_run):
    """It said "checkpoint 3 was already rejected", naming no one."""
    run, gate = gated_run
    run_command("reject", str(gate.pk), "--comment", "not now")
    with pytest.raises(CommandError) as refused:
        run_command("approve", str(gate.pk))
    assert str(refused.value) == f"Checkpoint {gate.pk} was already rejected by {console.cli_actor()}"


@pytest.mark.django_db
def test_deciding_a_checkpoint_closed_by_a_cancel_says_why_it_closed(demo_agents, make_plan):
    """It said "checkpoint 1 was already closed": closed by whom, or why?"""
    run = runs.launch(make_plan({"only": ("writer", [])}), require_plan_approval=True)
    run_command("cancel", str(run.pk))
    with pytest.raises(CommandError) as refused:
        run_command("approve", str(run.checkpoints.get().pk))
    assert str(refused.value) == (
        f"Checkpoint {run.checkpoints.get().pk} was already closed without a decision: the run was cancelled"
    )


@pytest.mark.django_db
def test_a_run_that_has_not_started_says_so_instead_of_an_elapsed_time(demo_agents, make_plan):
    """run_status said "Elapsed:  0.0s" for a run waiting for its plan's approval, and for one
    cancelled before it started, where the run page says "not started" and "never started"."""
    run = runs.launch(make_plan({"only": ("writer", [])}), require_plan_approval=True)
    out, _ = run_command("run_status", str(run.pk))
    assert "Elapsed:  not started (waits for the plan's approval)   cost $0.00" in out
    run_command("cancel", str(run.pk))
    out, _ = run_command("run_status", str(run.pk))
    assert "Elapsed:  never started   cost $0.00" in out and "0.0s" not in out
    final = console.watch(run, messages=StringIO(), bar_stream=StringIO(), poll_s=0)
    assert final.status == "cancelled"


@pytest.mark.django_db
def test_a_watch_of_a_run_waiting_for_approval_says_it_has_not_started(demo_agents, make_plan, monkeypatch):
    """The bar said "elapsed 0.0s" while the plan waited for its approval."""
    import time as time_module

    run = runs.launch(make_plan({"only": ("writer", [])}), require_plan_approval=True)

    def cancel_while_watching(seconds):  # the watch's first look is drawn; then someone cancels
        monkeypatch.setattr(time_module, "sleep", lambda s: None)
        runs.cancel(run)

    monkeypatch.setattr(time_module, "sleep", cancel_while_watching)
    bar = StringIO()
    console.watch(run, messages=StringIO(), bar_stream=bar, poll_s=0)
    drawn = bar.getvalue().replace("\r", "\n")
    assert "0 of 1 succeeded · 1 pending, not started (waits for the plan's approval)" in drawn
    assert drawn.strip().splitlines()[-1].endswith("0 of 1 succeeded · 1 cancelled, never started")
    assert "elapsed" not in drawn


@pytest.mark.django_db
def test_pause_says_what_goes_on_and_how_to_resume(demo_agents, make_plan):
    """A pause holds back what is not admitted yet; what is running or queued goes on."""
    run = runs.launch(make_plan({"a": ("writer", []), "b": ("writer", []), "c": ("writer", ["a"])}), cap=4)
    assert run.tasks.filter(state=TaskRun.State.QUEUED).count() == 2
    out, _ = run_command("pause", str(run.pk))
    assert out == (
        f"Run {run.pk} paused; status is now paused. No task is admitted until "
        f"`python manage.py resume {run.pk}`; 2 tasks already admitted go on to the end.\n"
    )


@pytest.mark.django_db
def test_cancel_says_an_attempt_is_still_stopping_and_its_cost_not_final(demo_agents, make_plan):
    """`cancel` said "status is now cancelled" while an attempt ran on to its next heartbeat, whose
    use the run's cost did not hold yet."""
    from orchestrator.engine import attempt_ends, execution
    from orchestrator.models import Attempt
    from orchestrator.providers.base import Usage

    run = runs.launch(make_plan({"a": ("writer", [])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "host:1")
    out, _ = run_command("cancel", str(run.pk))
    assert out == (
        f"Run {run.pk} cancelled; status is now cancelled. 1 attempt still stopping: not counted yet; "
        f"`python manage.py run_status {run.pk}` shows the final cost once it has stopped.\n"
    )
    attempt_ends.cancel_attempt(claim, Usage(input_tokens=300, output_tokens=100))
    other = runs.launch(make_plan({"b": ("writer", [])}))
    out, _ = run_command("cancel", str(other.pk))
    assert out == f"Run {other.pk} cancelled; status is now cancelled.\n"  # nothing was running


# --- end to end ------------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_launch_watch_json_runs_the_research_brief_to_success(demo_agents, priced_limit, running_cluster):
    qcluster = running_cluster
    result = manage("launch", RESEARCH_BRIEF, "--watch", "--json", timeout=180)

    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{qcluster.logs()}"
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["status"] == "succeeded"
    assert summary["tasks"] == summary["succeeded"] == 6
    assert summary["failed"] == summary["skipped"] == summary["cancelled"] == 0
    assert summary["cost_usd"] > 0 and summary["input_tokens"] > 0 and summary["output_tokens"] > 0
    assert result.stdout.strip().count("\n") == 0  # stdout holds exactly the JSON line
    # stderr is a pipe here, not a terminal: a line per change of the counts, no bar redrawn.
    assert "Launched run" in result.stderr and f"Run {summary['run']}: 6 of 6 succeeded, elapsed" in result.stderr
    assert "\r" not in result.stderr and "%|" not in result.stderr
    run = Run.objects.get(pk=summary["run"])
    assert set(run.tasks.values_list("state", flat=True)) == {TaskRun.State.SUCCEEDED}


# --- serve -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def read_until(stream, marker: str, timeout: float) -> str:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    pytest.fail(f"{marker!r} not printed within {timeout} s; got:\n{''.join(seen)}")


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_serve_starts_daphne_and_qcluster_and_ctrl_c_stops_both(tmp_path):
    port = free_port()
    errors = open(tmp_path / "serve.err", "w")
    serve = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port), "--workers", "1"],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
        start_new_session=True,
    )
    try:
        banner = read_until(serve.stdout, "Ctrl-C stops both", timeout=60)
        assert f"http://127.0.0.1:{port}/" in banner and "Log in as" in banner
        children = child_pids(serve.pid)
        assert len(children) == 2
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        serve.send_signal(signal.SIGINT)
        assert serve.wait(timeout=60) == 0
        assert "Stopped daphne and qcluster." in serve.stdout.read()
        for pid in children:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        errors.close()


@pytest.mark.django_db(transaction=True)
def test_serve_refuses_a_port_in_use():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = manage("serve", "--port", str(port))
    assert result.returncode == 1
    assert f"Cannot listen on 127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("option", "message"),
    [
        (("--cap", "1001"), "argument --cap: must be a whole number from 1 to 1000, got 1001"),
        (("--budget", "0.12345"), "argument --budget: must have at most 4 decimal places, got $0.12345"),
    ],
)
def test_bad_options_name_the_limit_like_the_dashboard_and_the_api(demo_agents, option, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        run_command("launch", RESEARCH_BRIEF, "--no-cluster-check", *option)
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_refused_launch_saves_nothing(demo_agents, priced_limit):
    with pytest.raises(CommandError, match="Nothing was saved."):
        run_command("launch", RESEARCH_BRIEF, "--no-cluster-check", "--budget", "0.001")
    assert not Plan.objects.exists()


# --- manage.py agent --------------------------------------------------------------------------------


def test_agent_creates_shows_and_changes_an_agent(db):
    out, _ = run_command(
        "agent",
        "critic",
        "--provider",
        "simulated",
        "--max-concurrency",
        "2",
        "--options",
        '{"latency": {"dist": "fixed", "seconds": 0.5}}',
    )
    assert "Agent critic: created" in out and "max concurrency    2" in out
    from orchestrator.models import Agent, Event

    assert Agent.objects.get(name="critic").provider_options == {"latency": {"dist": "fixed", "seconds": 0.5}}
    out, _ = run_command("agent", "critic", "--status", "retired")
    assert "Agent critic: saved" in out and "status             retired" in out
    assert Event.objects.filter(type="agent.status_changed", agent__name="critic").exists()
    # The audit log names the command line's user, not "system", for every change it made.
    made_here = Event.objects.filter(agent__name="critic", type__startswith="agent.")
    assert {e.actor_name for e in made_here} == {console.cli_actor()} and made_here.count() == 3
    out, _ = run_command("agent", "critic")
    assert out.startswith("Agent critic\n")  # the settings were printed without the agent's name
    assert "provider           simulated:sim-1" in out


def test_agent_refuses_invalid_settings_naming_every_problem_and_saves_nothing(db):
    from orchestrator.models import Agent

    with pytest.raises(CommandError) as refused:
        run_command("agent", "critic", "--options", '{"latency": "fast", "failure_rate": 7}', "--timeout", "0")
    message = str(refused.value)
    assert message.startswith("Agent 'critic' not saved, 3 problems:\n")  # a sentence, as every refusal
    assert "provider_options: latency must be an object, got 'fast'" in message
    assert "provider_options: failure_rate must be between 0 and 1, got 7.0" in message
    assert "timeout_s:" in message
    assert not Agent.objects.filter(name="critic").exists()
    with pytest.raises(CommandError, match="--options is not valid JSON"):
        run_command("agent", "critic", "--options", "{latency: fast}")
    with pytest.raises(CommandError) as refused:
        run_command("agent", "nobody")
    assert str(refused.value) == "No agent named 'nobody': give settings (e.g. --provider simulated) to create it."


def test_a_missing_table_suggests_migrate(demo_agents, tmp_path):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE orchestrator_dependency")
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "goal: g\nsubtasks:\n  - {key: a, agent: researcher, title: A}\n"
        "  - {key: b, agent: researcher, title: B, depends_on: [a]}\n"
    )
    with pytest.raises(CommandError, match=r"(?s)cannot save the plan: .*\(has `manage.py migrate` been run\?\)"):
        call_command("import_plan", str(plan))


def test_a_deadlock_is_reported_as_a_conflict_not_a_missing_migration():
    import psycopg
    from django.db import OperationalError

    from orchestrator.management.commands.validate_plan import database_unavailable

    try:
        try:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        except psycopg.Error as cause:
            raise OperationalError(str(cause)) from cause
    except OperationalError as error:
        message = str(database_unavailable(error, doing="save the plan"))
    assert message == (
        "cannot save the plan: deadlock detected (a conflict with concurrent work: nothing was saved; try again)"
    )
    assert "migrate" not in message


@pytest.mark.django_db
def test_launch_waits_for_plan_approval_by_default_once_two_people_may_approve(demo_agents, personas):
    from django.contrib.auth.models import User

    out, _ = run_command("launch", RESEARCH_BRIEF, "--no-cluster-check")
    assert Run.objects.latest("pk").status == Run.Status.RUNNING  # one approver: nobody else could approve

    User.objects.create_superuser("admin2")
    out, _ = run_command("launch", RESEARCH_BRIEF, "--no-cluster-check")
    run = Run.objects.latest("pk")
    checkpoint = run.checkpoints.get()
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert f"It waits for its plan's approval (plan version {checkpoint.plan_version})" in out
    assert f"approve {checkpoint.pk}" in out and "`--no-approval` launches without it." in out

    run_command("launch", RESEARCH_BRIEF, "--no-cluster-check", "--no-approval")
    assert Run.objects.latest("pk").status == Run.Status.RUNNING


@pytest.mark.django_db
def test_launch_approval_flag_asks_for_it_with_a_single_approver(demo_agents):
    run_command("launch", RESEARCH_BRIEF, "--no-cluster-check", "--approval")
    assert Run.objects.latest("pk").status == Run.Status.AWAITING_APPROVAL


# --- output into a closed pipe ---------------------------------------------------------------


def closed_pipe_run(*args: str, lines_read: int = 0, timeout: float = 120) -> tuple[int, str]:
    """Run manage.py with its stdout into a pipe whose reader reads `lines_read` lines and goes
    away, as `manage.py … | head -1` does; return its exit code and stderr."""
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    for _ in range(lines_read):
        child.stdout.readline()
    child.stdout.close()
    stderr = child.stderr.read()
    return child.wait(timeout=timeout), stderr


@pytest.mark.django_db(transaction=True)
def test_a_command_whose_reader_went_away_exits_1_without_a_traceback(gated_run):
    code, stderr = closed_pipe_run("runs")
    assert (code, stderr) == (1, "")


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_launch_into_head_1_stops_quietly_and_the_run_goes_on(demo_agents, priced_limit, running_cluster):
    code, stderr = closed_pipe_run("launch", RESEARCH_BRIEF, "--watch", lines_read=1)

    assert code == 1
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    run = Run.objects.get()
    wait_until(lambda: Run.objects.get(pk=run.pk).status == Run.Status.SUCCEEDED, 120, "the run to go on to its end")


@pytest.mark.django_db
def test_run_status_notes_say_what_a_running_agent_does_and_what_a_task_waits_for(demo_agents, make_plan):
    """The note of a task mid tool call was empty (the page's row says "step 2 · calling …"), and a
    tool call's wait read "waiting: waits for a person to approve a call of …"."""
    from orchestrator import events
    from tests.orchestrator.readmodels.conftest import start

    run = runs.launch(make_plan({"calc": ("researcher", []), "held": ("writer", [])}))
    calc, held = (run.tasks.get(subtask__key=key) for key in ("calc", "held"))
    start(calc)
    events.record(
        "tool.call", task=calc, payload={"step": 2, "call_id": "t", "tool": "workspace:calculate", "attempt": 1}
    )
    TaskRun.objects.filter(pk=held.pk).update(
        state=TaskRun.State.READY, wait_reason="waits for a person to approve a call of workspace:calculate"
    )
    rows = task_rows(run_command("run_status", str(run.pk))[0])
    assert rows["calc"][-1] == "step 2 · calling workspace:calculate"
    assert rows["held"][-1] == "waits for a person to approve a call of workspace:calculate"
    TaskRun.objects.filter(pk=held.pk).update(wait_reason="run cap reached (1 queued or running)")
    assert (
        task_rows(run_command("run_status", str(run.pk))[0])["held"][-1]
        == "waiting: run cap reached (1 queued or running)"
    )


@pytest.mark.django_db
def test_run_status_says_which_models_have_no_price_as_the_run_page_does(make_agent, make_plan, priced_limit):
    """run_status said "cost $0.00 of $10.00 budget" after an unpriced model used 1,212 tokens:
    it says what the cost leaves out, in the run page's words."""
    from orchestrator.models import TaskRun
    from orchestrator.readmodels.totals import totals

    make_agent("researcher", model="sim-unpriced")
    make_agent("writer")  # sim-1, priced
    run = runs.launch(make_plan({"a": ("researcher", []), "w": ("writer", [])}), budget_usd="10")
    TaskRun.objects.filter(run=run, subtask__key="a").update(state="succeeded", input_tokens=1_000, output_tokens=212)
    TaskRun.objects.filter(run=run, subtask__key="w").update(state="succeeded", input_tokens=900, output_tokens=90)
    said = (
        "simulated:sim-unpriced has no price: its 1,212 tokens are not in the cost, and the budget cannot stop"
        " them (set prices in the admin under provider limits)"
    )
    out, _ = run_command("run_status", str(run.pk))
    assert f"Cost:     {said}" in out.splitlines()
    assert totals(run).unpriced_note == said  # as the run page's Cost card says it


@pytest.mark.django_db
def test_run_status_of_a_run_on_priced_models_says_nothing_of_prices(make_agent, make_plan, priced_limit):
    from orchestrator.models import TaskRun

    make_agent("writer")
    run = runs.launch(make_plan({"w": ("writer", [])}), budget_usd="10")
    TaskRun.objects.filter(run=run).update(state="succeeded", input_tokens=900, output_tokens=90)
    out, _ = run_command("run_status", str(run.pk))
    assert "no price" not in out and "Cost:" not in out
