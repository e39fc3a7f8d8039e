"""Agents that act, through the runtime: real attempts (claim → agent loop → end), real MCP round
trips to the tests' own stdio server, Claude played by the fake Messages API."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from orchestrator import db_threads, ratelimit
from orchestrator.engine import admission, agent_loop, agent_runner, execution, runs, tool_attempt
from orchestrator.governance import tool_registry
from orchestrator.models import Attempt, Checkpoint, Event, ProviderLimit, Run, TaskRun
from orchestrator.providers.base import get_provider
from orchestrator.providers.fake_anthropic import Reply
from orchestrator.providers.fake_anthropic.ratelimits import RateLimits
from orchestrator.readmodels import steps
from orchestrator.readmodels.records import PartialOutputRecord
from orchestrator.readmodels.run_export import run_export, run_markdown
from tests.conftest import NoHost, Stopping, run_attempt, run_here, stand_still, wait_until
from tests.orchestrator.tools.conftest import TEST_SERVER, process_gone

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "s3cret-value-7f1c9e"


@pytest.fixture
def tool_setup(settings, tmp_path, fake_anthropic, no_broker, monkeypatch):
    """The test server registered as `testsrv` (with a secret in its environment), run
    directories in tmp_path, quick tool timeouts and approval polls."""
    settings.GLASSBOX_ARTIFACTS_DIR = tmp_path / "artifacts"
    settings.GLASSBOX_TOOL_CALL_TIMEOUT_S = 2.0
    monkeypatch.setattr(tool_attempt, "APPROVAL_POLL_S", 0.05)
    import sys

    tool_registry.add_server(
        "testsrv", command=[sys.executable, str(TEST_SERVER)], env={"SECRET_TOKEN": SECRET}, actor="test"
    )
    return fake_anthropic


def claude_agent(make_agent, name: str, *grants: str, approval: bool = False, **fields):
    agent = make_agent(name, provider="anthropic", model="claude-test", provider_options={}, **fields)
    for target in grants:
        tool_registry.grant(agent, target, requires_approval=approval, actor="test")
    return agent


def launch(make_plan, tasks: dict, **options) -> Run:
    return runs.launch(make_plan(tasks), budget_usd=options.pop("budget_usd", "10"), **options)


def steps_of(task: TaskRun, type_: str) -> list[Event]:
    return list(Event.objects.filter(task_run=task, type=type_).order_by("seq"))


def message_requests(server) -> list[dict]:
    """What the fake API received, read through its own endpoint."""
    with urllib.request.urlopen(f"{server.url}/_fake/requests") as answer:
        recorded = json.load(answer)["requests"]
    return [r["body"] for r in recorded if r["path"] == "/v1/messages" and r["method"] == "POST"]


def tool_results_sent(body: dict) -> list[dict]:
    last = body["messages"][-1]
    return [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


def run_in_thread(attempt_id: int) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def work() -> None:
        out["outcome"] = run_attempt(attempt_id)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, out


def queued(run: Run) -> Attempt:
    return Attempt.objects.get(task_run__run=run, state=Attempt.State.QUEUED)


# --- The loop through the runtime --------------------------------------------------------------


def test_two_agents_call_tools_in_parallel_in_one_run(tool_setup, make_agent, make_plan):
    claude_agent(make_agent, "alpha", "testsrv:echo")
    claude_agent(make_agent, "beta", "testsrv:echo")
    run = launch(make_plan, {"a": ("alpha", []), "b": ("beta", [])})
    ids = list(Attempt.objects.filter(task_run__run=run).values_list("pk", flat=True))
    assert len(ids) == 2

    async def both():
        import asyncio

        worker = execution.worker_name()
        return await asyncio.gather(*(agent_runner.run_attempt(NoHost(), pk, worker) for pk in ids))

    outcomes = db_threads.run_sync(both)
    assert [outcome for outcome, _ in outcomes] == ["succeeded", "succeeded"]
    for task in run.tasks.all():
        results = steps_of(task, "tool.result")
        assert len(results) == 1 and results[0].payload["attempt"] == 1
        assert results[0].payload["tool"] == "echo" and not results[0].payload["error"]
        assert len(steps_of(task, "agent.model_call")) == 2
        assert "echo →" in task.output  # the fake's answer quotes the tool's result
    assert (tool_setup_dir := run_directory_of(run)).is_dir(), tool_setup_dir


def run_directory_of(run: Run):
    from orchestrator.tools.workspace import run_directory

    return run_directory(run.pk, create=False)


def test_usage_of_every_model_call_is_summed_on_attempt_and_task(tool_setup, make_agent, make_plan):
    claude_agent(make_agent, "alpha", "testsrv:echo")
    tool_setup.enqueue(Reply.tool_call("echo", {"text": "one"}), Reply.tool_call("echo", {"text": "two"}))
    run = launch(make_plan, {"a": ("alpha", [])})
    assert run_here(run).status == Run.Status.SUCCEEDED
    task = run.tasks.get()
    calls = steps_of(task, "agent.model_call")
    assert len(calls) == 3
    attempt = task.attempts.get()
    assert attempt.input_tokens == sum(e.payload["input_tokens"] for e in calls) > 0
    assert attempt.output_tokens == sum(e.payload["output_tokens"] for e in calls) > 0
    task.refresh_from_db()
    assert (task.input_tokens, task.output_tokens) == (attempt.input_tokens, attempt.output_tokens)
    run.refresh_from_db()
    assert run.output_tokens == attempt.output_tokens


def test_a_long_result_is_kept_whole_for_the_attempts_page(tool_setup, make_agent, make_plan):
    """The event keeps a preview; the attempt's page reads the whole result the runtime kept."""
    claude_agent(make_agent, "alpha", "testsrv:big")
    tool_setup.enqueue(Reply.tool_call("big", {"chars": 9000}))
    run = launch(make_plan, {"a": ("alpha", [])})
    assert run_here(run).status == Run.Status.SUCCEEDED
    task = run.tasks.get()
    (result,) = steps_of(task, "tool.result")
    assert len(result.payload["result"]) < 9000
    path = steps.attempt_path(task, 1, whole_results=True)
    (call,) = [row for row in path.rows if row.kind == "call"]
    assert steps.whole_result(task, call) == "x" * 9000


