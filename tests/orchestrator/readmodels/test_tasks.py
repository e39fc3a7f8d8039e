"""The run page's tasks: display states, labels and live token burn."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Model

from orchestrator.engine import runs
from orchestrator.models import Attempt, Checkpoint, TaskRun
from orchestrator.readmodels.live_tokens import NO_LIVE_TOKENS, live_tokens
from orchestrator.readmodels.tasks import (
    NO_NOTE,
    RETRYING,
    TASK_TABLE_WHOLE,
    WAITING,
    TaskNote,
    TaskView,
    counts_by_run,
    display_state,
    lost_note,
    lost_said,
    outcome_of,
    outcome_text,
    rejected_at_gate,
    task_states,
    task_table_scroll_cue,
    task_view,
    task_views,
)

from .conftest import start

State = TaskRun.State


def test_display_state_separates_held_back_from_ready():
    assert display_state(State.READY, "") == State.READY
    assert display_state(State.READY, "run cap reached (4 running)") == WAITING
    assert display_state(State.THROTTLED, "provider sim limit") == State.THROTTLED
    assert display_state(State.QUEUED, "stale reason") == State.QUEUED


def test_a_task_waiting_for_its_retry_is_retrying_not_held_back():
    """Tasks waiting for a retry were "held back", the state of those a cap or an agent's limits hold."""
    retry = "retrying from 17:57:16 UTC after: simulated failure"
    assert display_state(State.READY, retry, "retry_backoff") == RETRYING
    assert display_state(State.READY, "run cap reached (4 running)", "run_cap") == WAITING


def test_a_running_task_waiting_for_a_tool_calls_approval_needs_approval():
    """Its graph node was drawn running (blue), not as needing approval."""
    waits = "waits for a person to approve a call of workspace:write_file"
    assert display_state(State.RUNNING, waits, "tool_approval") == State.WAITING_GATE
    assert display_state(State.RUNNING, "", "") == State.RUNNING


def test_the_counts_of_retrying_held_back_and_approval_agree_with_the_rows(launched):
    """The runs list, run_status and the rows count a retrying task, a held back one and one whose
    call waits for approval under the same words."""
    run = launched({"a": ("researcher", []), "b": ("researcher", []), "c": ("researcher", [])})
    for key, state, reason, code in (
        ("a", State.READY, "retrying from 17:57:16 UTC after: boom", "retry_backoff"),
        ("b", State.READY, "run cap reached (1 running)", "run_cap"),
        ("c", State.RUNNING, "waits for a person to approve a call of workspace:write_file", "tool_approval"),
    ):
        TaskRun.objects.filter(run=run, subtask__key=key).update(state=state, wait_reason=reason, wait_code=code)
    labels = {view.key: view.state_label for view in task_views(run)}
    assert labels == {"a": "retrying", "b": "held back", "c": "needs approval"}
    assert counts_by_run([run.pk])[run.pk] == {RETRYING: 1, WAITING: 1, State.WAITING_GATE: 1}
    progress = runs.progress(run)
    assert (progress.retrying, progress.held_back, progress.ready_now) == (1, 1, 0)
    assert (progress.running_now, progress.needs_approval) == (0, 1)


def test_the_runs_held_back_count_is_the_rows_it_shows_held_back(launched):
    """run_status's and the API's "held back" count the tasks the page's rows say "held back"."""
    run = launched({"a": ("researcher", []), "b": ("researcher", []), "c": ("researcher", [])})
    reason = "run cap reached (1 running)"
    for state in State.values:
        for a_reason, b_reason in (("", ""), (reason, ""), (reason, reason)):
            TaskRun.objects.filter(run=run, subtask__key="a").update(state=state, wait_reason=a_reason)
            TaskRun.objects.filter(run=run, subtask__key="b").update(state=state, wait_reason=b_reason)
            TaskRun.objects.filter(run=run, subtask__key="c").update(state=State.READY, wait_reason=reason)
            shown = sum(view.state_label == "held back" for view in task_views(run))
            assert runs.progress(run).held_back == shown, (state, a_reason, b_reason)


