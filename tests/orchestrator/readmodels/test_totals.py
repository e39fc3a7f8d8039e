"""The run page's totals: tasks by state, tokens, ETA as its card shows it, effective cap, budget used."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from orchestrator.engine import attempt_ends, execution, runs
from orchestrator.models import Agent, Attempt, ProviderLimit, Run, TaskRun
from orchestrator.providers.base import Usage
from orchestrator.readmodels import other_runs
from orchestrator.readmodels.prices import unpriced_text
from orchestrator.readmodels.tasks import DISPLAY_ORDER, agents_of, run_tokens, task_states, task_views
from orchestrator.readmodels.totals import effective_cap, totals

from .conftest import start, succeed

State = TaskRun.State


def test_totals_count_states_and_estimate_the_time_left(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("writer", ["b"])}, cap=3)
    result = totals(run)
    assert result.total == 3 and result.done == 0
    assert result.eta_s is not None and result.eta_s > 0
    full = result.eta_s
    succeed(run.tasks.get(subtask__key="a"), took_s=0.2)  # as fast as estimated (fast_latency)
    later = totals(run)
    assert later.done == 1
    assert later.eta_s == pytest.approx(full * 2 / 3)  # two of three equal steps left
    succeed(run.tasks.get(subtask__key="b"), took_s=0.6)  # three times slower: the ETA learns
    assert totals(run).eta_s == pytest.approx(full / 3 * 1.0 / 0.6)  # pace (0.2 + 0.6 + 0.2) / (3 × 0.2)
    counts = {c.state: c.count for c in later.counts}
    assert counts[State.SUCCEEDED] == 1
    assert [c.state for c in later.counts] == [s for s in DISPLAY_ORDER if s in counts]


def test_the_tokens_count_what_running_attempts_have_streamed_as_their_rows_and_lanes_do(launched):
    """The Tokens card said 0 while the running task's row and lane said 43: what its host saved of
    the stream is not settled into the run's tokens until the attempt ends."""
    run = launched({"a": ("researcher", []), "b": ("writer", [])}, cap=2)
    succeed(run.tasks.get(subtask__key="a"), tokens=(100, 50))
    Run.objects.filter(pk=run.pk).update(input_tokens=100, output_tokens=50)
    attempt = start(run.tasks.get(subtask__key="b"))
    Attempt.objects.filter(pk=attempt.pk).update(output_tokens=43)
    run.refresh_from_db()
    result = totals(run)
    assert (result.input_tokens, result.output_tokens, result.streaming_tokens, result.tokens) == (100, 50, 43, 193)


def test_a_running_attempts_input_tokens_count_from_its_start_and_once_when_it_ends(launched):
    """The Attempts table said "27 / 8" while the Tokens card and the task's tokens counted only
    the 8 streamed: the input of a running attempt is known from its stream's start (saved with
    the progress) and must count there too, and count once when the attempt settles."""
    run = launched({"a": ("researcher", [])})
    attempt = Attempt.objects.get(task_run__run=run, state=Attempt.State.QUEUED)
    claim = execution.claim_attempt(attempt.pk, "host:1")
    assert claim is not None
    execution.save_progress([(claim, execution.Progress("Hel", 5, Usage(input_tokens=27, output_tokens=8)))])
    run.refresh_from_db()
    running = totals(run)
    assert running.tokens == 35
    assert (running.input_tokens_so_far, running.output_tokens, running.streaming_tokens) == (27, 0, 8)
    assert [(v.tokens, v.input_tokens_so_far) for v in task_views(run)] == [(35, 27)]
    assert [s.spent_tokens for s in task_states(run)] == [35]

    attempt_ends.complete(claim, "Hello", Usage(input_tokens=27, output_tokens=40), advance=False)
    run.refresh_from_db()
    ended = totals(run)
    assert (ended.input_tokens_so_far, ended.output_tokens, ended.streaming_tokens, ended.tokens) == (27, 40, 0, 67)
    assert [(v.tokens, v.input_tokens_so_far) for v in task_views(run)] == [(67, 27)]
    assert [s.spent_tokens for s in task_states(run)] == [67]