def test_an_ungranted_tool_is_refused_and_audited(tool_setup, make_agent, make_plan):
    claude_agent(make_agent, "alpha", "testsrv:echo")
    tool_setup.enqueue(Reply.tool_call("environment", {}))
    run = launch(make_plan, {"a": ("alpha", [])})
    assert run_here(run).status == Run.Status.SUCCEEDED
    task = run.tasks.get()
    refused = steps_of(task, "tool.refused")
    assert len(refused) == 1 and refused[0].payload["tool"] == "environment"
    assert not steps_of(task, "tool.result")
    sent = tool_results_sent(message_requests(tool_setup)[-1])
    assert sent[0]["is_error"] and "not granted" in sent[0]["content"]
    assert [t["name"] for t in message_requests(tool_setup)[0]["tools"]] == ["echo"]


def test_a_server_killed_mid_call_and_a_hanging_tool_fail_the_calls_not_the_attempt(tool_setup, make_agent, make_plan):
    claude_agent(make_agent, "alpha", "testsrv")
    tool_setup.enqueue(
        Reply.tool_calls(("pid", {})),
        Reply.tool_calls(("crash", {})),
        Reply.tool_calls(("pid", {}), ("hang", {})),
    )
    run = launch(make_plan, {"a": ("alpha", [])})
    assert run_here(run).status == Run.Status.SUCCEEDED
    task = run.tasks.get()
    results = {(e.payload["step"], e.payload["tool"]): e.payload for e in steps_of(task, "tool.result")}
    assert results[(2, "crash")]["error"]
    assert results[(3, "hang")]["error"] and "did not answer hang" in results[(3, "hang")]["result"]
    assert not results[(3, "pid")]["error"]  # the server was started again after the crash
    pids = [int(results[(1, "pid")]["result"]), int(results[(3, "pid")]["result"])]
    assert pids[0] != pids[1]
    assert all(process_gone(pid) for pid in pids)  # nothing outlives the attempt
    bodies = message_requests(tool_setup)
    assert tool_results_sent(bodies[2])[0]["is_error"]  # the model was told of the crash
    hang = [b for b in tool_results_sent(bodies[3]) if b.get("is_error")]
    assert len(hang) == 1


