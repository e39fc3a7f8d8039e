import itertools

import pytest

from orchestrator.plans import dag

# A small known DAG:
#
#   a(2) ──► b(5) ──► d(1) ──► e(1)
#     └────► c(1) ──┘
#   f(3)  (independent)
KEYS = ["a", "b", "c", "d", "e", "f"]
EDGES = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")]
WEIGHT = {"a": 2.0, "b": 5.0, "c": 1.0, "d": 1.0, "e": 1.0, "f": 3.0}


def test_layers_are_topological_generations_in_key_order():
    assert dag.layers(KEYS, EDGES) == [["a", "f"], ["b", "c"], ["d"], ["e"]]


def test_remaining_path_lengths_include_own_weight_and_heaviest_branch():
    remaining = dag.remaining_path_lengths(KEYS, EDGES, WEIGHT)

    assert remaining == {"a": 9.0, "b": 7.0, "c": 3.0, "d": 2.0, "e": 1.0, "f": 3.0}


def test_a_graph_prepared_once_serves_changing_weights():
    prepared = dag.SinksFirst.of(KEYS, EDGES)

    assert prepared.remaining_path_lengths(WEIGHT) == dag.remaining_path_lengths(KEYS, EDGES, WEIGHT)
    done_b = {**WEIGHT, "a": 0.0, "b": 0.0}
    assert prepared.remaining_path_lengths(done_b) == {"a": 3.0, "b": 2.0, "c": 3.0, "d": 2.0, "e": 1.0, "f": 3.0}
    with pytest.raises(dag.CycleError):
        dag.SinksFirst.of(["a", "b"], [("a", "b"), ("b", "a")])


def test_missing_weight_counts_as_zero():
    assert dag.remaining_path_lengths(["a", "b"], [("a", "b")], {"b": 4.0}) == {"a": 4.0, "b": 4.0}


def test_critical_path_follows_heaviest_branch():
    assert dag.critical_path(KEYS, EDGES, WEIGHT) == (["a", "b", "d", "e"], 9.0)


def test_critical_path_ties_go_to_the_earlier_key():
    assert dag.critical_path(["x", "y"], [], {"x": 1.0, "y": 1.0}) == (["x"], 1.0)


def test_critical_path_of_empty_graph():
    assert dag.critical_path([], [], {}) == ([], 0.0)


def test_summarize_small_known_dag():
    summary = dag.summarize(KEYS, EDGES, WEIGHT)

    assert summary == dag.DagSummary(
        subtasks=6, edges=5, depth=4, widest_layer=2, critical_path=["a", "b", "d", "e"], critical_path_s=9.0
    )


def test_find_cycles_names_every_key_on_the_cycle_starting_at_first_key():
    keys = ["a", "b", "c", "d"]
    edges = [("c", "a"), ("a", "b"), ("b", "c"), ("c", "d")]

    assert dag.find_cycles(keys, edges) == [["a", "b", "c"]]


def test_find_cycles_reports_separate_cycles_and_skips_self_loops():
    keys = ["a", "b", "c", "d", "e"]
    edges = [("a", "b"), ("b", "a"), ("d", "e"), ("e", "d"), ("c", "c")]

    assert dag.find_cycles(keys, edges) == [["a", "b"], ["d", "e"]]


def test_find_cycles_of_a_dag_is_empty():
    assert dag.find_cycles(KEYS, EDGES) == []


def test_functions_needing_an_order_refuse_a_cycle():
    with pytest.raises(dag.CycleError, match="a → b → a"):
        dag.layers(["a", "b"], [("a", "b"), ("b", "a")])


def test_edge_to_unknown_key_is_an_error():
    with pytest.raises(ValueError, match="unknown key 'z'"):
        dag.layers(["a"], [("a", "z")])


def test_long_chain_is_fast_and_deep():
    keys = [f"t{i}" for i in range(2000)]
    edges = list(itertools.pairwise(keys))

    summary = dag.summarize(keys, edges, dict.fromkeys(keys, 1.0))

    assert (summary.depth, summary.widest_layer, summary.critical_path_s) == (2000, 1, 2000.0)
