import json
import math
from pathlib import Path
from typing import get_args

import pytest
import yaml

from orchestrator import plans
from orchestrator.models import Agent, Dependency, Plan, Subtask
from orchestrator.plans import dag, parsing
from orchestrator.plans.document import Gate

pytestmark = pytest.mark.django_db


@pytest.fixture
def agents():
    return {
        "researcher": Agent.objects.create(name="researcher"),
        "writer": Agent.objects.create(name="writer", provider_options={"latency": {"dist": "fixed", "seconds": 4}}),
        "drafty": Agent.objects.create(name="drafty", status=Agent.Status.DRAFT),
        "old": Agent.objects.create(name="old", status=Agent.Status.RETIRED),
    }


def subtask(key, agent="researcher", **fields):
    return {"key": key, "agent": agent, "title": f"Do {key}", **fields}


def plan_data(*subtasks, **top):
    return {"goal": "Compare three vector databases", "subtasks": list(subtasks) or [subtask("a")], **top}


def problems(data, **kwargs):
    """Every problem `validate` reports for `data`, as the strings a person reads."""
    with pytest.raises(plans.PlanValidationError) as caught:
        plans.validate(data, **kwargs)
    return [str(error) for error in caught.value.errors]


def only_problem(data, **kwargs):
    found = problems(data, **kwargs)
    assert len(found) == 1, found
    return found[0]


GOOD_YAML = """\
goal: Compare three vector databases
defaults: {timeout_s: 60, max_retries: 2}
subtasks:
  - key: research_a
    agent: researcher
    title: Research A
    instructions: Read the docs of A.
    estimate: {input_tokens: 800, output_tokens: 600}
  - key: research_b
    agent: researcher
    title: Research B
    timeout_s: 30
    priority: 5
  - key: review
    agent: writer
    title: Review
    depends_on: [research_a, research_b]
    gate: before
    max_retries: 0
  - key: report
    agent: writer
    title: Report
    depends_on: [review]
    gate: after
"""


# --- A good plan ---------------------------------------------------------------------------------


def test_good_plan_validates_with_resolved_defaults(agents):
    spec = plans.validate(plans.parse_document(GOOD_YAML))

    assert spec.goal == "Compare three vector databases"
    assert spec.keys == ["research_a", "research_b", "review", "report"]
    assert spec.edges == [("research_a", "review"), ("research_b", "review"), ("review", "report")]
    first, second, review, _ = spec.subtasks
    assert (first.timeout_s, first.max_retries) == (60, 2)  # from defaults
    assert (second.timeout_s, second.priority) == (30, 5)
    assert (review.gate, review.max_retries) == ("before", 0)  # an explicit 0 beats the default
    assert (first.estimated_input_tokens, first.estimated_output_tokens) == (800, 600)
    assert spec.agents == {"researcher": agents["researcher"], "writer": agents["writer"]}


def test_timeout_and_retries_stay_unset_without_defaults(agents):
    spec = plans.validate(plan_data(subtask("a")))

    assert (spec.subtasks[0].timeout_s, spec.subtasks[0].max_retries) == (None, None)
    assert spec.subtasks[0].gate == "none"


def test_agents_are_looked_up_in_one_query(agents, django_assert_num_queries):
    data = plan_data(*(subtask(f"t{i}", agent="researcher" if i % 2 else "writer") for i in range(50)))

    with django_assert_num_queries(1):
        plans.validate(data)


def test_given_agents_mapping_avoids_the_database(django_assert_num_queries):
    with django_assert_num_queries(0):
        spec = plans.validate(plan_data(subtask("a")), agents={"researcher": Agent(name="researcher")})

    assert spec.keys == ["a"]


def test_summary_of_a_known_dag(agents):
    spec = plans.validate(plans.parse_document(GOOD_YAML))

    summary = spec.summary()

    # research_a: 600 tokens / 50 = 12 s; research_b: 1 s minimum; review, report: writer's fixed 4 s.
    assert summary == dag.DagSummary(
        subtasks=4,
        edges=3,
        depth=3,
        widest_layer=2,
        critical_path=["research_a", "review", "report"],
        critical_path_s=20.0,
    )