def test_a_secret_in_a_servers_environment_appears_in_no_event_or_log(tool_setup, make_agent, make_plan, caplog):
    claude_agent(make_agent, "alpha", "testsrv")
    tool_setup.enqueue(Reply.tool_calls(("environment", {}), ("leak_and_die", {})))
    run = launch(make_plan, {"a": ("alpha", [])})
    assert run_here(run).status == Run.Status.SUCCEEDED
    results = steps_of(run.tasks.get(), "tool.result")
    assert any("SECRET_TOKEN" in e.payload["result"] for e in results)  # the server did get it
    for event in Event.objects.filter(run=run):
        assert SECRET not in event.message and SECRET not in json.dumps(event.payload)
    assert SECRET not in run.tasks.get().output
    assert SECRET not in caplog.text
    assert all(SECRET not in json.dumps(body) for body in message_requests(tool_setup))


# --- Limits ------------------------------------------------------------------------------------


def test_max_steps_stops_the_attempt_and_says_why(tool_setup, make_agent, make_plan):
    claude_agent(make_agent, "alpha", "testsrv:echo", max_steps=2)
    tool_setup.enqueue(Reply.tool_call("echo", {"text": "one"}), Reply.tool_call("echo", {"text": "two"}))
    run = launch(make_plan, {"a": ("alpha", [])})
    run_here(run)
    task = run.tasks.get()
    assert task.state == TaskRun.State.FAILED
    assert "max_steps is 2" in task.error
    assert task.attempt_count == 1  # another attempt would stop at the same limit
    assert steps_of(task, "agent.stopped")[0].payload["stop_reason"] == "max_steps"


def test_budget_stop_when_the_run_cannot_cover_another_model_call(tool_setup, make_agent, make_plan):
    ProviderLimit.objects.create(
        provider="anthropic",
        model="claude-test",
        input_price_per_mtok=Decimal("3"),
        output_price_per_mtok=Decimal("15"),
    )
    claude_agent(make_agent, "alpha", "testsrv:echo")
    tool_setup.enqueue(Reply.tool_call("echo", {"text": "one"}))
    run = launch(make_plan, {"a": ("alpha", [])})
    # The run holds just what admission reserved for the first call: no room for a second.
    Run.objects.filter(pk=run.pk).update(budget_usd=run.reserved_usd)
    run_here(run)
    task = run.tasks.get()
    assert task.state == TaskRun.State.FAILED
    assert "budget cannot cover another model call" in task.error
    assert steps_of(task, "agent.stopped")[0].payload["stop_reason"] == "budget"
    assert len(message_requests(tool_setup)) == 1
    attempt = task.attempts.get()
    assert attempt.output_tokens > 0 and attempt.cost_usd > 0  # the call made is counted
    run.refresh_from_db()
    assert run.reserved_usd == 0 and run.cost_usd == attempt.cost_usd


@pytest.fixture
def fresh_budgets(monkeypatch):
    """The per-minute budgets of the fake's model, empty before the test and after it (on Redis
    they outlive the test database, and other tests of the session take from them), on a clock
    that stands still."""
    stand_still(monkeypatch)
    keys = [admission.admission_key("anthropic", "claude-test", unit) for unit in ("rpm", "itpm", "otpm")]
    for key in keys:
        ratelimit.reset(key)
    yield
    for key in keys:
        ratelimit.reset(key)