def test_the_tokens_never_go_back_through_a_cancel_while_attempts_run(launched):
    """The Tokens card read 3,001 → 2,634 → 3,115 through a cancel (run 8): once the run's tasks
    were cancelled, their attempts' tokens so far were no longer counted, until those attempts
    stopped at their host's next beat and settled. They count as long as the attempts run."""
    run = launched({"a": ("researcher", []), "b": ("writer", []), "c": ("writer", [])}, cap=3)
    succeed(run.tasks.get(subtask__key="c"), tokens=(100, 50))
    Run.objects.filter(pk=run.pk).update(input_tokens=100, output_tokens=50)
    claims = {}
    for key, usage in (
        ("a", Usage(input_tokens=1_000, output_tokens=400)),
        ("b", Usage(input_tokens=900, output_tokens=300)),
    ):
        attempt = Attempt.objects.get(task_run__run=run, task_run__subtask__key=key)
        claims[key] = execution.claim_attempt(attempt.pk, "host:1")
        execution.save_progress([(claims[key], execution.Progress("so far", 40, usage))])

    def seen() -> tuple[int, int, int, list[int]]:
        """The Tokens card, run_status's count (`run_tokens` read alone), and the tasks' rows."""
        run.refresh_from_db()
        card = totals(run)
        return card.tokens, run_tokens(run).total, card.streaming_tokens, [v.tokens for v in task_views(run)]

    running = seen()
    assert running == (2_750, 2_750, 700, [1_400, 1_200, 150])

    runs.cancel(run)  # the tasks are cancelled; their attempts stop at their host's next beat
    cancelled = seen()
    assert cancelled == running
    assert totals(run).not_counted_yet == "2 attempts still stopping: not counted yet"

    # a's attempt stops, having streamed a little more; then b's.
    attempt_ends.cancel_attempt(claims["a"], Usage(input_tokens=1_000, output_tokens=450))
    a_stopped = seen()
    assert a_stopped == (2_800, 2_800, 300, [1_450, 1_200, 150])
    attempt_ends.cancel_attempt(claims["b"], Usage(input_tokens=900, output_tokens=300))
    settled = seen()
    assert settled == (2_800, 2_800, 0, [1_450, 1_200, 150])
    assert totals(run).not_counted_yet == ""
    totals_seen = [running[0], cancelled[0], a_stopped[0], settled[0]]
    assert totals_seen == sorted(totals_seen)


def test_a_skipped_running_tasks_tokens_so_far_count_until_its_attempt_stops(launched):
    """A person's skip of a running task, like a cancel, leaves its attempt running until its host's
    next beat: its tokens so far stay on the card and its row meanwhile."""
    run = launched({"a": ("researcher", [])})
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "host:1")
    assert claim is not None
    execution.save_progress([(claim, execution.Progress("so far", 40, Usage(input_tokens=500, output_tokens=80)))])
    runs.skip_task(claim.task)
    run.refresh_from_db()
    assert run.tasks.get().state == State.SKIPPED
    assert (totals(run).tokens, run_tokens(run).total, [v.tokens for v in task_views(run)]) == (580, 580, [580])
    attempt_ends.cancel_attempt(claim, Usage(input_tokens=500, output_tokens=90))
    run.refresh_from_db()
    assert (totals(run).tokens, run_tokens(run).total, [v.tokens for v in task_views(run)]) == (590, 590, [590])


def test_no_eta_once_the_run_ended(launched):
    run = launched({"a": ("researcher", [])})
    runs.cancel(run)
    result = totals(run)
    assert result.eta_s is None
    assert result.status == Run.Status.CANCELLED
    assert (result.eta_placeholder, result.eta_note) == ("ended", f"{result.finished_at:%H:%M:%S} UTC")