# --- Every validation error --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([1, 2], "plan: the document must be a mapping with goal and subtasks, got a list of 2"),
        ("just text", 'plan: the document must be a mapping with goal and subtasks, got "just text"'),
        (None, "plan: the document must be a mapping with goal and subtasks, got nothing (null)"),
    ],
)
def test_document_must_be_a_mapping(data, expected):
    assert only_problem(data, agents={}) == expected


def test_missing_top_level_fields():
    assert problems({}, agents={}) == [
        "goal: is required: a sentence saying what the plan is for",
        "subtasks: is required: a list of subtasks, each with key, agent and title",
    ]


@pytest.mark.parametrize(
    ("top", "expected"),
    [
        ({"goal": "   "}, "goal: must not be empty"),
        ({"goal": 42}, "goal: must be a string, got 42"),
        ({"subtasks": []}, "subtasks: must hold at least one subtask"),
        ({"subtasks": {"a": 1}}, "subtasks: must be a list of subtasks, got a mapping"),
        ({"defaults": [60]}, "defaults: must be a mapping of timeout_s and max_retries, got a list of 1"),
        ({"defaults": {"timeout_s": 0}}, "defaults: timeout_s: must be an integer between 1 and 3600, got 0"),
        ({"defaults": {"max_retries": True}}, "defaults: max_retries: must be an integer between 0 and 20, got true"),
        (
            {"defaults": {"timeout": 60}},
            'defaults: timeout: unknown field (did you mean "timeout_s"?); allowed fields: timeout_s, max_retries',
        ),
        ({"version": 2}, "plan: version: unknown field; allowed fields: goal, defaults, subtasks"),
    ],
)
def test_top_level_problems(agents, top, expected):
    assert only_problem(plan_data(subtask("a")) | top) == expected


def test_missing_subtask_fields_name_the_index():
    assert problems(plan_data({"instructions": "?"}), agents={}) == [
        "subtasks[0]: key: is required: a short unique name such as research_a",
        "subtasks[0]: agent: is required: the name of an active agent",
        "subtasks[0]: title: is required: a short human-readable title",
    ]


def test_subtask_must_be_a_mapping(agents):
    assert only_problem(plan_data(subtask("a"), "b")) == (
        'subtasks[1]: must be a mapping with key, agent and title, got "b"'
    )


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"timeout_s": "abc"}, 'timeout_s: must be an integer between 1 and 3600, got "abc"'),
        ({"timeout_s": 0}, "timeout_s: must be an integer between 1 and 3600, got 0"),
        ({"timeout_s": 3601}, "timeout_s: must be an integer between 1 and 3600, got 3601"),
        ({"timeout_s": 2.5}, "timeout_s: must be an integer between 1 and 3600, got 2.5"),
        ({"timeout_s": True}, "timeout_s: must be an integer between 1 and 3600, got true"),
        ({"max_retries": 21}, "max_retries: must be an integer between 0 and 20, got 21"),
        ({"max_retries": -1}, "max_retries: must be an integer between 0 and 20, got -1"),
        ({"priority": False}, "priority: must be an integer between -1000 and 1000, got false"),
        ({"priority": 1001}, "priority: must be an integer between -1000 and 1000, got 1001"),
        ({"priority": -1001}, "priority: must be an integer between -1000 and 1000, got -1001"),
        ({"gate": "during"}, 'gate: must be one of none, before, after, got "during"'),
        ({"gate": True}, "gate: must be one of none, before, after, got true"),
        ({"title": ""}, "title: must not be empty"),
        ({"title": 7}, "title: must be a string, got 7"),
        ({"title": "t" * 201}, "title: must be at most 200 characters, got 201"),
        ({"agent": ["researcher"]}, "agent: must be the name of an agent, got a list of 1"),
        ({"instructions": ["read"]}, "instructions: must be a string, got a list of 1"),
        ({"depends_on": "b"}, 'depends_on: must be a list of subtask keys, got "b"'),
        ({"depends_on": [3]}, "depends_on: entry 0 must be a subtask key, got 3"),
        ({"estimate": 800}, "estimate: must be a mapping of input_tokens and output_tokens, got 800"),
        (
            {"estimate": {"input_tokens": -1}},
            "estimate.input_tokens: must be an integer between 0 and 2147483647, got -1",
        ),
        (
            {"estimate": {"output_tokens": True}},
            "estimate.output_tokens: must be an integer between 0 and 2147483647, got true",
        ),
        (
            {"estimate": {"output": 5}},
            'estimate.output: unknown field (did you mean "output_tokens"?); '
            "allowed fields: input_tokens, output_tokens",
        ),
        (
            {"depends": ["x"]},
            'depends: unknown field (did you mean "depends_on"?); allowed fields: key, agent, title, '
            "instructions, depends_on, gate, priority, timeout_s, max_retries, estimate, inputs",
        ),
    ],
)
def test_field_problems_name_subtask_key_and_field(agents, fields, expected):
    data = plan_data(subtask("research"), subtask("review", **fields))

    assert only_problem(data) == f'subtasks[1] (key "review"): {expected}'