def test_every_model_call_of_a_tool_using_attempt_is_metered_and_the_budgets_end_at_what_was_used(
    tool_setup, make_agent, make_plan, fresh_budgets
):
    """Each model call is a request to the provider: admission takes the first call's share of the
    per-minute budgets, each later call takes its own, and every taking is corrected to the call's
    real use — so after the attempt the budgets hold exactly its requests and tokens."""
    budgets = {"rpm": 50, "itpm": 30_000, "otpm": 8_000}
    # The account's own limits are ten times ours: its reports (feedback) then take nothing from ours.
    tool_setup.limits = RateLimits(500, 300_000, 80_000)
    tool_setup.reset()
    ProviderLimit.objects.create(
        provider="anthropic",
        model="claude-test",
        requests_per_minute=budgets["rpm"],
        input_tokens_per_minute=budgets["itpm"],
        output_tokens_per_minute=budgets["otpm"],
    )
    claude_agent(make_agent, "alpha", "testsrv:echo")
    tool_setup.enqueue(Reply.tool_call("echo", {"text": "one"}), Reply.tool_call("echo", {"text": "two"}))
    run = launch(make_plan, {"a": ("alpha", [])})
    assert run_here(run).status == Run.Status.SUCCEEDED
    assert len(message_requests(tool_setup)) == 3
    attempt = run.tasks.get().attempts.get()
    used = {"rpm": 3, "itpm": attempt.input_tokens, "otpm": attempt.output_tokens}
    assert used["itpm"] > 0 and used["otpm"] > 0
    for unit, per_minute in budgets.items():
        remaining, _ = ratelimit.peek(admission.admission_key("anthropic", "claude-test", unit), per_minute)
        assert remaining == per_minute - used[unit], unit


class ServersUpClock:
    """The attempt's clock (its deadline, and the waits measured against it) as if its tool
    servers had started at once: the start-up each call reports (`server_start_s`) is taken off
    what the clock reads, and a call is limited by its own timeout, not by what is left of the
    task's time. The Anthropic SDK is imported before the attempt starts.

    A short timeout then measures the attempt's own steps: starting the test server (a Python
    process importing the MCP SDK) and importing the SDK took 2 to 5 s on a loaded machine."""

    def __init__(self, monkeypatch) -> None:
        get_provider("anthropic")  # imports the SDK, once per process
        self.starting_s = 0.0
        clock = self

        class ServersStartFree(tool_attempt.Toolbox):
            async def call(self, name: str, arguments: dict, *, timeout_s: float | None = None):
                result = await super().call(name, arguments)
                clock.starting_s += result.server_start_s or 0.0
                return result

        monkeypatch.setattr(tool_attempt, "Toolbox", ServersStartFree)
        for module in (tool_attempt, agent_loop):
            monkeypatch.setattr(module, "time", self)

    def monotonic(self) -> float:
        return time.monotonic() - self.starting_s


def test_a_later_model_call_waits_out_the_providers_backoff(
    tool_setup, make_agent, make_plan, fresh_budgets, monkeypatch
):
    """Admission let the attempt's first call through; the provider then asks everyone to back off.
    The next call waits for it — here past the task's timeout, so the attempt times out having
    sent nothing more."""
    clock = ServersUpClock(monkeypatch)
    limit = ProviderLimit.objects.create(provider="anthropic", model="claude-test", requests_per_minute=100)
    claude_agent(make_agent, "alpha", "testsrv:echo")
    tool_setup.enqueue(Reply.tool_call("echo", {"text": "one"}))
    run = launch(make_plan, {"a": ("alpha", [], {"timeout_s": 3})})
    limit.backoff_until = timezone.now() + timedelta(minutes=5)
    limit.save(update_fields=["backoff_until"])
    run_here(run)
    attempt = run.tasks.get().attempts.get()
    assert attempt.state == Attempt.State.TIMED_OUT
    assert len(message_requests(tool_setup)) == 1
    wait = next(row for row in steps.task_path(attempt.task_run) if row.kind == "wait")
    assert (wait.wait, wait.done) == ("provider_backoff", True) and wait.duration_s > 0  # until the time was up
    assert clock.starting_s > 0  # the server's start was timed, so not counted


class Holding(NoHost):
    """A host that keeps the attempt it runs and its event loop, so a test can stop the attempt
    as a host's heartbeat would."""

    def track(self, attempt) -> None:
        self.attempt, self.loop = attempt, asyncio.get_running_loop()

    def stop(self, reason: str) -> None:
        self.loop.call_soon_threadsafe(self.attempt.stop, reason)