def test_the_eta_waits_for_the_slots_other_runs_hold_of_an_agent(launched, demo_agents):
    # The researcher runs two tasks at once, across all runs. Another run launched first holds
    # both slots (its two tasks queued, 0.2 s each); this run's four researcher tasks wait for them.
    Agent.objects.filter(name="researcher").update(max_concurrency=2)
    other = launched({"x": ("researcher", []), "y": ("researcher", [])}, cap=2)
    run = launched({f"r{i}": ("researcher", []) for i in range(4)}, cap=8)
    beside = totals(run)
    assert beside.eta_s == pytest.approx(0.2 + 2 * 0.2)  # the other run's tasks, then two rounds
    assert (beside.effective_cap.value, beside.effective_cap.limited_by) == (
        0,
        "agent limits (other runs hold 2 of their 2 slots)",
    )
    assert beside.concurrency_note == (
        "effective cap 0, limited by agent limits (other runs hold 2 of their 2 slots) · run cap 8"
    )
    assert beside.eta_note == (
        "at the cap and each agent's limit (2 slots busy in other runs for now), excluding approvals"
    )

    # Paused, it is measured against no cap: what would limit it is beside the point.
    runs.pause(run)
    assert totals(run).concurrency_note == "paused: nothing new starts until it is resumed · run cap 8"
    runs.resume(run)
    assert totals(run).concurrency_note == beside.concurrency_note

    runs.cancel(other)  # the same run alone: the agent's whole limit is its own
    alone = totals(run)
    assert alone.eta_s == pytest.approx(2 * 0.2)
    assert (alone.effective_cap.value, alone.effective_cap.limited_by) == (2, "agent limits")
    assert alone.eta_note == "at the cap and each agent's limit, excluding approvals"


def test_the_eta_and_the_cap_count_what_other_runs_have_in_flight_on_the_same_provider(launched, demo_agents):
    # Two requests of sim-1 at once, across all runs and agents: another run's two writer tasks
    # hold both; this run's researcher tasks wait for them, though the researcher is free.
    ProviderLimit.objects.filter(provider="simulated", model="sim-1").update(max_in_flight=2)
    other = launched({"x": ("writer", []), "y": ("writer", [])})
    run = launched({"r0": ("researcher", []), "r1": ("researcher", [])}, cap=8)
    beside = totals(run)
    assert (beside.effective_cap.value, beside.effective_cap.limited_by) == (
        0,
        "provider in-flight limit (other runs hold 2 of 2)",
    )
    assert beside.eta_s == pytest.approx(0.2 + 0.2)  # the writer's requests end, then both at once
    assert beside.eta_note == (
        "at the cap and each agent's limit (2 slots busy in other runs for now), excluding approvals"
    )

    runs.cancel(other)
    alone = totals(run)
    assert (alone.effective_cap.value, alone.effective_cap.limited_by) == (2, "provider in-flight limit")
    assert alone.eta_s == pytest.approx(0.2)
    assert alone.eta_note == "at the cap and each agent's limit, excluding approvals"