@pytest.mark.parametrize("key", ["has space", "", "x" * 101, "ünïcode", 12, "a.b"])
def test_bad_keys_are_named_by_index(agents, key):
    expected = 'subtasks[0]: key: must be 1 to 100 letters, digits, "_" or "-", got '

    assert only_problem(plan_data(subtask(key))).startswith(expected)


def test_hundred_character_key_is_fine(agents):
    assert plans.validate(plan_data(subtask("k" * 100))).keys == ["k" * 100]


def test_duplicate_keys(agents):
    data = plan_data(subtask("a"), subtask("b"), subtask("a"))

    assert only_problem(data) == (
        'subtasks[2] (key "a"): key: "a" is already the key of subtasks[0]; keys must be unique'
    )


def test_self_dependency(agents):
    assert only_problem(plan_data(subtask("a", depends_on=["a"]))) == (
        'subtasks[0] (key "a"): depends_on: depends on itself ("a")'
    )


def test_unknown_dependency_suggests_a_close_key(agents):
    data = plan_data(subtask("research"), subtask("review", depends_on=["reserch", "nothing_like_it"]))

    assert problems(data) == [
        'subtasks[1] (key "review"): depends_on: unknown subtask "reserch" (did you mean "research"?)',
        'subtasks[1] (key "review"): depends_on: unknown subtask "nothing_like_it"',
    ]


def test_duplicate_dependency_entries(agents):
    data = plan_data(subtask("a"), subtask("b", depends_on=["a", "a"]))

    assert only_problem(data) == 'subtasks[1] (key "b"): depends_on: lists "a" more than once'


def test_dependency_on_a_subtask_with_other_problems_is_not_unknown(agents):
    data = plan_data(subtask("a", timeout_s=0), subtask("b", depends_on=["a"]))

    assert only_problem(data).startswith('subtasks[0] (key "a"): timeout_s:')


def test_cycle_names_every_key_on_it(agents):
    data = plan_data(
        subtask("start"),
        subtask("a", depends_on=["start", "c"]),
        subtask("b", depends_on=["a"]),
        subtask("c", depends_on=["b"]),
    )

    assert only_problem(data) == 'subtasks[1] (key "a"): depends_on: cycle: a → b → c → a'


def test_two_cycles_are_both_reported(agents):
    data = plan_data(
        subtask("a", depends_on=["b"]),
        subtask("b", depends_on=["a"]),
        subtask("c", depends_on=["d"]),
        subtask("d", depends_on=["c"]),
    )

    assert problems(data) == [
        'subtasks[0] (key "a"): depends_on: cycle: a → b → a',
        'subtasks[2] (key "c"): depends_on: cycle: c → d → c',
    ]


def test_unknown_agent_suggests_an_active_one(agents):
    assert only_problem(plan_data(subtask("a", agent="resercher"))) == (
        'subtasks[0] (key "a"): agent: no agent named "resercher" (did you mean "researcher"?)'
    )


@pytest.mark.parametrize(("agent", "status"), [("drafty", "draft"), ("old", "retired")])
def test_inactive_agents_are_refused(agents, agent, status):
    assert only_problem(plan_data(subtask("a", agent=agent))) == (
        f'subtasks[0] (key "a"): agent: agent "{agent}" is {status}; only active agents can run subtasks'
    )