@pytest.mark.parametrize("end", ["sent", "cancelled"])
def test_a_later_model_call_held_by_the_providers_backoff_is_a_step_of_the_path(
    end, tool_setup, make_agent, make_plan, fresh_budgets, personas, monkeypatch
):
    """One step when the wait starts (not one per recheck), saying what holds the call; one when
    it ends, however it ends, saying how long. Meanwhile the activity says so."""
    monkeypatch.setattr(tool_attempt, "THROTTLE_RECHECK_S", 0.05)  # many rechecks during the wait
    limit = ProviderLimit.objects.create(provider="anthropic", model="claude-test", requests_per_minute=100)
    claude_agent(make_agent, "alpha", "testsrv:echo")
    tool_setup.enqueue(Reply.tool_call("echo", {"text": "one"}))
    run = launch(make_plan, {"a": ("alpha", [])})
    ProviderLimit.objects.filter(pk=limit.pk).update(backoff_until=timezone.now() + timedelta(minutes=5))
    host, out = Holding(), {}
    attempt_id = queued(run).pk
    worker = execution.worker_name()
    work = lambda: out.update(outcome=db_threads.run_sync(lambda: agent_runner.run_attempt(host, attempt_id, worker)))  # noqa: E731
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    task = run.tasks.get()
    wait_until(lambda: bool(steps_of(task, "agent.rate_wait")), message="the wait's step")
    time.sleep(0.3)  # rechecked a few times meanwhile
    task.refresh_from_db()  # running now (read before its claim)
    assert steps.current_activity(task) == "step 2 · waiting for the provider's backoff"
    if end == "sent":
        ProviderLimit.objects.filter(pk=limit.pk).update(backoff_until=None)
    else:
        runs.cancel(run, user=personas["launcher"])
        host.stop(agent_runner.CANCELLED)
    thread.join(timeout=60)
    assert out["outcome"][0] == ("succeeded" if end == "sent" else "cancelled")
    started, ended = steps_of(task, "agent.rate_wait"), steps_of(task, "agent.rate_waited")
    assert len(started) == len(ended) == 1
    assert started[0].payload == {"step": 2, "wait": "provider_backoff", "attempt": 1}
    assert ended[0].payload["duration_s"] >= 0.3 and ended[0].seq > started[0].seq
    wait = next(row for row in steps.task_path(task) if row.kind == "wait")
    assert wait.done and not wait.waiting and wait.duration_s == ended[0].payload["duration_s"]
    task.refresh_from_db()
    assert task.state == ("succeeded" if end == "sent" else "cancelled") and steps.current_activity(task) == ""
    assert len(message_requests(tool_setup)) == (2 if end == "sent" else 1)


def test_a_call_that_is_not_held_writes_no_wait_step(tool_setup, make_agent, make_plan, fresh_budgets):
    ProviderLimit.objects.create(provider="anthropic", model="claude-test", requests_per_minute=100)
    claude_agent(make_agent, "alpha", "testsrv:echo")
    tool_setup.enqueue(Reply.tool_call("echo", {"text": "one"}))
    run = launch(make_plan, {"a": ("alpha", [])})
    assert run_here(run).status == Run.Status.SUCCEEDED
    assert not Event.objects.filter(run=run, type__startswith="agent.rate_wait").exists()


def test_an_agent_without_grants_takes_the_plain_path(tool_setup, make_agent, make_plan):
    make_agent("plain", provider="anthropic", model="claude-test", provider_options={})
    run = launch(make_plan, {"a": ("plain", [])})
    assert run_here(run).status == Run.Status.SUCCEEDED
    bodies = message_requests(tool_setup)
    assert len(bodies) == 1 and "tools" not in bodies[0]
    assert not Event.objects.filter(run=run, type__startswith="tool.").exists()