def test_outcome_of_tasks_counts_the_successes_and_names_every_other_end():
    """What the Result says of its final tasks: a task still running counts in the total only."""
    tasks = [TaskRun(state=state) for state in (State.SUCCEEDED, State.FAILED, State.RUNNING, State.SKIPPED)]
    assert outcome_of(tasks) == "1 of 4 succeeded · 1 failed, 1 skipped"
    assert outcome_of([]) == "0 of 0 succeeded"


def test_the_outcome_names_the_tasks_a_person_rejected_at_their_gate():
    """A run a gate's rejection failed counted "2 skipped" beside its "Failed", no task failed."""
    counts = {State.SUCCEEDED: 1, State.SKIPPED: 2}
    assert outcome_text(counts, 3, ["a"]) == "1 of 3 succeeded · 2 skipped (a rejected at its gate)"
    assert outcome_text(counts, 3, ["a", "b"]) == "1 of 3 succeeded · 2 skipped (a, b rejected at their gate)"
    assert outcome_text(counts, 3) == "1 of 3 succeeded · 2 skipped"


def test_a_task_rejected_at_its_gate_is_named_until_a_later_gate_approves_it(launched):
    """A retried task asks again with a new gate; the first one's rejection stays on record, and
    must not name the task once a later gate approved it (skipped since below a failure)."""
    run = launched({"up": ("researcher", []), "a": ("researcher", ["up"], {"gate": "before"})})
    a = run.tasks.get(subtask__key="a")
    Checkpoint.objects.create(run=run, task_run=a, kind="before", status="rejected", comment="not now")
    TaskRun.objects.filter(pk=a.pk).update(state=State.SKIPPED, skip_cascades=True)
    assert rejected_at_gate([run.pk]) == {run.pk: ["a"]}
    Checkpoint.objects.create(run=run, task_run=a, kind="before", status="approved")
    assert rejected_at_gate([run.pk]) == {}


def test_task_views_carry_display_state_and_live_token_burn(launched):
    run = launched({"scope": ("researcher", []), "b": ("researcher", [])}, cap=1)
    scope, b = run.tasks.get(subtask__key="scope"), run.tasks.get(subtask__key="b")
    attempt = start(scope)
    TaskRun.objects.filter(pk=b.pk).update(state=State.READY, wait_reason="run cap reached (1 running)")
    Attempt.objects.filter(pk=attempt.pk).update(output_tokens=17)  # what the host last saved of its stream
    views = {v.key: v for v in task_views(run)}
    assert views["scope"].display_state == State.RUNNING
    assert views["scope"].live_output_tokens == 17
    assert views["scope"].tokens == 17

    # Once the attempt ends its tokens are the task's own, counted once.
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.SUCCEEDED)
    TaskRun.objects.filter(pk=scope.pk).update(state=State.SUCCEEDED, output_tokens=17)
    views = {v.key: v for v in task_views(run)}
    assert (views["scope"].live_output_tokens, views["scope"].tokens) == (0, 17)
    assert views["b"].display_state == WAITING
    assert views["b"].state_label == "held back"


def test_task_views_read_three_statements_whatever_the_run_size(launched, django_assert_num_queries):
    """The live view builds every task's view at each frame of a large run: the tasks with their
    subtask and agent in one statement (only what a view shows: a field it left out would cost a
    statement per task), the streaming tokens and the agents' activities in one each."""
    run = launched({key: ("researcher" if n % 2 else "writer", []) for n, key in enumerate("abcdef")}, cap=6)
    for task in run.tasks.all()[:3]:
        start(task)
    with django_assert_num_queries(3):
        views = task_views(run)
    assert len(views) == 6
    assert {(v.key, v.title, v.agent, v.gate) for v in views} == {
        (t.subtask.key, t.subtask.title, t.agent.name, t.subtask.gate)
        for t in run.tasks.select_related("subtask", "agent")
    }
    assert [v.display_state for v in views].count(State.RUNNING) == 3


