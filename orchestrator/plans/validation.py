"""Plan validation: the parsed document checked whole, every problem named at once.

A plan is validated whole before anything is saved (DESIGN §2). `validate` never stops at the
first problem: it collects every one, each naming the subtask, the field and (for a YAML or JSON
document) the line, in words meant for the person who wrote the file, and raises them together
in a PlanValidationError.

The per-field rules are the pydantic model in `plans.document`; this module words its errors
(`_FieldProblem`) and adds the rules that need the whole plan: unique keys, known dependencies,
no cycles, active agents, and the defaults applied to each subtask.

    goal: Compare three vector databases
    defaults: {timeout_s: 60, max_retries: 3}
    subtasks:
      - key: research_a
        agent: researcher
        title: Research A
        instructions: ...
        depends_on: []
        gate: none            # none | before | after
        priority: 0
        timeout_s: 30
        max_retries: 3
        estimate: {input_tokens: 800, output_tokens: 600}
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn, get_args

from annotated_types import Ge, Le
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from orchestrator.models import Agent
from orchestrator.plans import dag
from orchestrator.plans.document import (
    MAX_INSTRUCTIONS_CHARS,
    MAX_KEY_CHARS,
    MAX_SUBTASKS,
    MAX_TITLE_CHARS,
    DefaultsDocument,
    EstimateDocument,
    PlanDocument,
    SubtaskDocument,
)
from orchestrator.plans.errors import PlanError, PlanValidationError
from orchestrator.plans.parsing import LineMap, read_document, read_file
from orchestrator.plans.spec import PlanSpec, SubtaskSpec
from orchestrator.providers.options import option_problems

__all__ = ["MAX_INSTRUCTIONS_CHARS", "MAX_SUBTASKS", "MAX_TITLE_CHARS", "load_file", "validate", "validate_document"]

Path_ = tuple[Any, ...]  # a key path into the document, e.g. ("subtasks", 3, "timeout_s")


def validate(data: Any, *, agents: Mapping[str, Agent] | None = None, lines: LineMap | None = None) -> PlanSpec:
    """A PlanSpec for `data` (parsed plan document), or PlanValidationError listing every problem.

    `agents` maps agent names to Agents; by default they are looked up in one query. `lines`
    (from `parsing.read_document`) puts the line of each problem in its message.
    """
    return _PlanValidator(agents, lines).validate(data)


def validate_document(
    text: str | bytes, *, filename: str = "", goal: str = "", agents: Mapping[str, Agent] | None = None
) -> PlanSpec:
    """The validated plan in a YAML or JSON document, problems named with their lines.

    `goal`, when given, replaces the document's goal.
    """
    parsed = read_document(text, filename=filename)
    data = parsed.data
    if goal.strip() and isinstance(data, dict):
        data = {**data, "goal": goal.strip()}
    return validate(data, agents=agents, lines=parsed.lines)


def load_file(path: str | os.PathLike) -> tuple[PlanSpec, str]:
    """The validated plan in a file, and the file's text. Size is checked before reading."""
    text = read_file(path)
    return validate_document(text, filename=Path(path).name), text


