"""The run page's DAG: fan-out groups, collapsing, final and upstream tasks."""

from __future__ import annotations

from orchestrator.readmodels.graph import collapsed_by_default, fanout_groups, final_tasks, graph


def test_fanout_groups_need_same_upstreams_and_agent():
    agent_of = {"root": "r", **{f"p{i}": "probe" for i in range(7)}, "odd": "other", "sink": "w"}
    edges = [("root", f"p{i}") for i in range(7)] + [("root", "odd")] + [(f"p{i}", "sink") for i in range(7)]
    assert fanout_groups(agent_of, edges) == [[f"p{i}" for i in range(7)]]
    # Below the minimum size: no group.
    assert fanout_groups(agent_of, edges, min_size=8) == []


def test_fanout_groups_split_by_upstream_set():
    agent_of = {"a": "r", "b": "r", **{f"x{i}": "p" for i in range(6)}, **{f"y{i}": "p" for i in range(6)}}
    edges = [("a", f"x{i}") for i in range(6)] + [("b", f"y{i}") for i in range(6)] + [("a", "y0")]
    groups = fanout_groups(agent_of, edges, min_size=5)
    assert groups == [[f"x{i}" for i in range(6)], [f"y{i}" for i in range(1, 6)]]


def test_roots_with_the_same_agent_form_a_group():
    agent_of = {f"r{i}": "researcher" for i in range(6)}
    assert fanout_groups(agent_of, []) == [[f"r{i}" for i in range(6)]]


def test_groups_collapse_largest_first_until_layers_are_narrow():
    nodes = ["root", *[f"a{i}" for i in range(6)], *[f"b{i}" for i in range(4)], *[f"c{i}" for i in range(3)]]
    edges = [("root", n) for n in nodes[1:]]
    groups = [nodes[1:7], nodes[7:11], nodes[11:14]]  # 6, 4 and 3 siblings in one layer of 13
    assert collapsed_by_default(nodes, edges, groups, max_layer=20) == set()
    assert collapsed_by_default(nodes, edges, groups, max_layer=10) == {0}  # 13 → 8
    assert collapsed_by_default(nodes, edges, groups, max_layer=6) == {0, 1}  # → 5
    assert collapsed_by_default(nodes, edges, groups, max_layer=2) == {0, 1, 2}  # as far as it goes


def test_a_wide_layer_without_groups_does_not_stop_collapsing_another():
    nodes = ["r", *[f"x{i}" for i in range(5)], "s", *[f"y{i}" for i in range(4)]]
    agents_differ = [("r", f"x{i}") for i in range(5)] + [("x0", "s")] + [("s", f"y{i}") for i in range(4)]
    groups = [[f"y{i}" for i in range(4)]]
    assert collapsed_by_default(nodes, agents_differ, groups, max_layer=3) == {0}


def test_graph_has_every_edge_and_collapses_a_wide_fanout(launched):
    tasks = {"frame": ("researcher", [])}
    tasks.update({f"probe_{i:02d}": ("researcher", ["frame"]) for i in range(12)})
    tasks["merge"] = ("writer", [f"probe_{i:02d}" for i in range(12)])
    run = launched(tasks)
    result = graph(run)
    assert len(result.nodes) == 14
    assert len(result.edges) == 24 == run.plan.dependencies.count()
    fanouts = [g for g in result.groups if g["mode"] == "fanout"]
    assert len(fanouts) == 1 and result.mode == "fanout"
    group = fanouts[0]
    assert group["size"] == 12 and group["collapsed"] and group["agent"] == "researcher"
    members = {n["id"] for n in result.nodes if n["group"] == group["id"]}
    assert members == set(group["members"])
    ids = {n["id"] for n in result.nodes}
    assert all(e["source"] in ids and e["target"] in ids for e in result.edges)


def test_final_tasks_are_the_sinks(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("writer", ["a"])})
    assert [t.subtask.key for t in final_tasks(run)] == ["b", "c"]


# --- Grouping modes: by fan-out, by agent within a step, by step -----------------------------------


def test_agent_step_groups_split_each_step_by_agent():
    from orchestrator.readmodels.graph import agent_step_groups

    agent_of = {"root": "r", "a1": "x", "a2": "x", "b1": "y", "b2": "y", "b3": "y", "lone": "z", "sink": "w"}
    edges = [("root", n) for n in ("a1", "a2", "b1", "b2", "b3", "lone")] + [("a1", "sink")]
    assert agent_step_groups(agent_of, edges) == [["a1", "a2"], ["b1", "b2", "b3"]]


def test_step_groups_are_the_layers_of_two_or_more():
    from orchestrator.readmodels.graph import step_groups

    nodes = ["r", "a", "b", "c", "s"]
    edges = [("r", "a"), ("r", "b"), ("r", "c"), ("a", "s"), ("b", "s")]
    assert step_groups(nodes, edges) == [["a", "b", "c"]]


def test_the_page_starts_by_agent_when_fanouts_leave_a_layer_too_wide():
    from orchestrator.readmodels.graph import default_mode, widest_layer

    nodes = ["r", *[f"c{i}" for i in range(12)]]
    chains = [("r", f"c{i}") for i in range(12)]  # 12 siblings of different agents: no fan-out group
    assert widest_layer(nodes, chains, []) == 12
    assert default_mode(nodes, chains, []) == "agent"
    fan = [nodes[1:]]  # the same 12 as one collapsed fan-out
    assert widest_layer(nodes, chains, fan) == 1 and default_mode(nodes, chains, fan) == "fanout"


def test_the_large_run_offers_every_mode_and_starts_readable(db, personas):
    from tests.large_run import finished_large_run

    run = finished_large_run()
    result = graph(run)
    by_mode = {mode: [g for g in result.groups if g["mode"] == mode] for mode in ("fanout", "agent", "step")}
    assert len(by_mode["fanout"]) == 12 + 1  # the 12 probe fan-outs, and the 12 areas below scope
    assert {g["label"] for g in by_mode["agent"]} >= {"240 × researcher · step 3", "15 × tester · step 5"}
    assert [g["label"] for g in by_mode["step"]] == [
        "Step 2 · 12 tasks",
        "Step 3 · 240 tasks",
        "Step 4 · 12 tasks",
        "Step 5 · 27 tasks",
    ]
    assert result.mode == "agent"  # after its fan-outs collapse, step 5 still shows 27 nodes