def test_too_many_subtasks(agents):
    data = plan_data(*(subtask(f"t{i}") for i in range(plans.MAX_SUBTASKS + 1)))

    assert only_problem(data) == "subtasks: a plan may hold at most 2,000 subtasks, got 2,001"


def test_two_thousand_subtasks_are_fine(agents):
    data = plan_data(*(subtask(f"t{i}") for i in range(plans.MAX_SUBTASKS)))

    assert len(plans.validate(data).subtasks) == 2000


def test_instructions_length_limit(agents):
    data = plan_data(
        subtask("ok", instructions="x" * plans.MAX_INSTRUCTIONS_CHARS),
        subtask("long", instructions="x" * (plans.MAX_INSTRUCTIONS_CHARS + 1)),
    )

    assert only_problem(data) == (
        'subtasks[1] (key "long"): instructions: must be at most 20,000 characters, got 20,001'
    )


def test_every_problem_is_collected_and_grouped_by_subtask(agents):
    data = {
        "goal": "",
        "extra": True,
        "subtasks": [
            subtask("a", depends_on=["c"], agent="ghost"),
            subtask("b", timeout_s="abc", priority=True, depends_on=["a", "a"]),
            subtask("c", depends_on=["b", "b"], gate="maybe"),
        ],
    }

    assert problems(data) == [
        "plan: extra: unknown field; allowed fields: goal, defaults, subtasks",
        "goal: must not be empty",
        'subtasks[0] (key "a"): depends_on: cycle: a → b → c → a',
        'subtasks[0] (key "a"): agent: no agent named "ghost"',
        'subtasks[1] (key "b"): depends_on: lists "a" more than once',
        'subtasks[1] (key "b"): priority: must be an integer between -1000 and 1000, got true',
        'subtasks[1] (key "b"): timeout_s: must be an integer between 1 and 3600, got "abc"',
        'subtasks[2] (key "c"): depends_on: lists "b" more than once',
        'subtasks[2] (key "c"): gate: must be one of none, before, after, got "maybe"',
    ]


def test_validation_error_lists_every_problem_readably(agents):
    with pytest.raises(plans.PlanValidationError) as caught:
        plans.validate({"subtasks": [subtask("a", agent="ghost")]})

    assert caught.value.report("plan.yaml") == (
        "plan.yaml: 2 problems\n"
        "  goal: is required: a sentence saying what the plan is for\n"
        '  subtasks[0] (key "a"): agent: no agent named "ghost"'
    )
    assert str(caught.value).startswith("plan: 2 problems\n")


def test_plan_error_str():
    assert str(plans.PlanError("goal", "must not be empty")) == "goal: must not be empty"
    assert str(plans.PlanError("subtasks[0]", "is required", "key")) == "subtasks[0]: key: is required"


# --- Parsing -------------------------------------------------------------------------------------


def parse_problem(text, **kwargs):
    with pytest.raises(plans.PlanValidationError) as caught:
        plans.parse_document(text, **kwargs)
    assert len(caught.value.errors) == 1, caught.value.errors
    return str(caught.value.errors[0])


def test_yaml_syntax_error_names_line_and_column():
    text = "goal: g\nsubtasks:\n  - key: a\n    agent: researcher\n    title: T: x\n"

    assert parse_problem(text) == "YAML syntax: line 5, column 13: mapping values are not allowed here"


def test_an_unclosed_quote_is_placed_where_it_opens_not_only_at_the_end_of_the_file():
    text = 'goal: "g"\nsubtasks:\n  - key: a\n    agent: researcher\n    title: "A\n    instructions: hi\n'

    assert parse_problem(text) == (
        "YAML syntax: line 5, column 12: while scanning a quoted scalar,"
        " found unexpected end of stream at line 7, column 1"
    )


def test_an_unclosed_bracket_names_where_it_opens():
    text = "goal: g\nsubtasks: [\n  {key: a}\nmore: 1\n"

    problem = parse_problem(text)
    assert problem.startswith("YAML syntax: line 2, column 11: while parsing a flow sequence, ")
    assert problem.endswith(" at line 4, column 1")