def test_a_paused_run_has_no_eta_until_it_resumes(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", ["a"])})
    runs.pause(run)
    paused = totals(run)
    assert paused.eta_s is None
    assert paused.eta_placeholder == "paused"
    assert paused.eta_note == "nothing new starts: no ETA until it resumes"
    runs.resume(run)
    resumed = totals(run)
    assert resumed.eta_s == pytest.approx(0.4) and resumed.eta_placeholder == ""
    assert resumed.eta_note == "at the cap and each agent's limit, excluding approvals"


def test_a_run_that_never_started_says_so_and_sets_no_cost_against_its_estimate(launched):
    run = launched({"a": ("researcher", [])}, require_plan_approval=True)
    waiting = totals(run)
    assert waiting.eta_note == "starts once the plan is approved" and not waiting.never_started
    assert waiting.against_estimate == f"estimated ${waiting.estimate_usd:.4f}"  # not "before it started"
    runs.cancel(run)  # as a rejected plan ends it: before it started
    result = totals(run)
    assert result.never_started and result.estimate_usd and result.estimate_usd > 0
    assert result.against_estimate == f"estimated ${result.estimate_usd:.4f}; it never started"
    assert (result.eta_s, result.eta_placeholder, result.eta_note) == (None, "—", "never started")


@pytest.mark.parametrize(
    ("cost", "budget", "percent", "text"),
    [
        ("0.0143", "0.50", 3, "3%"),  # 2.86%: the nearest, not 2%
        ("0.0001", "0.50", 1, "<1%"),
        ("0", "0.50", 0, "0%"),
        ("0.4999", "0.50", 99, "99%"),  # not 100% before the budget is reached
        ("0.50", "0.50", 100, "100%"),
    ],
)
def test_the_budget_used_rounds_to_the_nearest_percent(launched, cost, budget, percent, text):
    run = launched({"a": ("researcher", [])})
    Run.objects.filter(pk=run.pk).update(cost_usd=cost, budget_usd=budget)
    result = totals(run)
    assert (result.cost_percent, result.cost_percent_text) == (percent, text)


def test_effective_cap_is_the_tightest_limit(launched, demo_agents):
    run = launched({"a": ("researcher", []), "b": ("researcher", [])}, cap=10)
    cap = effective_cap(run)
    assert (cap.value, cap.limited_by) == (demo_agents["researcher"].max_concurrency, "agent limits")
    ProviderLimit.objects.filter(provider="simulated", model="sim-1").update(max_in_flight=8, effective_in_flight=2)
    cap = effective_cap(run)
    assert (cap.value, cap.limited_by) == (2, "provider in-flight limit")
    Run.objects.filter(pk=run.pk).update(cap=1)
    run.refresh_from_db()
    assert effective_cap(run).value == 1


def test_the_elapsed_note_says_how_much_of_it_nothing_could_start():
    from datetime import UTC, datetime

    from orchestrator.readmodels.totals import idle_parts

    at = datetime(2026, 11, 27, 10, 9, 30, tzinfo=UTC)
    assert idle_parts(None, 0.0, 0.0) == []
    assert idle_parts(None, 0.04, 0.0) == []  # less than the tenth of a second a duration shows
    assert idle_parts(at, 0.0, 0.0) == ["paused since 10:09:30 UTC"]
    assert idle_parts(None, 250.0, 0.0) == ["4 min 10 s of it paused"]
    assert idle_parts(at, 250.0, 7800.0) == [
        "paused since 10:09:30 UTC",
        "4 min 10 s paused before that",
        "2 h 10 min of it ended, until it was reopened",
    ]


# --- Tokens no price counts -----------------------------------------------------------------------


def test_the_totals_name_a_model_without_a_price_and_the_tokens_its_tasks_used(launched):
    """The Cost card read "$0.00 of $10.00 · 0% used" after an unpriced model used 1,212 tokens:
    the spend is unknown, not zero, and the budget cannot stop those calls."""
    Agent.objects.filter(name="researcher").update(model="sim-unpriced")
    run = launched({"a": ("researcher", []), "b": ("researcher", []), "w": ("writer", ["a"])}, cap=3)
    assert totals(run).unpriced_note == ""  # nothing used yet
    succeed(run.tasks.get(subtask__key="a"), tokens=(1_000, 200))
    succeed(run.tasks.get(subtask__key="w"), tokens=(500, 500))  # sim-1 has a price
    attempt = start(run.tasks.get(subtask__key="b"))
    Attempt.objects.filter(pk=attempt.pk).update(output_tokens=12)  # streamed so far
    result = totals(run)
    assert result.unpriced_tokens == {"simulated:sim-unpriced": 1_212}
    assert result.unpriced_note == (
        "simulated:sim-unpriced has no price: its 1,212 tokens are not in the cost, and the budget cannot stop"
        " them (set prices in the admin under provider limits)"
    )


def test_a_run_on_priced_models_says_nothing_of_prices(launched):
    run = launched({"a": ("researcher", [])})
    succeed(run.tasks.get(subtask__key="a"), tokens=(1_000, 212))
    assert totals(run).unpriced_tokens == {}
    assert totals(run).unpriced_note == ""


def test_an_ended_runs_totals_read_the_prices_once(launched, django_assert_num_queries):
    """An ended run has no agent with work left, so no in-flight cap to read: its prices are the
    one read more the unpriced tokens cost, and a live frame of a running run reads none more."""
    Agent.objects.filter(name="researcher").update(model="sim-unpriced")
    run = launched({"a": ("researcher", [])})
    succeed(run.tasks.get(subtask__key="a"), tokens=(1_000, 212))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED, finished_at=timezone.now())
    run.refresh_from_db()
    states = task_states(run)
    agents = agents_of(states)
    elsewhere = other_runs.other_runs(run, [])
    totals(run, states, elsewhere=elsewhere, agents=agents)  # a first frame reads the plan
    # the providers' limits and prices, the checkpoints, the attempts still stopping
    with django_assert_num_queries(3) as captured:
        result = totals(run, states, elsewhere=elsewhere, agents=agents)
    assert len([q for q in captured.captured_queries if "orchestrator_providerlimit" in q["sql"]]) == 1
    assert result.unpriced_tokens == {"simulated:sim-unpriced": 1_212}