def test_an_attempt_claimed_for_its_host_by_a_scheduling_step_uses_its_agents_tools(tool_setup, make_agent, make_plan):
    """Whether an agent holds grants is read with its claim, the step's claims included: the
    next task of a chain, claimed for the host by the first one's success, still calls tools."""
    claude_agent(make_agent, "alpha", "testsrv:echo")
    make_agent("plain", provider="anthropic", model="claude-test", provider_options={})
    run = launch(make_plan, {"a": ("plain", []), "b": ("alpha", ["a"])})
    first, worker = queued(run).pk, execution.worker_name()

    async def chain():
        outcome, claim = await agent_runner.run_attempt(NoHost(), first, worker, keep=1)
        assert outcome == "succeeded" and claim is not None and claim.has_tool_grants is False
        [kept] = claim.kept
        assert kept.has_tool_grants is True
        return await agent_runner.run_claimed(NoHost(), kept)

    assert db_threads.run_sync(chain) == "succeeded"
    b = run.tasks.get(subtask__key="b")
    assert [e.payload["tool"] for e in steps_of(b, "tool.result")] == ["echo"]
    assert "echo →" in b.output


# --- Approvals -----------------------------------------------------------------------------------


def wait_for_checkpoint(run: Run) -> Checkpoint:
    wait_until(
        lambda: Checkpoint.objects.filter(run=run, kind=Checkpoint.Kind.TOOL, status="pending").exists(),
        message="a tool checkpoint",
    )
    return Checkpoint.objects.get(run=run, kind=Checkpoint.Kind.TOOL, status="pending")


def ask_approval(server, make_agent, make_plan, text: str):
    """coder, granted testsrv:echo with approval, calls echo(text) in a thread: (run, thread,
    its outcome when it ended, the call's pending checkpoint)."""
    claude_agent(make_agent, "coder", "testsrv:echo", approval=True)
    server.enqueue(Reply.tool_call("echo", {"text": text}))
    run = launch(make_plan, {"a": ("coder", [])})
    thread, out = run_in_thread(queued(run).pk)
    return run, thread, out, wait_for_checkpoint(run)


def test_an_approved_call_runs(tool_setup, make_agent, make_plan, personas):
    run, thread, out, checkpoint = ask_approval(tool_setup, make_agent, make_plan, "ship it")
    task = run.tasks.get()
    assert task.state == TaskRun.State.RUNNING
    assert task.wait_code == "tool_approval" and "testsrv:echo" in task.wait_reason
    assert checkpoint.details["arguments"] == {"text": "ship it"} and checkpoint.details["agent"] == "coder"
    runs.decide(checkpoint, approve=True, user=personas["approver"])
    thread.join(timeout=60)
    assert out["outcome"] == "succeeded"
    task.refresh_from_db()
    assert task.wait_code == ""
    approval = steps_of(task, "tool.approval")[0].payload
    assert approval["approved"] and approval["decided_by"] == "approver"
    assert steps_of(task, "tool.result")[0].payload["result"] == "ship it"
    decided = Event.objects.get(run=run, type="checkpoint.approved")
    assert decided.actor_name == "approver" and decided.payload["tool"] == "testsrv:echo"


def test_a_rejected_call_is_told_to_the_model_with_the_comment(tool_setup, make_agent, make_plan, personas):
    run, thread, out, checkpoint = ask_approval(tool_setup, make_agent, make_plan, "rm -rf")
    with pytest.raises(runs.ActionError):
        runs.decide(checkpoint, approve=False, user=personas["approver"])  # a rejection needs a comment
    runs.decide(checkpoint, approve=False, user=personas["approver"], comment="write to the scratch folder instead")
    thread.join(timeout=60)
    assert out["outcome"] == "succeeded"
    task = run.tasks.get()
    assert not steps_of(task, "tool.approval")[0].payload["approved"]
    sent = tool_results_sent(message_requests(tool_setup)[-1])
    assert sent[0]["is_error"] and "write to the scratch folder instead" in sent[0]["content"]
    assert "rejected" in sent[0]["content"]