def test_yaml_field_given_twice_is_an_error():
    text = "goal: g\nsubtasks: []\nsubtasks:\n  - key: a\n"

    assert parse_problem(text) == (
        'YAML syntax: line 3, column 1: field "subtasks" appears twice in one mapping (first at line 2)'
    )


def test_json_chosen_by_extension_and_by_brace():
    document = {"goal": "g", "subtasks": [subtask("a")]}

    assert plans.parse_document(json.dumps(document), filename="plan.json") == document
    assert plans.parse_document("  " + json.dumps(document)) == document
    assert plans.parse_document("goal: g\nsubtasks: []\n", filename="plan.yaml") == {"goal": "g", "subtasks": []}


def test_json_syntax_error_names_line_and_column():
    text = '{\n  "goal": "g",\n  "subtasks": [,]\n}'

    assert parse_problem(text) == "JSON syntax: line 3, column 16: Expecting value"


def test_json_field_given_twice_is_an_error():
    assert parse_problem('{"goal": "a", "goal": "b"}') == 'JSON syntax: field "goal" appears twice in one object'


def test_bytes_that_are_not_utf8():
    assert parse_problem("goal: café\n".encode("latin-1")) == (
        "encoding: line 1: byte 0xe9 at offset 9 is not UTF-8; save the file as UTF-8 text"
    )


def test_utf8_bytes_and_bom_are_fine():
    assert plans.parse_document("\ufeffgoal: café\n".encode()) == {"goal": "café"}


def test_document_over_five_megabytes_is_refused_before_parsing(monkeypatch):
    monkeypatch.setattr(parsing, "_parse_yaml", lambda text: pytest.fail("parsed an oversized document"))
    text = "#" * (plans.MAX_PLAN_BYTES + 1)

    assert parse_problem(text) == ("size: the plan is 5,242,881 bytes; at most 5,242,880 bytes (5 MB) are allowed")


