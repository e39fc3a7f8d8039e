"""The run page's read model: pure helpers first, then the database-backed views of a run."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from orchestrator import events
from orchestrator.engine import runs, scheduler
from orchestrator.models import Attempt, Event, ProviderLimit, Run, TaskRun
from orchestrator.readmodels import snapshots

State = TaskRun.State


# --- Pure helpers -------------------------------------------------------------------------------


def test_display_state_separates_held_back_from_ready():
    assert snapshots.display_state(State.READY, "") == State.READY
    assert snapshots.display_state(State.READY, "run cap reached (4 running)") == snapshots.WAITING
    assert snapshots.display_state(State.THROTTLED, "provider sim limit") == State.THROTTLED
    assert snapshots.display_state(State.QUEUED, "stale reason") == State.QUEUED


def test_fanout_groups_need_same_upstreams_and_agent():
    agent_of = {"root": "r", **{f"p{i}": "probe" for i in range(7)}, "odd": "other", "sink": "w"}
    edges = [("root", f"p{i}") for i in range(7)] + [("root", "odd")] + [(f"p{i}", "sink") for i in range(7)]
    assert snapshots.fanout_groups(agent_of, edges) == [[f"p{i}" for i in range(7)]]
    # Below the minimum size: no group.
    assert snapshots.fanout_groups(agent_of, edges, min_size=8) == []


def test_fanout_groups_split_by_upstream_set():
    agent_of = {"a": "r", "b": "r", **{f"x{i}": "p" for i in range(6)}, **{f"y{i}": "p" for i in range(6)}}
    edges = [("a", f"x{i}") for i in range(6)] + [("b", f"y{i}") for i in range(6)] + [("a", "y0")]
    groups = snapshots.fanout_groups(agent_of, edges, min_size=5)
    assert groups == [[f"x{i}" for i in range(6)], [f"y{i}" for i in range(1, 6)]]


def test_roots_with_the_same_agent_form_a_group():
    agent_of = {f"r{i}": "researcher" for i in range(6)}
    assert snapshots.fanout_groups(agent_of, []) == [[f"r{i}" for i in range(6)]]


def test_groups_collapse_largest_first_until_layers_are_narrow():
    nodes = ["root", *[f"a{i}" for i in range(6)], *[f"b{i}" for i in range(4)], *[f"c{i}" for i in range(3)]]
    edges = [("root", n) for n in nodes[1:]]
    groups = [nodes[1:7], nodes[7:11], nodes[11:14]]  # 6, 4 and 3 siblings in one layer of 13
    assert snapshots.collapsed_by_default(nodes, edges, groups, max_layer=20) == set()
    assert snapshots.collapsed_by_default(nodes, edges, groups, max_layer=10) == {0}  # 13 → 8
    assert snapshots.collapsed_by_default(nodes, edges, groups, max_layer=6) == {0, 1}  # → 5
    assert snapshots.collapsed_by_default(nodes, edges, groups, max_layer=2) == {0, 1, 2}  # as far as it goes


def test_a_wide_layer_without_groups_does_not_stop_collapsing_another():
    nodes = ["r", *[f"x{i}" for i in range(5)], "s", *[f"y{i}" for i in range(4)]]
    agents_differ = [("r", f"x{i}") for i in range(5)] + [("x0", "s")] + [("s", f"y{i}") for i in range(4)]
    groups = [[f"y{i}" for i in range(4)]]
    assert snapshots.collapsed_by_default(nodes, agents_differ, groups, max_layer=3) == {0}


def test_remaining_seconds_is_the_larger_of_critical_path_and_work_over_cap():
    chain = ["a", "b", "c"]
    assert snapshots.remaining_seconds(chain, [("a", "b"), ("b", "c")], {"a": 1, "b": 2, "c": 3}, cap=4) == 6
    wide = [f"t{i}" for i in range(8)]
    assert snapshots.remaining_seconds(wide, [], {k: 2.0 for k in wide}, cap=2) == 8
    assert snapshots.remaining_seconds(wide, [], {k: 2.0 for k in wide}, cap=100) == 2
    assert snapshots.remaining_seconds([], [], {}, cap=1) == 0


def test_finished_tasks_weigh_nothing_in_the_remaining_time():
    keys = ["a", "b"]
    assert snapshots.remaining_seconds(keys, [("a", "b")], {"a": 0.0, "b": 5.0}, cap=1) == 5


def test_assign_tracks_uses_the_fewest_tracks():
    intervals = [(0, 10), (5, 15), (10, 20), (12, None), (30, 40)]
    tracks = snapshots.assign_tracks(intervals)
    assert tracks == [0, 1, 0, 2, 0]
    # An open interval (still running) keeps its track for good.
    assert snapshots.assign_tracks([(0, None), (5, 6), (7, 8)]) == [0, 1, 1]
    assert snapshots.assign_tracks([]) == []


def test_matches_type_filter_agrees_with_the_query(transactional_db, run_with_events):
    run = run_with_events
    types = snapshots.event_types(run)
    for type_filter in ("", "all", "task", "run", "task.progress", "checkpoint.created", "plan"):
        expected = {t for t in types if snapshots.matches_type_filter(t, type_filter)}
        got = {e.type for e in snapshots.event_log(run, type_filter=type_filter, limit=10_000)}
        assert got == expected, type_filter


# --- A run in the database ----------------------------------------------------------------------


@pytest.fixture
def launched(make_plan, demo_agents, priced_limit, monkeypatch):
    monkeypatch.setattr(scheduler, "enqueue_attempt", lambda attempt_id: None)

    def launch(tasks: dict, **kwargs) -> Run:
        kwargs.setdefault("budget_usd", "5")
        return runs.launch(make_plan(tasks), **kwargs)

    return launch


@pytest.fixture
def run_with_events(launched):
    run = launched({"scope": ("researcher", []), "a": ("researcher", ["scope"]), "w": ("writer", ["a"])})
    task = run.tasks.get(subtask__key="scope")
    with transaction.atomic():
        events.record("task.progress", run=run, task=task, payload={"progress": 10, "output_tokens": 5})
    return run


def start(task: TaskRun, *, ago_s: float = 1.0, worker: str = "w:1") -> Attempt:
    started = timezone.now() - timedelta(seconds=ago_s)
    attempt = Attempt.objects.filter(task_run=task).order_by("-number").first() or Attempt.objects.create(
        task_run=task, number=1
    )
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.RUNNING, worker=worker, started_at=started)
    TaskRun.objects.filter(pk=task.pk).update(state=State.RUNNING, started_at=started, attempt_count=attempt.number)
    return attempt


def succeed(task: TaskRun, *, took_s: float = 1.0, tokens: tuple[int, int] = (100, 50), cost: str = "0.001") -> None:
    end = timezone.now()
    begin = end - timedelta(seconds=took_s)
    attempt = Attempt.objects.filter(task_run=task).order_by("-number").first() or Attempt.objects.create(task_run=task, number=1)
    Attempt.objects.filter(pk=attempt.pk).update(
        state=Attempt.State.SUCCEEDED, started_at=begin, finished_at=end, input_tokens=tokens[0], output_tokens=tokens[1]
    )
    TaskRun.objects.filter(pk=task.pk).update(
        state=State.SUCCEEDED, started_at=begin, finished_at=end, progress=100, output="ok",
        input_tokens=tokens[0], output_tokens=tokens[1], cost_usd=Decimal(cost), attempt_count=attempt.number,
    )


def test_task_views_carry_display_state_and_live_token_burn(launched):
    run = launched({"scope": ("researcher", []), "b": ("researcher", [])}, cap=1)
    scope, b = run.tasks.get(subtask__key="scope"), run.tasks.get(subtask__key="b")
    start(scope)
    TaskRun.objects.filter(pk=b.pk).update(state=State.READY, wait_reason="run cap reached (1 running)")
    with transaction.atomic():
        for n in (3, 9, 17):
            events.record("task.progress", run=run, task=scope, payload={"progress": n, "output_tokens": n})
    views = {v.key: v for v in snapshots.task_views(run)}
    assert views["scope"].display_state == State.RUNNING
    assert views["scope"].live_output_tokens == 17
    assert views["scope"].tokens == 17
    assert views["b"].display_state == snapshots.WAITING
    assert views["b"].state_label == "held back"


def test_graph_has_every_edge_and_collapses_a_wide_fanout(launched):
    tasks = {"frame": ("researcher", [])}
    tasks.update({f"probe_{i:02d}": ("researcher", ["frame"]) for i in range(12)})
    tasks["merge"] = ("writer", [f"probe_{i:02d}" for i in range(12)])
    run = launched(tasks)
    graph = snapshots.graph(run)
    assert len(graph.nodes) == 14
    assert len(graph.edges) == 24 == run.plan.dependencies.count()
    assert len(graph.groups) == 1
    group = graph.groups[0]
    assert group["size"] == 12 and group["collapsed"] and group["agent"] == "researcher"
    members = {n["id"] for n in graph.nodes if n["group"] == group["id"]}
    assert members == set(group["members"])
    ids = {n["id"] for n in graph.nodes}
    assert all(e["source"] in ids and e["target"] in ids for e in graph.edges)


def test_lanes_show_running_work_slots_across_runs_queue_tokens_and_cost(launched, demo_agents):
    run = launched({"s1": ("researcher", []), "s2": ("researcher", []), "s3": ("researcher", []), "w": ("writer", ["s1"])})
    other = launched({"x": ("researcher", [])})
    s1, s2, s3 = (run.tasks.get(subtask__key=k) for k in ("s1", "s2", "s3"))
    start(s1)
    TaskRun.objects.filter(pk=s2.pk).update(state=State.QUEUED)
    TaskRun.objects.filter(pk=s3.pk).update(state=State.THROTTLED, wait_reason="provider busy")
    start(other.tasks.get())
    succeed(run.tasks.get(subtask__key="w"), tokens=(10, 20), cost="0.002")
    lanes = {lane.agent.name: lane for lane in snapshots.lanes(run)}
    researcher = lanes["researcher"]
    assert [v.key for v in researcher.running] == ["s1"]
    assert researcher.queued == 1
    assert researcher.waiting == 1
    assert researcher.slots_used == 3  # s1 and s2 here, x in the other run
    assert researcher.cap == demo_agents["researcher"].max_concurrency
    assert researcher.slot_marks.count(True) == 3
    writer = lanes["writer"]
    assert writer.done == 1 and writer.total == 1
    assert writer.tokens == 30 and writer.cost_usd == Decimal("0.002")
    assert list(lanes) == ["researcher", "writer"]


def test_totals_count_states_and_estimate_the_time_left(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("writer", ["b"])}, cap=3)
    totals = snapshots.totals(run)
    assert totals.total == 3 and totals.done == 0
    assert totals.eta_s is not None and totals.eta_s > 0
    full = totals.eta_s
    succeed(run.tasks.get(subtask__key="a"), took_s=0.2)  # as fast as estimated (fast_latency)
    later = snapshots.totals(run)
    assert later.done == 1
    assert later.eta_s == pytest.approx(full * 2 / 3)  # two of three equal steps left
    succeed(run.tasks.get(subtask__key="b"), took_s=0.6)  # three times slower: the ETA learns
    assert snapshots.totals(run).eta_s == pytest.approx(full / 3 * 2)  # median pace 2
    counts = {c.state: c.count for c in later.counts}
    assert counts[State.SUCCEEDED] == 1
    assert [c.state for c in later.counts] == [s for s in snapshots.DISPLAY_ORDER if s in counts]


def test_no_eta_once_the_run_ended(launched):
    run = launched({"a": ("researcher", [])})
    runs.cancel(run)
    totals = snapshots.totals(run)
    assert totals.eta_s is None
    assert totals.status == Run.Status.CANCELLED


def test_effective_cap_is_the_tightest_limit(launched, demo_agents):
    run = launched({"a": ("researcher", []), "b": ("researcher", [])}, cap=10)
    cap = snapshots.effective_cap(run)
    assert (cap.value, cap.limited_by) == (demo_agents["researcher"].max_concurrency, "agent limits")
    ProviderLimit.objects.filter(provider="simulated", model="sim-1").update(max_in_flight=8, effective_in_flight=2)
    cap = snapshots.effective_cap(run)
    assert (cap.value, cap.limited_by) == (2, "provider in-flight limit")
    Run.objects.filter(pk=run.pk).update(cap=1)
    run.refresh_from_db()
    assert snapshots.effective_cap(run).value == 1


def test_pace_scales_estimates_by_this_run_s_finished_tasks(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", [])})
    tasks = list(snapshots.tasks_query(run.pk))
    estimates = {"a": 2.0, "b": 2.0}
    assert snapshots.pace(tasks, estimates) == 1.0
    succeed(run.tasks.get(subtask__key="a"), took_s=6.0)
    tasks = list(snapshots.tasks_query(run.pk))
    assert snapshots.pace(tasks, estimates) == pytest.approx(3.0, rel=0.05)


def test_gantt_puts_overlapping_attempts_on_separate_tracks(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", []), "w": ("writer", ["a", "b"])})
    a, b = run.tasks.get(subtask__key="a"), run.tasks.get(subtask__key="b")
    start(a, ago_s=5)
    start(b, ago_s=3)
    gantt = snapshots.gantt(run)
    lanes = {lane.agent: lane for lane in gantt.lanes}
    assert [len(track) for track in lanes["researcher"].tracks] == [1, 1]
    assert lanes["writer"].tracks == [[]]
    bar = lanes["researcher"].tracks[0][0]
    assert bar.key == "a" and bar.end_ms is None and bar.worker == "w:1"
    assert gantt.bars == 2


def test_event_log_is_newest_first_and_filterable(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", [])})
    a = run.tasks.get(subtask__key="a")
    with transaction.atomic():
        events.record("task.progress", run=run, task=a, payload={"progress": 1})
    log = snapshots.event_log(run)
    seqs = [e.seq for e in log]
    assert seqs == sorted(seqs, reverse=True)
    assert all(e.type != "task.progress" for e in log)
    assert any(e.type == "task.progress" for e in snapshots.event_log(run, type_filter="all"))
    assert {e.task_run_id for e in snapshots.event_log(run, task_id=a.pk)} == {a.pk}
    newest = seqs[0]
    assert snapshots.event_log(run, after_seq=newest) == []
    assert len(snapshots.event_log(run, type_filter="all", limit=2)) == 2


def test_final_tasks_are_the_sinks(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("writer", ["a"])})
    assert [t.subtask.key for t in snapshots.final_tasks(run)] == ["b", "c"]


def test_pending_checkpoints_and_upstreams(launched):
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"], {"gate": "before"})})
    succeed(run.tasks.get(subtask__key="a"))
    scheduler.advance(run.pk)
    pending = snapshots.pending_checkpoints(run)
    assert [(c.kind, c.task_run.subtask.key) for c in pending] == [("before", "b")]
    b = run.tasks.get(subtask__key="b")
    assert [t.subtask.key for t in snapshots.upstream_tasks(b)] == ["a"]
    assert Event.objects.filter(run=run, type="checkpoint.created").exists()