def test_task_states_say_what_the_views_say_in_two_statements(launched, django_assert_num_queries):
    """The totals and lanes read TaskStates at each live frame instead of every task's view: each
    state must agree with the task's view on everything they show."""
    run = launched({"scope": ("researcher", []), "a": ("writer", ["scope"]), "b": ("researcher", [])}, cap=1)
    scope, b = run.tasks.get(subtask__key="scope"), run.tasks.get(subtask__key="b")
    attempt = start(scope)
    Attempt.objects.filter(pk=attempt.pk).update(input_tokens=9, output_tokens=17)
    TaskRun.objects.filter(pk=scope.pk).update(progress=40, input_tokens=5, cost_usd="0.25")
    TaskRun.objects.filter(pk=b.pk).update(state=State.READY, wait_reason="run cap reached (1 running)")
    with django_assert_num_queries(2):
        states = task_states(run)
    shown = ("pk", "key", "title", "agent_id", "state", "display_state", "is_terminal", "progress", "tokens")
    shown += ("live_input_tokens", "live_output_tokens", "cost_usd", "attempt_count", "started_at", "finished_at")
    assert [tuple(getattr(s, f) for f in shown) for s in states] == [
        tuple(getattr(v, f) for f in shown) for v in task_views(run)
    ]
    by_key = {s.key: s for s in states}
    assert (by_key["scope"].tokens, by_key["scope"].progress) == (5 + 9 + 17, 40)
    assert by_key["b"].display_state == WAITING


def test_task_views_are_read_as_plain_values_and_say_what_each_task_row_says(launched, monkeypatch):
    """A fan-out's frame builds the view of ~200 tasks: they are read as plain values, never as
    model instances (three per task, half of that frame's time), and say what the view of each
    TaskRun says, in every kind of state."""
    tasks = {key: ("researcher", []) for key in ("done", "running", "held", "failed", "rerun")}
    tasks["gated"] = ("writer", [], {"gate": "before", "title": 'Say "hi" & <b>bye</b>'})
    run = launched(tasks, cap=1)
    by_key = {t.subtask.key: t for t in run.tasks.select_related("subtask")}
    attempt = start(by_key["running"])
    Attempt.objects.filter(pk=attempt.pk).update(output_tokens=9)
    changes = {
        "done": {"state": State.SUCCEEDED, "progress": 60, "output": "the answer", "cost_usd": Decimal("0.0123")},
        "running": {"progress": 40, "input_tokens": 300},
        "held": {"state": State.READY, "wait_reason": "run cap reached (1 running)"},
        "failed": {"state": State.FAILED, "error": "boom", "progress": 5, "attempt_count": 3},
        "rerun": {
            "earlier_attempts": 2,
            "earlier_tokens": 70,
            "earlier_cost_usd": Decimal("0.002"),
            "input_tokens": 90,
        },
    }
    for key, fields in changes.items():
        TaskRun.objects.filter(pk=by_key[key].pk).update(**fields)
    tasks_now = list(run.tasks.select_related("subtask", "agent").order_by("subtask__position", "pk"))
    live = live_tokens(tasks_now)
    expected = [TaskView.of(task, live.get(task.pk, NO_LIVE_TOKENS), "") for task in tasks_now]

    def no_instances(cls, *args, **kwargs):
        raise AssertionError(f"task_views built a {cls.__name__} instance")

    with monkeypatch.context() as patched:
        patched.setattr(Model, "from_db", classmethod(no_instances))
        views = task_views(run)
        one = task_views(run, [by_key["held"].pk])
    running = next(v for v in views if v.key == "running")
    assert running.activity == "step 1 · thinking" and running.tokens == 300 + 9
    assert [v.model_copy(update={"activity": ""}) for v in views] == expected
    assert one == [v for v in views if v.key == "held"]
    assert task_view(by_key["done"]).progress == 100
    assert [(v.display_state, v.progress_text) for v in views if v.key in ("held", "failed")] == [
        (WAITING, "0%"),
        (State.FAILED, "—"),
    ]


