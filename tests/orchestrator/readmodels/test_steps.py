"""A task's path read back from the step events the agent loop reports: calls joined with their
approvals and results, refusals, model calls and stops, waits for the provider's budget, per
attempt; the whole results kept for the attempt's detail; and what the agent is doing now, per
state transition."""

from __future__ import annotations

import pytest

from orchestrator import events
from orchestrator.engine import agent_steps, runs
from orchestrator.engine.agent_steps import Decision
from orchestrator.models import Attempt, TaskRun
from orchestrator.readmodels.steps import activities, attempt_path, attempt_paths, current_activity, task_path
from orchestrator.readmodels.tasks import task_views
from orchestrator.tools import full_results
from tests.orchestrator.engine.test_agent_loop import FakeTools, ScriptedProvider, answer, echo, tool_turn
from tests.scripted_agent_path import loop_steps, record_loop, record_step

from .conftest import start


def kinds(path) -> list[tuple[int, str]]:
    return [(row.step, row.kind) for row in path]


def test_the_path_joins_each_call_with_its_approval_and_result(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    tools = FakeTools(echo=(echo, True))
    provider = ScriptedProvider(tool_turn(("echo", {"text": "hi"}), ("rm", {"path": "/"})), answer("Done with it."))
    record_loop(task, provider, tools, decisions=[Decision(True, "fine", "alice")])
    path = task_path(task)
    assert kinds(path) == [(1, "text"), (1, "model"), (1, "call"), (1, "refused"), (2, "text"), (2, "model")]
    call = path[2]
    assert (call.tool, call.server, call.arguments, call.approved, call.comment, call.decided_by) == (
        "echo",
        "srv",
        {"text": "hi"},
        True,
        "fine",
        "alice",
    )
    assert (call.result, call.is_error, call.done, call.result_cut) == ("echo: hi", False, True, False)
    assert call.duration_s is not None and call.approval_wait_s is not None
    assert call.arguments_text == '{\n  "text": "hi"\n}'
    assert path[3].tool == "rm" and path[3].is_error and "not granted" in path[3].text
    assert path[4].text == "Done with it."
    assert (path[1].stop_reason, path[1].stop_words) == ("tool_use", "asked for tools")
    assert path[5].stop_words == "ended its turn" and path[5].input_tokens == 10
    assert len({row.dom_id for row in path}) == len(path)
    sentences = list(task.events.filter(type="tool.call").values_list("message", flat=True))
    assert sentences == ['step 1 · called echo (waiting for approval) with {"text": "hi"}']


def test_a_rejected_call_says_who_rejected_it_and_the_model_was_told(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    provider = ScriptedProvider(tool_turn(("echo", {"text": "x"})), answer("ok"))
    record_loop(task, provider, FakeTools(echo=(echo, True)), decisions=[Decision(False, "not now", "bob")])
    call = next(row for row in task_path(task) if row.kind == "call")
    assert (call.approved, call.decided_by, call.comment, call.is_error) == (False, "bob", "not now", True)
    assert "rejected" in call.result


def test_a_loop_stopped_by_a_limit_ends_its_path_with_the_reason(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    provider = ScriptedProvider(tool_turn(("echo", {"text": "1"})), tool_turn(("echo", {"text": "2"})))
    record_loop(task, provider, FakeTools(echo=(echo, False)), max_steps=2)
    last = task_path(task)[-1]
    assert (last.kind, last.stop_reason) == ("stopped", "max_steps")


def test_paths_are_kept_per_attempt(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    record_loop(task, ScriptedProvider(answer("First try.")), FakeTools(), attempt=1)
    record_loop(task, ScriptedProvider(answer("Second try.")), FakeTools(), attempt=2)
    assert [row.text for row in task_path(task, attempt=2) if row.kind == "text"] == ["Second try."]
    assert len(task_path(task)) == 4
    paths = attempt_paths(task)
    # Attempt 1 exists as a row (launched); attempt 2 only in its events: both are listed, in order.
    assert [(p.number, [r.text for r in p.rows if r.kind == "text"]) for p in paths] == [
        (1, ["First try."]),
        (2, ["Second try."]),
    ]
    assert paths[0].attempt is not None and paths[1].attempt is None
    assert len({p.dom_id for p in paths}) == 2


def test_a_long_result_is_previewed_in_its_event_and_kept_whole_for_the_attempt(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()

    async def long(text: str = "") -> str:
        return "".join(f"line {i}\n" for i in range(600))  # about 5,000 characters

    tools = FakeTools(long=(long, False))
    record_loop(task, ScriptedProvider(tool_turn(("long", {})), answer("ok")), tools)
    event = task.events.get(type="tool.result")
    assert len(event.payload["result"]) <= agent_steps.PREVIEW_CHARS + 1
    call = next(row for row in task_path(task) if row.kind == "call")
    assert call.result_cut and call.panel_cuts_result and len(call.result_shown) <= 801
    whole = next(row for row in attempt_path(task, 1, whole_results=True).rows if row.kind == "call").whole
    assert whole is not None and whole.startswith("line 0\n") and whole.endswith("line 599\n")
    assert len(whole) == call.result_chars
    # Kept beside the run's working directory, never inside it (not an artifact, out of the tools' reach).
    kept = list((artifacts_dir / "tool-results").rglob("*.txt"))
    assert len(kept) == 1 and f"run-{run.pk}" in kept[0].parts


def test_a_short_result_is_whole_in_its_event_and_no_file_is_written(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    record_loop(
        task, ScriptedProvider(tool_turn(("echo", {"text": "hi"})), answer("ok")), FakeTools(echo=(echo, False))
    )
    row = next(r for r in attempt_path(task, 1, whole_results=True).rows if r.kind == "call")
    assert row.whole == "echo: hi"
    assert not (artifacts_dir / "tool-results").exists()


def test_a_cut_result_whose_file_is_missing_says_so_rather_than_passing_the_preview_off_as_whole(
    launched, artifacts_dir
):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    payload = {"step": 1, "call_id": "c1", "tool": "big", "attempt": 1}
    events.record("tool.call", task=task, payload=payload)
    events.record("tool.result", task=task, payload={**payload, "result": "x" * 2000 + "…", "result_chars": 9000})
    row = next(r for r in attempt_path(task, 1, whole_results=True).rows if r.kind == "call")
    assert row.result_cut and row.whole is None


def test_the_preview_size_the_store_assumes_is_the_loops():
    assert full_results.PREVIEW_CHARS == agent_steps.PREVIEW_CHARS


@pytest.mark.parametrize("call_id", ["../../etc/passwd", "a/b", "x" * 300, "toolu_01AbC-9"])
def test_a_kept_result_stays_in_its_attempts_folder_whatever_the_call_id(artifacts_dir, call_id):
    assert full_results.keep(1, 2, 3, call_id, "y" * 3000)
    kept = list((artifacts_dir / "tool-results").rglob("*.txt"))
    assert len(kept) == 1 and kept[0].parent == (artifacts_dir / "tool-results/run-1/task-2/attempt-3").resolve()
    assert full_results.read(1, 2, 3, call_id) == "y" * 3000
    assert full_results.read(1, 2, 3, call_id + "z") is None


# --- What the agent is doing now, per transition ---------------------------------------------------


def test_the_current_activity_follows_the_agents_steps(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    assert current_activity(task) == ""  # not running
    start(task)
    task.refresh_from_db()
    assert current_activity(task) == "step 1 · thinking"
    provider = ScriptedProvider(tool_turn(("lookup", {"q": "x"})), answer("Found it."))
    steps = loop_steps(provider, FakeTools(lookup=(echo_q, True)), decisions=[Decision(True, "", "alice")])
    said = []
    for step in steps:
        record_step(task, step)
        said.append(current_activity(task))
    assert said == [
        "step 1 · writing",  # text
        "step 2 · thinking",  # model call ended asking for tools: the calls start at once
        "step 1 · waiting for approval of lookup",  # tool.call
        "step 1 · calling lookup",  # approved
        "step 2 · thinking",  # result
        "step 2 · writing",  # text
        "step 2 · finishing",  # the model ended its turn
    ]


def test_a_rejected_call_is_said_as_such_until_the_agent_moves_on(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    start(task)
    task.refresh_from_db()
    provider = ScriptedProvider(tool_turn(("lookup", {"q": "x"})), answer("Fine, without it."))
    steps = loop_steps(provider, FakeTools(lookup=(echo_q, True)), decisions=[Decision(False, "no", "bob")])
    said = {}
    for step in steps:
        record_step(task, step)
        said[step.kind] = current_activity(task)
    assert said["tool_call"] == "step 1 · waiting for approval of lookup"
    assert said["approval"] == "step 1 · lookup rejected"
    assert said["tool_result"] == "step 2 · thinking"


async def echo_q(q: str = "") -> str:
    return f"found {q}"


def test_a_new_attempt_starts_its_activity_afresh(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    record_loop(task, ScriptedProvider(tool_turn(("echo", {"text": "1"})), answer("ok")), FakeTools(echo=(echo, False)))
    Attempt.objects.create(task_run=task, number=2)
    start(task)
    task.refresh_from_db()
    assert task.attempt_count == 2 and current_activity(task) == "step 1 · thinking"


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pausing_or_resuming_the_run_keeps_a_running_agents_activity(launched, artifacts_dir, action, personas):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    start(task)
    events.record("tool.call", task=task, payload={"step": 2, "call_id": "t", "tool": "lookup", "attempt": 1})
    runs.pause(run, user=personas["launcher"])
    if action == "resume":
        runs.resume(run, user=personas["launcher"])
    task.refresh_from_db()
    assert task.state == TaskRun.State.RUNNING  # running tasks finish their attempt
    assert current_activity(task) == "step 2 · calling lookup"


@pytest.mark.parametrize("ending", ["cancel", "fail", "finish"])
def test_the_activity_is_cleared_when_the_task_ends(launched, artifacts_dir, ending, personas):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    start(task)
    events.record("tool.call", task=task, payload={"step": 2, "call_id": "t", "tool": "lookup", "attempt": 1})
    task.refresh_from_db()
    assert [v.activity for v in task_views(run)] == ["step 2 · calling lookup"]
    if ending == "cancel":
        runs.cancel(run, user=personas["launcher"])
    else:
        state = TaskRun.State.FAILED if ending == "fail" else TaskRun.State.SUCCEEDED
        TaskRun.objects.filter(pk=task.pk).update(state=state)
    task.refresh_from_db()
    assert task.state != TaskRun.State.RUNNING
    assert current_activity(task) == "" and [v.activity for v in task_views(run)] == [""]


def held(task: TaskRun, kind: str, duration_s: float | None = None) -> None:
    """Record the runtime's step for step 2's model call held by the requests budget: its wait
    starting (``rate_wait``) or ending (``rate_waited``)."""
    record_step(task, agent_steps.Step(kind=kind, step=2, wait="rate_limit_requests", duration_s=duration_s))


def test_a_call_held_by_the_providers_budget_is_said_while_it_waits_and_kept_in_the_path(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    start(task)
    task.refresh_from_db()
    provider = ScriptedProvider(tool_turn(("lookup", {"q": "x"})), answer("Found it."))
    steps = loop_steps(provider, FakeTools(lookup=(echo_q, False)))
    for step in [s for s in steps if s.step == 1]:
        record_step(task, step)
    assert current_activity(task) == "step 2 · thinking"
    held(task, "rate_wait")  # the wait starts
    assert current_activity(task) == "step 2 · waiting for the provider's request budget"
    wait = task_path(task)[-1]
    assert (wait.kind, wait.step, wait.waiting, wait.done) == ("wait", 2, True, False)
    assert wait.wait_words == "the provider's request budget"
    assert task.events.get(type="agent.rate_wait").message == (
        "step 2 · model call held: waiting for the provider's request budget"
    )
    held(task, "rate_waited", 12.0)  # the wait ends: the call goes out
    assert current_activity(task) == "step 2 · thinking"
    wait = task_path(task)[-1]
    assert (wait.kind, wait.waiting, wait.done, wait.duration_s, len(wait.seqs)) == ("wait", False, True, 12.0, 2)
    for step in [s for s in steps if s.step == 2]:
        record_step(task, step)
    assert current_activity(task) == "step 2 · finishing"
    assert [kind for step, kind in kinds(task_path(task)) if step == 2] == ["wait", "text", "model"]


@pytest.mark.parametrize("ending", ["cancelled", "lost"])
def test_a_wait_the_attempts_end_cut_off_is_not_said_to_go_on(launched, artifacts_dir, ending, personas):
    """Cancelled: the runtime ends the wait as it stops (its end says how long). Lost: the worker
    died and wrote nothing more, so the attempt's end closes the wait."""
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    attempt = start(task)
    held(task, "rate_wait")
    task.refresh_from_db()
    assert current_activity(task) == "step 2 · waiting for the provider's request budget"
    if ending == "cancelled":
        runs.cancel(run, user=personas["launcher"])
        held(task, "rate_waited", 3.0)
    else:
        TaskRun.objects.filter(pk=task.pk).update(state=TaskRun.State.READY)
    Attempt.objects.filter(pk=attempt.pk).update(state=ending)
    task.refresh_from_db()
    assert current_activity(task) == "" and [v.activity for v in task_views(run)] == [""]
    wait = attempt_paths(task)[0].rows[-1]
    assert wait.kind == "wait" and not wait.waiting
    assert (wait.done, wait.wait_cut, wait.duration_s) == (
        (True, False, 3.0) if ending == "cancelled" else (False, True, None)
    )
    assert attempt_path(task, 1).rows[-1].waiting is False


def test_activities_of_many_running_tasks_take_one_query(launched, artifacts_dir, django_assert_num_queries):
    run = launched({"a": ("researcher", []), "b": ("researcher", []), "c": ("writer", [])})
    tasks = list(run.tasks.order_by("subtask__position"))
    for task in tasks[:2]:
        start(task)
    events.record("tool.call", task=tasks[1], payload={"step": 1, "call_id": "t", "tool": "search", "attempt": 1})
    fresh = list(TaskRun.objects.filter(run=run).order_by("subtask__position"))
    with django_assert_num_queries(1):
        doing = activities(fresh)
    assert doing == {tasks[0].pk: "step 1 · thinking", tasks[1].pk: "step 1 · calling search"}


def test_a_call_its_attempts_end_cut_off_is_not_still_calling_unless_its_result_came(launched, artifacts_dir):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    attempt = start(task)
    call = {"step": 1, "call_id": "c1", "tool": "lookup", "arguments": {}, "attempt": 1}
    events.record("tool.call", task=task, payload=call)
    events.record("tool.call", task=task, payload={**call, "call_id": "c2"})
    events.record("tool.result", task=task, payload={**call, "call_id": "c2", "result": "ok", "result_chars": 2})
    assert [(r.calling, r.cut_off) for r in attempt_paths(task)[0].rows] == [(True, False), (False, False)]
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.LOST)
    cut, answered = attempt_paths(task)[0].rows
    assert (cut.calling, cut.cut_off, cut.done, cut.waiting_for_approval) == (False, True, False, False)
    assert (answered.calling, answered.cut_off, answered.done) == (False, False, True)


def asked(task: TaskRun, step: int, call_id: str, waited_s: float | None) -> None:
    """Record a call of a tool granted with approval, and its decision after `waited_s` (None: no
    decision recorded), as the runtime records them."""
    where = {"step": step, "call_id": call_id, "tool": "deploy", "server": "srv", "server_tool": "deploy"}
    record_step(task, agent_steps.Step(kind="tool_call", arguments={}, approval_required=True, **where))
    if waited_s is not None:
        decision = {"approved": True, "decided_by": "alice", "duration_s": waited_s}
        record_step(task, agent_steps.Step(kind="approval", **where, **decision))


def test_an_attempts_timeout_is_said_not_to_count_its_waits_for_approval(launched, artifacts_dir, personas):
    """The attempt's page said "took 1 min 17 s" beside "timeout 1 min 00 s", as if the timeout had
    passed: the time its agent waited for a person's decision is not counted (agent_loop's clock
    pauses). The calls of one step are asked together and their waits overlap: counted once."""
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    start(task)
    assert attempt_path(task, 1).timeout_note == ""  # it waited for nobody
    asked(task, 1, "c1", 30.0)
    asked(task, 1, "c2", 45.0)  # asked with c1: they waited together
    asked(task, 2, "c3", 12.0)
    path = attempt_path(task, 1)
    assert path.approval_wait_s == 57.0
    assert path.timeout_note == "not counting 57 s waiting for approval"

    asked(task, 3, "c4", None)  # a person has yet to decide
    assert attempt_path(task, 1).timeout_note == (
        "not counting 57 s waiting for approval, nor the wait for approval going on now"
    )
    runs.cancel(run, user=personas["launcher"])
    Attempt.objects.filter(task_run=task).update(state=Attempt.State.CANCELLED)
    assert attempt_path(task, 1).timeout_note == (
        "not counting 57 s waiting for approval, nor the wait for approval its end cut off"
    )


# --- A call waiting for a person: what its tool checkpoint says ----------------------------------


def ask_about(task: TaskRun, call_id: str = "c1", name: str = "write_file"):
    """The task's running attempt asks a person about a call, as engine/tool_approvals opens it
    (the task then waits: "needs approval"); its checkpoint."""
    from orchestrator.engine import execution, tool_approvals
    from orchestrator.models import Checkpoint

    claim = execution.claim_attempt(Attempt.objects.get(task_run=task).pk, "host:1")
    assert claim is not None
    asked = tool_approvals.Asked(call_id, name, "workspace", name, {"path": "notes.md"})
    return Checkpoint.objects.get(pk=tool_approvals.open_checkpoint(claim, asked))


def row_of(run, key: str = "a"):
    return next(view for view in task_views(run) if view.key == key)


def test_a_call_asked_about_before_its_step_is_written_is_said_to_wait_for_approval(launched, personas):
    """Its row said "needs approval" over "step 1 · thinking", what the agent did before it asked:
    the call's step is written behind the agent, and the checkpoint is what it waits on."""
    run = launched({"a": ("researcher", [])})
    checkpoint = ask_about(run.tasks.get())
    view = row_of(run)
    assert view.state_label == "needs approval"
    assert view.note == ("activity", "step 1 · waiting for approval of write_file")

    runs.decide(checkpoint, approve=True, user=personas["approver"])
    view = row_of(run)
    assert (view.state_label, view.activity) == ("running", "step 1 · thinking")  # what its steps say


@pytest.mark.parametrize(("approve", "said"), [(True, "calling lookup"), (False, "lookup rejected")])
def test_a_decided_call_is_said_as_decided_before_its_worker_writes_the_decision(
    launched, artifacts_dir, personas, approve, said
):
    """The decision's frame drew the row "running" beside "waiting for approval of lookup" until the
    agent's worker polled its checkpoint (up to a second later) and wrote the approval's step."""
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    provider = ScriptedProvider(tool_turn(("lookup", {"q": "x"})), answer("Found it."))
    steps = loop_steps(provider, FakeTools(lookup=(echo_q, True)), decisions=[Decision(True, "", "alice")])
    checkpoint = ask_about(task, call_id=next(s.call_id for s in steps if s.kind == "tool_call"), name="lookup")
    for step in steps[: [s.kind for s in steps].index("tool_call") + 1]:
        record_step(task, step)
    assert row_of(run).activity == "step 1 · waiting for approval of lookup"

    runs.decide(checkpoint, approve=approve, user=personas["approver"], comment="" if approve else "not now")
    view = row_of(run)
    assert (view.state_label, view.activity) == ("running", f"step 1 · {said}")


def test_of_a_turns_calls_the_one_waiting_for_a_person_is_named(launched, artifacts_dir):
    """A turn's calls run at once: one waiting for a person beside one under way read "calling
    fetch (+1 more)" under "needs approval"."""
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    start(task)
    call = {"step": 1, "arguments": {}, "attempt": 1}
    events.record(
        "tool.call", task=task, payload={**call, "call_id": "c1", "tool": "lookup", "approval_required": True}
    )
    events.record("tool.call", task=task, payload={**call, "call_id": "c2", "tool": "fetch"})
    task.refresh_from_db()
    assert current_activity(task) == "step 1 · waiting for approval of lookup (+1 more)"


def test_a_checkpoint_of_an_earlier_attempt_says_nothing_of_the_running_one(launched, personas):
    run = launched({"a": ("researcher", [])})
    task = run.tasks.get()
    ask_about(task)
    Attempt.objects.filter(task_run=task).update(state=Attempt.State.LOST)
    Attempt.objects.create(task_run=task, number=2)
    start(task)
    assert row_of(run).activity == "step 1 · thinking"