class _PlanValidator:
    def __init__(self, agents: Mapping[str, Agent] | None, lines: LineMap | None):
        self.given_agents = agents
        self.lines = lines
        self.problems: list[tuple[Path_, PlanError]] = []
        self.model_errors: list[ErrorDetails] = []

    def error(self, path: Path_, where: str, message: str, field: str = "") -> None:
        self.problems.append((path, PlanError(where, message, field)))

    def subtask_error(self, spec: SubtaskSpec, field: str, message: str) -> None:
        self.error(("subtasks", spec.position, field), _where(spec), message, field)

    def validate(self, data: Any) -> PlanSpec:
        try:
            document = PlanDocument.model_validate(data)
        except ValidationError as invalid:
            document = None
            self.word_model_errors(data, invalid.errors())
        if not isinstance(data, dict):
            self.fail()
        subtasks = _subtask_specs(document) if document else _salvaged_specs(data, self.invalid_fields())
        self.check_keys_unique(subtasks)
        edges = self.check_dependencies(subtasks)
        agents = self.check_agents(subtasks)
        if self.problems or document is None:
            self.fail()
        defaults = document.defaults.model_dump(exclude_none=True)
        return PlanSpec(goal=document.goal, subtasks=subtasks, edges=edges, defaults=defaults, agents=agents)

    def fail(self) -> NoReturn:
        """Raise every problem, by subtask and, within one, by line (the checks' own order listed a
        subtask's line 12 before its line 9)."""
        located = [(path, self.with_line(path, error)) for path, error in self.problems]
        ordered = sorted(located, key=lambda problem: (_subtask_index(problem[0]), problem[1].line or 0))
        raise PlanValidationError([error for _, error in ordered])

    def with_line(self, path: Path_, error: PlanError) -> PlanError:
        line = self.lines.line(path) if self.lines is not None else None
        return dataclasses.replace(error, line=line) if line else error

    # The model's errors, in words

    def word_model_errors(self, data: Any, errors: list[ErrorDetails]) -> None:
        self.model_errors = errors
        keys = _valid_keys(data, self.invalid_fields())
        for error in sorted(errors, key=_model_error_order):
            problem = _FieldProblem(error, keys)
            for message in problem.messages():
                self.error(problem.path, problem.where, message, problem.field)

    def invalid_fields(self) -> set[tuple[int, str]]:
        """(subtask index, field) for every subtask field the model refused."""
        return {
            (loc[1], loc[2])
            for loc in (error["loc"] for error in self.model_errors)
            if len(loc) >= 3 and loc[0] == "subtasks" and isinstance(loc[1], int) and isinstance(loc[2], str)
        }

    # The plan as a whole

    def check_keys_unique(self, subtasks: list[SubtaskSpec]) -> None:
        first_index: dict[str, int] = {}
        for spec in list(subtasks):
            if spec.key in first_index:
                taken = f'"{spec.key}" is already the key of subtasks[{first_index[spec.key]}]'
                self.subtask_error(spec, "key", f"{taken}; keys must be unique")
                subtasks.remove(spec)
            else:
                first_index[spec.key] = spec.position

    def check_dependencies(self, subtasks: list[SubtaskSpec]) -> list[dag.Edge]:
        keys = [spec.key for spec in subtasks]
        known = set(keys)
        edges: list[dag.Edge] = []
        for spec in subtasks:
            for upstream in spec.depends_on:
                if upstream == spec.key:
                    self.subtask_error(spec, "depends_on", f'depends on itself ("{upstream}")')
                elif upstream not in known:
                    hint = _did_you_mean(upstream, keys)
                    self.subtask_error(spec, "depends_on", f'unknown subtask "{upstream}"{hint}')
                else:
                    edges.append((upstream, spec.key))
        by_key = {spec.key: spec for spec in subtasks}
        for cycle in dag.find_cycles(keys, edges):
            self.subtask_error(by_key[cycle[0]], "depends_on", "cycle: " + " → ".join([*cycle, cycle[0]]))
        return edges

    def check_agents(self, subtasks: list[SubtaskSpec]) -> dict[str, Agent]:
        names = sorted({spec.agent for spec in subtasks if spec.agent})
        if not names:
            return {}
        if self.given_agents is not None:
            agents = self.given_agents
            suggestions = _LazyNames(lambda: [name for name, agent in agents.items() if agent.is_schedulable])
        else:
            agents = _agents_by_name(names)
            suggestions = _LazyNames(_active_agent_names)
        for spec in subtasks:
            if spec.agent:
                for problem in _agent_problems(spec.agent, agents, suggestions):
                    self.subtask_error(spec, "agent", problem)
        return {name: agents[name] for name in names if name in agents}


# --- Subtask specs -------------------------------------------------------------------------------


def _subtask_specs(document: PlanDocument) -> list[SubtaskSpec]:
    defaults = document.defaults
    return [
        SubtaskSpec(
            key=subtask.key,
            agent=subtask.agent,
            title=subtask.title,
            instructions=subtask.instructions,
            depends_on=list(subtask.depends_on),
            gate=subtask.gate,
            priority=subtask.priority,
            timeout_s=_first_given(subtask.timeout_s, defaults.timeout_s),
            max_retries=_first_given(subtask.max_retries, defaults.max_retries),
            estimated_input_tokens=subtask.estimate.input_tokens,
            estimated_output_tokens=subtask.estimate.output_tokens,
            position=index,
            inputs=subtask.inputs or "",
        )
        for index, subtask in enumerate(document.subtasks)
    ]


def _valid_keys(data: Any, invalid: set[tuple[int, str]]) -> dict[int, str]:
    """Subtask index → key, for the subtasks whose key the model accepted."""
    entries = data.get("subtasks") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return {}
    return {
        index: entry["key"]
        for index, entry in enumerate(entries)
        if isinstance(entry, dict) and isinstance(entry.get("key"), str) and (index, "key") not in invalid
    }