def test_a_provider_limit_with_both_prices_at_0_is_no_price(launched):
    """A limit made for its rates alone keeps the default prices of 0: its runs' cost read $0.00
    with no word of the tokens it leaves out, as if someone had set the model free."""
    ProviderLimit.objects.create(provider="simulated", model="sim-rates-only", max_in_flight=4)
    Agent.objects.filter(name="researcher").update(model="sim-rates-only")
    run = launched({"a": ("researcher", [])})
    succeed(run.tasks.get(subtask__key="a"), tokens=(1_000, 212))
    assert totals(run).unpriced_tokens == {"simulated:sim-rates-only": 1_212}
    assert totals(run).unpriced_note.startswith("simulated:sim-rates-only has no price: its 1,212 tokens")
    ProviderLimit.objects.filter(model="sim-rates-only").update(output_price_per_mtok=Decimal("0.5"))
    assert totals(run).unpriced_note == ""  # one price set is a price


def _ended_at(run: Run, *, estimate: str, cost: str) -> Run:
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.SUCCEEDED,
        started_at=timezone.now() - timedelta(seconds=5),
        finished_at=timezone.now(),
        estimate_usd=Decimal(estimate),
        cost_usd=Decimal(cost),
    )
    run.refresh_from_db()
    return run


def test_the_cost_against_the_estimate_says_it_counts_priced_tokens_only_when_some_have_no_price(launched):
    """The estimate counts an unpriced model at $0 and so does the cost: "it cost 50% of that"
    left out that the unpriced tokens are in neither."""
    Agent.objects.filter(name="researcher").update(model="sim-unpriced")
    run = launched({"a": ("researcher", []), "w": ("writer", ["a"])})
    succeed(run.tasks.get(subtask__key="w"), tokens=(500, 500))
    _ended_at(run, estimate="0.0100", cost="0.0050")
    assert totals(run).against_estimate == "estimated $0.0100: it cost 50% of that"
    succeed(run.tasks.get(subtask__key="a"), tokens=(1_000, 212))
    assert totals(run).against_estimate == "estimated $0.0100: its priced tokens cost 50% of that"
    _ended_at(run, estimate="0.0100", cost="0.0250")
    assert totals(run).against_estimate == "estimated $0.0100: its priced tokens cost 2.5× that"


def test_a_plan_priced_in_part_names_the_models_its_estimate_counts_at_zero(launched, demo_agents):
    """A plan waiting for approval read "estimated $0.0150", its unpriced agent counted at $0 unsaid."""
    Agent.objects.filter(name="researcher").update(model="sim-unpriced")
    run = launched({"a": ("researcher", []), "w": ("writer", ["a"])}, require_plan_approval=True)
    waiting = totals(run)
    assert waiting.estimate_usd and waiting.estimate_usd > 0  # the writer's model has a price
    assert waiting.against_estimate == (
        f"estimated ${waiting.estimate_usd:.4f} (simulated:sim-unpriced has no price: counted as $0)"
    )
    runs.cancel(run)  # as a rejected plan ends it
    assert totals(run).against_estimate.endswith("counted as $0); it never started")
    started = launched({"a": ("researcher", []), "w": ("writer", ["a"])})
    Run.objects.filter(pk=started.pk).update(started_at=timezone.now())
    # Once started, the Cost card counts the unpriced tokens themselves (unpriced_note).
    assert "no price" not in totals(Run.objects.get(pk=started.pk)).against_estimate


def test_the_unpriced_note_names_each_model_with_its_tokens():
    assert unpriced_text({"anthropic:a": 1_000, "openai:b": 212}) == (
        "anthropic:a (1,000 tokens) and openai:b (212 tokens) have no price: their 1,212 tokens are not in the"
        " cost, and the budget cannot stop them (set prices in the admin under provider limits)"
    )
    assert unpriced_text({"openai:b": 1}).startswith("openai:b has no price: its 1 token is not in the cost,")
    assert unpriced_text({}) == ""