def test_size_limit_counts_bytes_not_characters():
    text = "#" + "é" * (plans.MAX_PLAN_BYTES // 2)  # 2 bytes per é: one byte over the limit

    assert parse_problem(text).startswith("size: the plan is 5,242,881 bytes")


# --- Files ---------------------------------------------------------------------------------------


def test_load_file_returns_spec_and_text(agents, tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(GOOD_YAML, encoding="utf-8")

    spec, text = plans.load_file(path)

    assert text == GOOD_YAML
    assert spec.keys == ["research_a", "research_b", "review", "report"]


def test_load_file_reads_json(agents, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(yaml.safe_load(GOOD_YAML)), encoding="utf-8")

    spec, _ = plans.load_file(path)

    assert len(spec.edges) == 3


def test_load_file_missing(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(plans.PlanValidationError) as caught:
        plans.load_file(path)

    assert [str(error) for error in caught.value.errors] == [f"file: no such file: {path}"]


def test_load_file_checks_size_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:
        handle.truncate(plans.MAX_PLAN_BYTES + 1)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read an oversized file"))

    with pytest.raises(plans.PlanValidationError) as caught:
        plans.load_file(path)

    assert str(caught.value.errors[0]).startswith("size: the plan is 5,242,881 bytes")


# --- Saving --------------------------------------------------------------------------------------


def test_good_plan_round_trips(agents):
    spec = plans.validate(plans.parse_document(GOOD_YAML))

    plan = plans.save_plan(spec, document=GOOD_YAML, source_name="plan.yaml")

    plan.refresh_from_db()
    assert (plan.goal, plan.source, plan.source_name, plan.document) == (
        "Compare three vector databases",
        Plan.Source.FILE,
        "plan.yaml",
        GOOD_YAML,
    )
    rows = list(plan.subtasks.order_by("position"))
    assert [(row.key, row.position, row.agent.name, row.gate) for row in rows] == [
        ("research_a", 0, "researcher", "none"),
        ("research_b", 1, "researcher", "none"),
        ("review", 2, "writer", "before"),
        ("report", 3, "writer", "after"),
    ]
    research_a, research_b, review, report = rows
    assert (research_a.estimated_input_tokens, research_a.estimated_output_tokens) == (800, 600)
    assert research_a.instructions == "Read the docs of A."
    assert (research_a.timeout_s, research_a.max_retries) == (60, 2)
    assert (research_b.timeout_s, research_b.priority) == (30, 5)
    assert review.max_retries == 0
    assert plans.plan_graph(plan) == (["research_a", "research_b", "review", "report"], spec.edges)


def test_saved_subtasks_without_overrides_use_the_agents(agents):
    plan = plans.save_plan(plans.validate(plan_data(subtask("a"))))

    row = plan.subtasks.get()
    assert (row.timeout_s, row.max_retries) == (None, None)
    assert (row.effective_timeout_s, row.effective_max_retries) == (30, 3)


def test_agent_retired_after_validation_saves_nothing(agents):
    spec = plans.validate(plans.parse_document(GOOD_YAML))
    Agent.objects.filter(name="writer").update(status=Agent.Status.RETIRED)

    with pytest.raises(plans.PlanValidationError) as caught:
        plans.save_plan(spec)

    assert [str(error) for error in caught.value.errors] == [
        'subtasks[2] (key "review"): agent: agent "writer" is retired; only active agents can run subtasks',
        'subtasks[3] (key "report"): agent: agent "writer" is retired; only active agents can run subtasks',
    ]
    assert (Plan.objects.count(), Subtask.objects.count(), Dependency.objects.count()) == (0, 0, 0)


def test_failure_while_saving_dependencies_rolls_back_everything(agents, monkeypatch):
    spec = plans.validate(plans.parse_document(GOOD_YAML))

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(Dependency.objects, "bulk_create", explode)
    with pytest.raises(RuntimeError):
        plans.save_plan(spec)

    assert (Plan.objects.count(), Subtask.objects.count()) == (0, 0)


def test_large_plan_is_saved_in_bulk(agents, django_assert_max_num_queries):
    keys = [f"t{i}" for i in range(plans.MAX_SUBTASKS)]
    chain = (subtask(key, depends_on=[previous]) for previous, key in zip(keys, keys[1:], strict=False))
    data = plan_data(subtask(keys[0]), *chain)
    spec = plans.validate(data)

    with django_assert_max_num_queries(40):
        plan = plans.save_plan(spec)

    assert plan.subtasks.count() == 2000
    assert plan.dependencies.count() == 1999


# --- Durations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("latency", "output_tokens", "expected"),
    [
        ({"dist": "fixed", "seconds": 2.5}, 0, 2.5),
        ({"dist": "uniform", "low_s": 1, "high_s": 3}, 0, 2.0),
        ({"dist": "lognormal", "median_s": 1.5, "sigma": 0.5}, 0, pytest.approx(1.5 * math.exp(0.5**2 / 2))),
        ({"dist": "lognormal", "median_s": 1.5}, 0, pytest.approx(1.5 * math.exp(0.4**2 / 2))),  # the default sigma
        (None, 600, 12.0),
        (None, 10, 1.0),  # at least one second
        ({"dist": "weird"}, 100, 2.0),  # an unknown model falls back to tokens
        ({"dist": "fixed"}, 100, 2.0),  # so does an incomplete one
    ],
)
def test_estimated_duration(latency, output_tokens, expected):
    agent = Agent(name="x", provider_options={"latency": latency} if latency else {})
    spec = plans.SubtaskSpec(key="a", agent="x", title="A", estimated_output_tokens=output_tokens)

    assert plans.estimated_duration_s(spec, agent) == expected


def test_plan_weights_of_a_saved_plan(agents):
    plan = plans.save_plan(plans.validate(plans.parse_document(GOOD_YAML)))

    assert plans.plan_weights(plan) == {"research_a": 12.0, "research_b": 1.0, "review": 4.0, "report": 4.0}


# --- Line numbers --------------------------------------------------------------------------------


LINED_YAML = """\
goal: Compare three vector databases
subtasks:
  - key: research_a
    agent: researcher
    title: Research A
  - key: research_b
    agent: researcher
    title: Research B
    timeout_s: fast
    depends_on: [nowhere]
  - agent: researcher
    title: No key
    colour: blue
"""


def document_problems(text, **kwargs):
    with pytest.raises(plans.PlanValidationError) as caught:
        plans.validate_document(text, **kwargs)
    return [str(error) for error in caught.value.errors]


def test_yaml_problems_name_their_line(agents):
    assert document_problems(LINED_YAML) == [
        'line 9: subtasks[1] (key "research_b"): timeout_s: must be an integer between 1 and 3600, got "fast"',
        'line 10: subtasks[1] (key "research_b"): depends_on: unknown subtask "nowhere"',
        # A missing field has no line of its own: the line of the subtask that lacks it.
        "line 11: subtasks[2]: key: is required: a short unique name such as research_a",
        "line 13: subtasks[2]: colour: unknown field; allowed fields: key, agent, title, instructions, depends_on, "
        "gate, priority, timeout_s, max_retries, estimate, inputs",
    ]


def test_a_subtasks_problems_are_listed_by_line(agents):
    """The checks' own order listed a subtask's depends_on (line 12) before its agent (line 9)."""
    text = (
        "goal: g\nsubtasks:\n  - key: a\n    agent: researcher\n    title: First\n"
        "  - key: b\n    agent: nobody\n    title: Second\n    depends_on: [a, c]\n"
    )
    assert document_problems(text) == [
        'line 7: subtasks[1] (key "b"): agent: no agent named "nobody"',
        'line 9: subtasks[1] (key "b"): depends_on: unknown subtask "c"',
    ]


def test_json_problems_name_their_line(agents):
    text = json.dumps(yaml.safe_load(LINED_YAML), indent=2)
    line_of_timeout = text.splitlines().index('      "timeout_s": "fast",') + 1

    assert document_problems(text, filename="plan.json")[0] == (
        f'line {line_of_timeout}: subtasks[1] (key "research_b"): timeout_s: must be an integer between 1 and 3600, '
        'got "fast"'
    )


def test_problems_of_the_whole_plan_name_the_field_line(agents):
    text = "goal: g\nsubtasks:\n  - key: a\n    agent: resercher\n    title: A\n    depends_on: [a]\n"

    assert document_problems(text) == [
        'line 4: subtasks[0] (key "a"): agent: no agent named "resercher" (did you mean "researcher"?)',
        'line 6: subtasks[0] (key "a"): depends_on: depends on itself ("a")',
    ]


def test_file_report_shows_lines(agents, tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text("goal: g\nversion: 2\nsubtasks:\n  - key: a\n    agent: researcher\n    title: A\n")

    with pytest.raises(plans.PlanValidationError) as caught:
        plans.load_file(path)

    assert caught.value.report("plan.yaml") == (
        "plan.yaml: 1 problem\n  line 2: plan: version: unknown field; allowed fields: goal, defaults, subtasks"
    )


def test_parsed_data_without_a_document_has_no_lines(agents):
    assert only_problem(plan_data(subtask("a", timeout_s="fast"))) == (
        'subtasks[0] (key "a"): timeout_s: must be an integer between 1 and 3600, got "fast"'
    )


def test_goal_given_separately_replaces_the_documents(agents):
    spec = plans.validate_document(GOOD_YAML, goal="  A new goal ")

    assert spec.goal == "A new goal"


def test_document_gate_lists_exactly_the_models_gates():
    assert list(get_args(Gate)) == list(Subtask.Gate.values)


def test_document_inputs_lists_exactly_the_models_choices_but_the_default():
    from orchestrator.plans.document import Inputs

    assert list(get_args(Inputs)) == [value for value in Subtask.Inputs.values if value]


def test_a_control_character_at_the_start_of_a_yaml_document_is_a_plan_error_not_a_crash():
    from orchestrator.plans.parsing import read_document

    with pytest.raises(plans.PlanValidationError) as caught:
        read_document("\u00a1\u00ba^\u00bb\u0016")
    assert [str(e) for e in caught.value.errors] == ["YAML syntax: line 1: character #x0016 is not allowed in YAML"]