def _salvaged_specs(data: dict, invalid: set[tuple[int, str]]) -> list[SubtaskSpec]:
    """What the whole-plan rules need (key, agent, dependencies) from an invalid document.

    A subtask with other problems still counts as a known key, so that its dependents are not
    told that it does not exist; a field the model refused is left out.
    """
    entries = data.get("subtasks")
    if not isinstance(entries, list):
        return []  # no subtask list: nothing to salvage (and no valid key either)
    specs = []
    for index, key in _valid_keys(data, invalid).items():
        entry = entries[index]
        agent = entry.get("agent") if (index, "agent") not in invalid else ""
        depends_on = entry.get("depends_on") or []
        if not isinstance(depends_on, list):
            depends_on = []
        upstream = list(dict.fromkeys(item for item in depends_on if isinstance(item, str)))
        specs.append(SubtaskSpec(key=key, agent=(agent or "").strip(), title="", depends_on=upstream, position=index))
    return specs


# --- Wording the model's errors ------------------------------------------------------------------


TOP_LEVEL_ORDER = tuple(PlanDocument.model_fields)
# How long an error's location is for a field of each mapping (the plan's own fields: 1).
MAPPING_DEPTH: dict[str | int, int] = {"subtasks": 3, "defaults": 2}


def _model_error_order(error: ErrorDetails) -> tuple[int, int, int]:
    """File order: a subtask's problems after the plan's; each mapping's unknown fields first."""
    loc = tuple(error["loc"])
    mapping_depth = MAPPING_DEPTH.get(loc[0], 1) if loc else 0
    unknown_here = error["type"] == "extra_forbidden" and len(loc) == mapping_depth
    section = TOP_LEVEL_ORDER.index(loc[0]) if loc and loc[0] in TOP_LEVEL_ORDER else -1
    return _subtask_index(loc), section, 0 if unknown_here else 1


class _FieldProblem:
    """One pydantic error as the plan's author reads it: where, which field, what is wrong."""

    def __init__(self, error: ErrorDetails, keys: Mapping[int, str]):
        self.kind: str = error["type"]
        self.value: Any = error["input"]
        self.context: dict[str, Any] = error.get("ctx") or {}
        self.path: Path_ = tuple(error["loc"])
        self.model, self.name, self.entry, self.where, self.field = _locate(self.path, keys, self.kind)

    def messages(self) -> list[str]:
        if self.kind == "duplicate_entries":
            return [f'lists "{key}" more than once' for key in self.context["duplicates"]]
        return [self.message()]

    def message(self) -> str:
        got = f"got {_describe(self.value)}"
        if self.kind == "extra_forbidden":
            allowed = tuple(self.model.model_fields)
            return f"unknown field{_did_you_mean(self.name, allowed)}; allowed fields: {', '.join(allowed)}"
        if self.name is None:  # the whole document, or one subtask, is not a mapping
            prefix = "the document must" if self.model is PlanDocument else "must"
            return f"{prefix} be a mapping {_mapping_fields(self.model)}, {got}"
        field = self.model.model_fields[self.name]
        if self.kind == "missing":
            return f"is required: {field.description}"
        if self.kind == "model_type":
            return f"must be a mapping {_mapping_fields(_submodel(field.annotation))}, {got}"
        if self.name == "subtasks":
            return self.subtask_list_message(got)
        if self.name == "depends_on":
            if self.entry is not None:
                return f"entry {self.entry} must be a subtask key, {got}"
            return f"must be a list of subtask keys, {got}"
        if self.name == "key":
            return f'must be 1 to {MAX_KEY_CHARS} letters, digits, "_" or "-", {got}'
        if self.name == "agent":
            return f"must be the name of an agent, {got}"
        if self.kind == "literal_error":
            return f"must be one of {', '.join(get_args(field.annotation))}, {got}"
        if field.annotation in (int, int | None):
            low, high = _bounds(field.metadata)
            return f"must be an integer between {low} and {high}, {got}"
        return self.text_message(got)

    def subtask_list_message(self, got: str) -> str:
        if self.kind == "too_short":
            return "must hold at least one subtask"
        if self.kind == "too_long":
            return f"a plan may hold at most {MAX_SUBTASKS:,} subtasks, got {self.context['actual_length']:,}"
        return f"must be a list of subtasks, {got}"

    def text_message(self, got: str) -> str:
        if self.kind == "string_too_short":
            return "must not be empty"
        if self.kind == "string_too_long":
            length = len(self.value.strip()) if self.name in ("title", "goal") else len(self.value)
            return f"must be at most {self.context['max_length']:,} characters, got {length:,}"
        return f"must be a string, {got}"