def test_a_tasks_note_says_why_it_is_where_it_is_as_its_row_and_run_status_say_it(launched):
    """One rule for the run page's row and run_status: what its agent does now, else what it waits
    for (not while queued), else the error of a task that ended without success, else its summary.
    A retried task keeps its last attempt's error: the note says why it waits and what it does."""
    keys = ("running", "waiting", "queued", "failed", "retry_waits", "retry_runs", "succeeded")
    run = launched({key: ("researcher", []) for key in keys}, cap=7)
    by_key = {t.subtask.key: t for t in run.tasks.select_related("subtask")}
    for key in ("running", "retry_runs"):
        start(by_key[key])
    lost = "lease expired: worker vm:19929 stopped responding"
    retrying = f"retrying from 09:14:03 UTC after: {lost}"
    changes = {
        "waiting": {"state": State.READY, "wait_reason": "run cap reached (1 running)"},
        "queued": {"state": State.QUEUED, "wait_reason": "run cap reached (1 running)"},
        "failed": {"state": State.FAILED, "error": "boom", "summary": ""},
        "retry_waits": {"state": State.READY, "wait_reason": retrying, "error": lost, "attempt_count": 1},
        "retry_runs": {"error": lost},
        "succeeded": {"state": State.SUCCEEDED, "summary": "three sources found", "error": "timed out"},
    }
    for key, fields in changes.items():
        TaskRun.objects.filter(pk=by_key[key].pk).update(**{"wait_reason": "", **fields})
    notes = {view.key: view.note for view in task_views(run)}
    assert notes == {
        "running": TaskNote("activity", "step 1 · thinking"),
        "waiting": TaskNote("waiting", "run cap reached (1 running)"),
        "queued": NO_NOTE,  # it was let through: the cap it waited for is past
        "failed": TaskNote("error", "boom"),
        "retry_waits": TaskNote("waiting", retrying),
        "retry_runs": TaskNote("activity", "step 1 · thinking"),
        "succeeded": TaskNote("summary", "three sources found"),
    }


def test_a_task_table_says_it_scrolls_only_when_it_holds_more_than_it_shows_whole():
    assert task_table_scroll_cue(6) == ""
    assert task_table_scroll_cue(TASK_TABLE_WHOLE) == ""
    assert task_table_scroll_cue(20) == "20 tasks in all: scroll the table to see every one"


def test_a_tasks_attempts_say_how_many_were_lost_with_their_worker(launched, settings):
    """`TaskRun.lost_count` was shown nowhere: a task tried again after its worker died read
    "Attempts 2" as if it had failed once, and nothing said the loss spent no retry."""
    settings.GLASSBOX_MAX_LOST_ATTEMPTS = 3
    run = launched({"a": ("researcher", []), "b": ("researcher", [])})
    a = run.tasks.get(subtask__key="a")
    Attempt.objects.filter(task_run=a).update(state=Attempt.State.LOST)
    Attempt.objects.create(task_run=a, number=2)
    TaskRun.objects.filter(pk=a.pk).update(attempt_count=2, lost_count=1)
    views = {view.key: view for view in task_views(run)}
    assert (views["a"].lost_count, views["a"].attempts_text) == (1, "2 · 1 lost")
    assert task_view(run.tasks.get(pk=a.pk)).attempts_text == "2 · 1 lost"
    assert views["b"].attempts_text == str(views["b"].attempt_count)  # none lost: the count alone
    assert lost_said(2) == "2 lost when their workers stopped"

    attempts = list(a.attempts.order_by("number"))
    rule = (
        "A lost attempt spends none of the task's retries; the task fails once 3 are lost "
        "(GLASSBOX_MAX_LOST_ATTEMPTS; a retry or a re-run counts again from 0)."
    )
    assert lost_note(2, 1, attempts) == f"2 attempts · 1 lost when its worker stopped. {rule}"
    assert lost_note(2, 0, attempts) == ""
    # A person's retry counts again from 0: the attempts lost before it are not in the count.
    earlier = Attempt(task_run=a, number=3, state=Attempt.State.LOST)
    assert lost_note(3, 1, [*attempts, earlier]).startswith(
        "3 attempts · 1 lost when its worker stopped since its last retry or re-run. A lost"
    )
