"""The declared state tables: every declared move is allowed, anything else is refused by name."""

import pytest

from orchestrator.engine import runs, transitions
from orchestrator.engine.transitions import RUN_MOVES, TASK_MOVES, IllegalTransition
from orchestrator.models import Run, TaskRun

State = TaskRun.State


def test_every_state_has_a_row_in_its_table():
    assert set(TASK_MOVES) == set(State.values)
    assert set(RUN_MOVES) == set(Run.Status.values)


@pytest.mark.parametrize("old,new", [(old, new) for old, targets in TASK_MOVES.items() for new in sorted(targets)])
def test_every_declared_task_move_is_allowed(old, new):
    assert transitions.allowed(old, new)


def test_terminal_states_move_only_by_a_persons_retry_skip_or_rerun():
    assert TASK_MOVES[State.SUCCEEDED] == frozenset({State.PENDING})  # re-run from here
    for state in (State.FAILED, State.SKIPPED, State.CANCELLED):
        assert State.READY in TASK_MOVES[state]
    assert not transitions.allowed(State.SUCCEEDED, State.RUNNING)
    assert not transitions.allowed(State.PENDING, State.RUNNING)  # never without being queued


def test_sources_lists_every_state_that_may_move_to_a_state():
    # queued: a worker claims it; ready or throttled: claimed at admission by the host that admitted it
    assert set(transitions.sources(State.RUNNING)) == {State.QUEUED, State.READY, State.THROTTLED, State.RUNNING}
    assert State.SUCCEEDED not in transitions.sources(State.CANCELLED)


@pytest.mark.django_db
def test_an_undeclared_move_is_refused_naming_the_task_and_both_states(demo_agents, make_plan):
    run = runs.launch(make_plan({"research_a": ("researcher", [])}))
    task = run.tasks.select_related("subtask").get()
    TaskRun.objects.filter(pk=task.pk).update(state=State.SUCCEEDED)
    task.refresh_from_db()
    with pytest.raises(IllegalTransition, match="task research_a cannot move from succeeded to running"):
        transitions.move(task, State.RUNNING)
    task.refresh_from_db()
    assert task.state == State.SUCCEEDED  # nothing written


@pytest.mark.django_db
def test_a_declared_move_saves_the_fields_given(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    task = run.tasks.get()
    transitions.move(task, State.CANCELLED, error="stopped")
    task.refresh_from_db()
    assert (task.state, task.error) == (State.CANCELLED, "stopped")


@pytest.mark.django_db
def test_a_conditional_move_only_takes_rows_still_in_a_state_it_may_move_from(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    task = run.tasks.get()
    assert task.state == State.QUEUED
    claim = TaskRun.objects.filter(pk=task.pk)
    assert transitions.move_where(claim, State.RUNNING, from_states=[State.QUEUED], lease_owner="w1") == 1
    assert transitions.move_where(claim, State.RUNNING, from_states=[State.QUEUED], lease_owner="w2") == 0
    task.refresh_from_db()
    assert task.lease_owner == "w1"  # the second claim found the task taken
    with pytest.raises(IllegalTransition, match="cannot move from succeeded to running"):
        transitions.move_where(claim, State.RUNNING, from_states=[State.SUCCEEDED])


@pytest.mark.django_db
def test_run_status_moves_are_checked_too(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    runs.cancel(run)
    run.refresh_from_db()
    with pytest.raises(IllegalTransition, match=f"run {run.pk} cannot move from cancelled to running"):
        transitions.move(run, Run.Status.RUNNING)


@pytest.mark.django_db
def test_a_task_that_stops_waiting_for_admission_loses_its_wait_reason(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", [])}), cap=1)
    waiting = run.tasks.get(state=State.READY)
    assert waiting.wait_code == "run_cap" and waiting.wait_reason
    transitions.move(waiting, State.CANCELLED, error="stopped")
    waiting.refresh_from_db()
    assert (waiting.wait_code, waiting.wait_reason) == ("", "")


@pytest.mark.django_db
def test_a_conditional_move_to_a_final_state_clears_wait_reasons_too(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", [])}), cap=1)
    transitions.move_where(run.tasks.all(), State.CANCELLED, error="stopped")
    assert set(run.tasks.values_list("wait_code", "wait_reason")) == {("", "")}


def test_a_move_via_a_state_is_checked_against_both_of_its_halves():
    queryset = TaskRun.objects.none()
    # pending → ready → queued: each half is declared, so the one write is allowed...
    assert transitions.move_where(queryset, State.QUEUED, from_states=[State.PENDING], via=State.READY) == 0
    # ... but not without `via`, and not through a state that cannot lead there
    with pytest.raises(IllegalTransition, match="cannot move from pending to queued"):
        transitions.move_where(queryset, State.QUEUED, from_states=[State.PENDING])
    with pytest.raises(IllegalTransition, match="cannot move from succeeded to running"):
        transitions.move_where(queryset, State.RUNNING, from_states=[State.SUCCEEDED], via=State.READY)


def paused_time(run: Run) -> tuple[bool, float]:
    run.refresh_from_db()
    return run.paused_at is not None, run.paused_s


@pytest.mark.django_db
def test_a_run_keeps_the_time_it_spent_paused_whatever_ends_the_pause(demo_agents, make_plan, stopped_clock):
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    assert paused_time(run) == (False, 0.0)
    runs.pause(run)
    assert paused_time(run) == (True, 0.0)  # under way: counted when it ends
    stopped_clock(600)
    runs.resume(run)
    assert paused_time(run) == (False, 600.0)
    stopped_clock(30)
    runs.pause(run)
    stopped_clock(45)
    runs.cancel(run)  # a cancel ends the pause too
    assert paused_time(run) == (False, 645.0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_broker")
def test_a_paused_run_that_ends_on_its_own_stops_counting_its_pause(demo_agents, make_plan, stopped_clock):
    from tests.conftest import run_here

    run = runs.launch(make_plan({"a": ("researcher", [])}))  # its attempt is queued
    runs.pause(run)
    stopped_clock(90)
    run_here(run)  # the attempt already handed out runs to its end and ends the run
    assert run.status == Run.Status.SUCCEEDED
    assert paused_time(run) == (False, 90.0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_broker")
def test_a_reopened_run_keeps_the_time_it_lay_ended(make_agent, make_plan, stopped_clock):
    from tests.conftest import fast_latency, run_here

    make_agent("breaker", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=0)
    run = run_here(runs.launch(make_plan({"a": ("breaker", [])})))
    assert run.status == Run.Status.FAILED and run.ended_s == 0.0
    stopped_clock(3600)
    runs.retry_task(run.tasks.get())  # a person's retry reopens it an hour later
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.ended_s == 3600.0 and paused_time(run) == (False, 0.0)