def _locate(path: Path_, keys: Mapping[int, str], kind: str):
    """(owning model, field name, list entry, where, field label) of an error at `path`."""
    if not path:
        return PlanDocument, None, None, "plan", ""
    if path[0] == "subtasks" and len(path) >= 2:
        index = path[1]
        where = f'subtasks[{index}] (key "{keys[index]}")' if index in keys else f"subtasks[{index}]"
        rest = path[2:]
        if not rest:
            return SubtaskDocument, None, None, where, ""
        if rest[0] == "estimate" and len(rest) >= 2:
            return EstimateDocument, rest[1], None, where, f"estimate.{_field_name(rest[1])}"
        entry = rest[1] if len(rest) >= 2 else None
        return SubtaskDocument, rest[0], entry, where, _field_name(rest[0])
    if path[0] == "defaults" and len(path) >= 2:
        return DefaultsDocument, path[1], None, "defaults", _field_name(path[1])
    if kind == "extra_forbidden":
        return PlanDocument, path[0], None, "plan", _field_name(path[0])
    return PlanDocument, path[0], None, path[0], ""


def _submodel(annotation: Any) -> type[BaseModel]:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else SubtaskDocument


def _mapping_fields(model: type[BaseModel]) -> str:
    """ "with key, agent and title" (the required fields), or "of a and b" when none is required."""
    required = [name for name, field in model.model_fields.items() if field.is_required()]
    names = required or list(model.model_fields)
    listed = f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]
    return f"with {listed}" if required else f"of {listed}"


def _bounds(metadata: Iterable[Any]) -> tuple[int, int]:
    low = next(item.ge for item in metadata if isinstance(item, Ge))
    high = next(item.le for item in metadata if isinstance(item, Le))
    if not (isinstance(low, int) and isinstance(high, int)):
        raise TypeError(f"a plan document's numbers have integer bounds, not {low!r} and {high!r}")
    return low, high


# --- Helpers -------------------------------------------------------------------------------------


class _LazyNames:
    """Names to suggest for a misspelt agent, fetched only when one is misspelt."""

    def __init__(self, fetch: Callable[[], Iterable[str]]):
        self.fetch = fetch
        self.names: list[str] | None = None

    def __iter__(self):
        if self.names is None:
            self.names = sorted(self.fetch())
        return iter(self.names)


def _agents_by_name(names: Iterable[str]) -> dict[str, Agent]:
    return {agent.name: agent for agent in Agent.objects.filter(name__in=list(names))}


def _active_agent_names() -> list[str]:
    return list(Agent.objects.filter(status=Agent.Status.ACTIVE).values_list("name", flat=True))


def _agent_problems(name: str, agents: Mapping[str, Agent], suggestions: Iterable[str]) -> list[str]:
    agent = agents.get(name)
    if agent is None:
        return [f'no agent named "{name}"{_did_you_mean(name, suggestions)}']
    if not agent.is_schedulable:
        return [f'agent "{name}" is {agent.status}; only active agents can run subtasks']
    return agent_setting_problems(agent)


def agent_setting_problems(agent: Agent) -> list[str]:
    """An agent whose saved settings its provider would refuse (saved before they were checked
    where they are entered): named here, so that the plan is refused before it runs, not by a
    failed attempt."""
    return [
        f'agent "{agent.name}" has invalid provider options: {problem} (fix them in the admin, or with '
        f"`python manage.py agent {agent.name} --options '...'`)"
        for problem in option_problems(agent.provider, agent.provider_options)
    ]


def _subtask_index(path: Path_) -> int:
    """Sort key: plan-level problems first, then each subtask's problems in file order."""
    return path[1] if len(path) >= 2 and path[0] == "subtasks" and isinstance(path[1], int) else -1


def _where(spec: SubtaskSpec) -> str:
    return f'subtasks[{spec.position}] (key "{spec.key}")'


def _first_given(*values: int | None) -> int | None:
    return next((value for value in values if value is not None), None)


def _did_you_mean(word: Any, candidates: Iterable[str]) -> str:
    if not isinstance(word, str):
        return ""
    matches = difflib.get_close_matches(word, list(candidates), n=1)
    return f' (did you mean "{matches[0]}"?)' if matches else ""


def _field_name(name: Any) -> str:
    return str(name) if isinstance(name, str) else _describe(name)


def _describe(value: Any) -> str:
    """A value as the plan's author would recognise it: strings quoted, containers by kind."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return json.dumps(shown, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return f"a list of {len(value)}" if value else "an empty list"
    return f"a {type(value).__name__}"