def test_cancelling_the_run_while_a_call_awaits_approval_ends_the_attempt(tool_setup, make_agent, make_plan, personas):
    run, thread, out, _ = ask_approval(tool_setup, make_agent, make_plan, "later")
    attempt = Attempt.objects.get(task_run__run=run)
    runs.cancel(run, user=personas["launcher"])
    thread.join(timeout=60)
    assert out["outcome"] == "cancelled"
    attempt.refresh_from_db()
    assert attempt.state == Attempt.State.CANCELLED
    assert not Checkpoint.objects.filter(run=run, status="pending").exists()
    assert len(message_requests(tool_setup)) == 1  # the model was not asked again


def test_a_lost_attempts_pending_call_is_closed_by_the_reaper(tool_setup, make_agent, make_plan):
    from datetime import timedelta

    from django.utils import timezone

    from orchestrator.engine import reaper, tool_approvals

    agent = claude_agent(make_agent, "coder", "testsrv:echo", approval=True)
    run = launch(make_plan, {"a": ("coder", [])})
    claim = execution.claim_attempt(queued(run).pk, "dead-worker:1")
    asked = tool_approvals.Asked("toolu_1", "echo", "testsrv", "echo", {"text": "x"})
    checkpoint_id = tool_approvals.open_checkpoint(claim, asked)
    assert tool_approvals.open_checkpoint(claim, asked) == checkpoint_id  # one per call
    TaskRun.objects.filter(pk=claim.task.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reaper.reap_expired() == 1
    checkpoint = Checkpoint.objects.get(pk=checkpoint_id)
    assert checkpoint.status == Checkpoint.Status.CLOSED and "lost" in checkpoint.comment
    assert agent.name in tool_approvals.describe(checkpoint)


# --- What an attempt wrote, however it ends without success --------------------------------------
# The host saves an attempt's text every second or two, and only while its task is still the
# attempt's: an end that did not keep the text itself lost all it wrote since the last save (all of
# it before the first). These attempts run with no host at all, so only the end can keep it.

SPANS = "Spans recorded today: cart, pricing and payment; tax and inventory are not traced."


def awaiting_approval(server, make_agent, make_plan, tracker=None):
    """coder, granted testsrv:echo with approval, says SPANS and asks to call echo; the call waits
    for a person: (run, thread, its outcome when it ended)."""
    claude_agent(make_agent, "coder", "testsrv:echo", approval=True)
    server.enqueue(Reply.tool_calls(("echo", {"text": "trace"}), text=SPANS))
    run = launch(make_plan, {"a": ("coder", [])})
    attempt_id = queued(run).pk
    out: dict = {}

    def work() -> None:
        out["outcome"], _ = db_threads.run_sync(
            lambda: agent_runner.run_attempt(tracker or NoHost(), attempt_id, execution.worker_name())
        )

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    wait_for_checkpoint(run)
    return run, thread, out


def test_a_cancelled_tool_attempt_keeps_what_it_wrote_as_the_tasks_partial_output(
    tool_setup, make_agent, make_plan, personas
):
    """The reviewer's run: the task counted its tokens and cost, the downloads said "No output: run
    cancelled" with no partial output, where a plain task beside it showed its text."""
    run, thread, out = awaiting_approval(tool_setup, make_agent, make_plan)
    runs.cancel(run, user=personas["launcher"])
    thread.join(timeout=60)
    assert out["outcome"] == "cancelled"
    (task,) = run_export(run)["tasks"]
    assert task["partial_output"] == {
        "attempt": 1,
        "attempt_state": "cancelled",
        "heading": "Partial output of attempt 1 (cancelled)",
        "text": SPANS,
    }
    assert "_Partial output of attempt 1 (cancelled): the text it wrote" in run_markdown(run)
    assert SPANS in run_markdown(run)


def test_a_tool_attempt_handed_back_on_shutdown_keeps_what_it_wrote(tool_setup, make_agent, make_plan):
    stopping = Stopping()
    run, thread, out = awaiting_approval(tool_setup, make_agent, make_plan, stopping)
    stopping.stop(agent_runner.SHUTDOWN)
    thread.join(timeout=60)
    assert out["outcome"] == "handed back"
    task = run.tasks.get()
    assert task.state == TaskRun.State.READY
    partial = PartialOutputRecord.of(task, task.attempts.get())
    assert partial is not None and (partial.heading, partial.text) == (
        "Partial output of attempt 1 (handed back)",
        SPANS,
    )


def test_a_lost_tool_attempt_keeps_what_it_wrote_on_its_own_row(tool_setup, make_agent, make_plan):
    """The task is no longer the attempt's (the reaper may have given it to another): the text is
    kept with the attempt, never applied to the task."""
    run, thread, out = awaiting_approval(tool_setup, make_agent, make_plan)
    TaskRun.objects.filter(run=run).update(lease_owner="another-worker:1")
    thread.join(timeout=60)
    assert out["outcome"] == "discarded"
    attempt = Attempt.objects.get(task_run__run=run)
    assert (attempt.state, attempt.output, attempt.late_result_discarded) == (Attempt.State.LOST, SPANS, True)
    assert run.tasks.get().output == ""


def test_a_failed_tool_attempt_keeps_every_turns_text_the_cut_one_too(tool_setup, make_agent, make_plan):
    claude_agent(make_agent, "coder", "testsrv:echo")
    cut = "Tax calls take 180 ms at p95 because every line is priced on its own and"
    tool_setup.enqueue(
        Reply.tool_calls(("echo", {"text": "trace"}), text=SPANS),
        Reply.stream_error("invalid_request_error", "the request was refused", after_words=6, text=cut),
    )
    run = launch(make_plan, {"a": ("coder", [])})
    run_attempt(queued(run).pk)
    task = run.tasks.get()
    attempt = task.attempts.get()
    assert attempt.state == Attempt.State.FAILED
    partial = PartialOutputRecord.of(task, attempt)
    assert partial is not None and partial.heading == "Partial output of attempt 1 (failed)"
    assert partial.text == f"{SPANS}\n\n{' '.join(cut.split()[:6])} "


def test_a_timed_out_tool_attempt_keeps_the_text_of_the_turn_the_deadline_cut(
    tool_setup, make_agent, make_plan, monkeypatch
):
    """The loop's outcome holds whole turns only: the text the cut turn had streamed was dropped."""
    ServersUpClock(monkeypatch)  # the cut turn's first words within the 5 s, whatever the server's start took
    claude_agent(make_agent, "coder", "testsrv:echo", timeout_s=5)
    cut = "Tax calls take 180 ms at p95 because every line is priced on its own and the rest follows"
    tool_setup.enqueue(
        Reply.tool_calls(("echo", {"text": "trace"}), text=SPANS),
        Reply.text_answer(cut, chunk_delay_s=0.8),  # 5.6 s whole: the deadline cuts it
    )
    run = launch(make_plan, {"a": ("coder", [])})
    run_attempt(queued(run).pk)
    task = run.tasks.get()
    attempt = task.attempts.get()
    assert attempt.state == Attempt.State.TIMED_OUT
    assert task.output.startswith(f"{SPANS}\n\nTax calls take") and cut not in task.output


def test_a_tool_attempts_streaming_answer_counts_its_output_so_far():
    """A tool-holding agent's first answer streamed while its task's panel, its lane and the run's
    Tokens card said "0" (the plain path counted its output as it came): what a call has written
    so far counts now, on top of the calls that ended before it."""
    from types import SimpleNamespace

    from orchestrator.providers.base import TextDelta, Usage

    current = agent_runner.AttemptRun(claim=SimpleNamespace(task=None, attempt=None), expected_output=1000)
    hooks = tool_attempt.Hooks(current)
    asyncio.run(hooks.on_text(1, TextDelta("The first words", 40)))
    assert current.progress.usage.output_tokens == 40
    asyncio.run(hooks.on_usage(tool_attempt.ModelCallUsage(step=1, usage=Usage(300, 60), complete=True)))
    asyncio.run(hooks.on_text(2, TextDelta("and the answer", 25)))
    assert (current.progress.usage.input_tokens, current.progress.usage.output_tokens) == (300, 85)
    # Its progress is the attempt's whole output so far (both calls') against its expected output.
    assert current.progress.progress == 8
