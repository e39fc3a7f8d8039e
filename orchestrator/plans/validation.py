"""Plan validation: the parsed document checked whole, every problem named at once.

A plan is validated whole before anything is saved (DESIGN §2). `validate` never stops at the
first problem: it collects every one, each naming the subtask and the field, in words meant
for the person who wrote the file, and raises them together in a PlanValidationError.

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

import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.conf import settings

from orchestrator.models import Agent, Subtask
from orchestrator.plans import dag
from orchestrator.plans.errors import PlanError, PlanValidationError
from orchestrator.plans.spec import PlanSpec, SubtaskSpec

MAX_SUBTASKS = 2_000
MAX_INSTRUCTIONS_CHARS = 20_000
MAX_TITLE_CHARS = 200
MAX_KEY_CHARS = 100
PRIORITY_RANGE = (-1000, 1000)
MAX_RETRIES_RANGE = (0, 20)
# Estimated tokens land in PositiveIntegerField columns: keep them within a 32-bit integer.
MAX_ESTIMATED_TOKENS = 2_147_483_647

KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,%d}" % MAX_KEY_CHARS)
TOP_LEVEL_FIELDS = ("goal", "defaults", "subtasks")
DEFAULTS_FIELDS = ("timeout_s", "max_retries")
SUBTASK_FIELDS = (
    "key",
    "agent",
    "title",
    "instructions",
    "depends_on",
    "gate",
    "priority",
    "timeout_s",
    "max_retries",
    "estimate",
)
ESTIMATE_FIELDS = ("input_tokens", "output_tokens")
GATES = tuple(Subtask.Gate.values)


def validate(data: Any, *, agents: Mapping[str, Agent] | None = None) -> PlanSpec:
    """A PlanSpec for `data` (parsed plan document), or PlanValidationError listing every problem.

    `agents` maps agent names to Agents; by default they are looked up in one query.
    """
    return _PlanValidator(agents).validate(data)


class _PlanValidator:
    def __init__(self, agents: Mapping[str, Agent] | None):
        self.given_agents = agents
        self.errors: list[PlanError] = []

    def error(self, where: str, message: str, field: str = "") -> None:
        self.errors.append(PlanError(where, message, field))

    def validate(self, data: Any) -> PlanSpec:
        if not isinstance(data, dict):
            self.error("plan", f"the document must be a mapping with goal and subtasks, got {_describe(data)}")
            raise PlanValidationError(self.errors)
        self.check_unknown_fields("plan", data, TOP_LEVEL_FIELDS)
        goal = self.check_goal(data.get("goal"))
        defaults = self.check_defaults(data.get("defaults"))
        entries = self.check_subtask_list(data.get("subtasks"))
        subtasks = [spec for index, entry in enumerate(entries) if (spec := self.check_subtask(index, entry, defaults))]
        self.check_keys_unique(subtasks)
        edges = self.check_dependencies(subtasks)
        agents = self.check_agents(subtasks)
        if self.errors:
            raise PlanValidationError(sorted(self.errors, key=_file_order))
        return PlanSpec(goal=goal, subtasks=subtasks, edges=edges, defaults=defaults, agents=agents)

    # Top level

    def check_unknown_fields(self, where: str, mapping: dict, allowed: tuple[str, ...]) -> None:
        for name in mapping:
            if name not in allowed:
                hint = _did_you_mean(name, allowed)
                self.error(where, f"unknown field{hint}; allowed fields: {', '.join(allowed)}", _field_name(name))

    def check_goal(self, goal: Any) -> str:
        if goal is None:
            self.error("goal", "is required: a sentence saying what the plan is for")
        elif not isinstance(goal, str):
            self.error("goal", f"must be a string, got {_describe(goal)}")
        elif not goal.strip():
            self.error("goal", "must not be empty")
        else:
            return goal.strip()
        return ""

    def check_defaults(self, defaults: Any) -> dict[str, int]:
        if defaults is None:
            return {}
        if not isinstance(defaults, dict):
            self.error("defaults", f"must be a mapping of timeout_s and max_retries, got {_describe(defaults)}")
            return {}
        self.check_unknown_fields("defaults", defaults, DEFAULTS_FIELDS)
        checked = {}
        for name, bounds in (("timeout_s", _timeout_range()), ("max_retries", MAX_RETRIES_RANGE)):
            value = self.check_integer("defaults", name, defaults.get(name), bounds)
            if value is not None:
                checked[name] = value
        return checked

    def check_subtask_list(self, entries: Any) -> list[Any]:
        if entries is None:
            self.error("subtasks", "is required: a list of subtasks, each with key, agent and title")
            return []
        if not isinstance(entries, list):
            self.error("subtasks", f"must be a list of subtasks, got {_describe(entries)}")
            return []
        if not entries:
            self.error("subtasks", "must hold at least one subtask")
        if len(entries) > MAX_SUBTASKS:
            self.error("subtasks", f"a plan may hold at most {MAX_SUBTASKS:,} subtasks, got {len(entries):,}")
        return entries

    # One subtask

    def check_subtask(self, index: int, entry: Any, defaults: dict[str, int]) -> SubtaskSpec | None:
        if not isinstance(entry, dict):
            self.error(f"subtasks[{index}]", f"must be a mapping with key, agent and title, got {_describe(entry)}")
            return None
        key = self.check_key(index, entry.get("key"))
        where = f'subtasks[{index}] (key "{key}")' if key else f"subtasks[{index}]"
        self.check_unknown_fields(where, entry, SUBTASK_FIELDS)
        spec = SubtaskSpec(
            key=key or "",
            agent=self.check_agent_name(where, entry.get("agent")),
            title=self.check_title(where, entry.get("title")),
            instructions=self.check_instructions(where, entry.get("instructions")),
            depends_on=self.check_depends_on(where, entry.get("depends_on")),
            gate=self.check_gate(where, entry.get("gate")),
            priority=self.check_integer(where, "priority", entry.get("priority"), PRIORITY_RANGE) or 0,
            timeout_s=_first_given(
                self.check_integer(where, "timeout_s", entry.get("timeout_s"), _timeout_range()),
                defaults.get("timeout_s"),
            ),
            max_retries=_first_given(
                self.check_integer(where, "max_retries", entry.get("max_retries"), MAX_RETRIES_RANGE),
                defaults.get("max_retries"),
            ),
            position=index,
        )
        spec.estimated_input_tokens, spec.estimated_output_tokens = self.check_estimate(where, entry.get("estimate"))
        # A subtask with other problems still counts as a known key, so that its dependents
        # are not told that it does not exist.
        return spec if key else None

    def check_key(self, index: int, key: Any) -> str | None:
        where = f"subtasks[{index}]"
        if key is None:
            self.error(where, "is required: a short unique name such as research_a", "key")
        elif not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
            self.error(
                where,
                f'must be 1 to {MAX_KEY_CHARS} letters, digits, "_" or "-", got {_describe(key)}',
                "key",
            )
        else:
            return key
        return None

    def check_agent_name(self, where: str, name: Any) -> str:
        if name is None:
            self.error(where, "is required: the name of an active agent", "agent")
        elif not isinstance(name, str) or not name.strip():
            self.error(where, f"must be the name of an agent, got {_describe(name)}", "agent")
        else:
            return name.strip()
        return ""

    def check_title(self, where: str, title: Any) -> str:
        if title is None:
            self.error(where, "is required: a short human-readable title", "title")
        elif not isinstance(title, str):
            self.error(where, f"must be a string, got {_describe(title)}", "title")
        elif not title.strip():
            self.error(where, "must not be empty", "title")
        elif len(title.strip()) > MAX_TITLE_CHARS:
            self.error(where, f"must be at most {MAX_TITLE_CHARS} characters, got {len(title.strip()):,}", "title")
        else:
            return title.strip()
        return ""

    def check_instructions(self, where: str, instructions: Any) -> str:
        if instructions is None:
            return ""
        if not isinstance(instructions, str):
            self.error(where, f"must be a string, got {_describe(instructions)}", "instructions")
        elif len(instructions) > MAX_INSTRUCTIONS_CHARS:
            self.error(
                where,
                f"must be at most {MAX_INSTRUCTIONS_CHARS:,} characters, got {len(instructions):,}",
                "instructions",
            )
        else:
            return instructions
        return ""

    def check_depends_on(self, where: str, depends_on: Any) -> list[str]:
        if depends_on is None:
            return []
        if not isinstance(depends_on, list):
            self.error(where, f"must be a list of subtask keys, got {_describe(depends_on)}", "depends_on")
            return []
        keys: list[str] = []
        for position, upstream in enumerate(depends_on):
            if not isinstance(upstream, str):
                self.error(
                    where, f"entry {position} must be a subtask key, got {_describe(upstream)}", "depends_on"
                )
            elif upstream in keys:
                self.error(where, f'lists "{upstream}" more than once', "depends_on")
            else:
                keys.append(upstream)
        return keys

    def check_gate(self, where: str, gate: Any) -> str:
        if gate is None:
            return Subtask.Gate.NONE.value
        if gate not in GATES or not isinstance(gate, str):
            self.error(where, f"must be one of {', '.join(GATES)}, got {_describe(gate)}", "gate")
            return Subtask.Gate.NONE.value
        return gate

    def check_integer(self, where: str, name: str, value: Any, bounds: tuple[int, int]) -> int | None:
        """`value` if it is an integer within `bounds`, None when absent or wrong (wrong is reported)."""
        if value is None:
            return None
        low, high = bounds
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.error(where, f"must be an integer between {low} and {high}, got {_describe(value)}", name)
            return None
        return value

    def check_estimate(self, where: str, estimate: Any) -> tuple[int, int]:
        if estimate is None:
            return 0, 0
        if not isinstance(estimate, dict):
            self.error(
                where, f"must be a mapping of input_tokens and output_tokens, got {_describe(estimate)}", "estimate"
            )
            return 0, 0
        for name in estimate:
            if name not in ESTIMATE_FIELDS:
                hint = _did_you_mean(name, ESTIMATE_FIELDS)
                self.error(
                    where,
                    f"unknown field{hint}; allowed fields: {', '.join(ESTIMATE_FIELDS)}",
                    f"estimate.{_field_name(name)}",
                )
        bounds = (0, MAX_ESTIMATED_TOKENS)
        tokens = [self.check_integer(where, f"estimate.{name}", estimate.get(name), bounds) for name in ESTIMATE_FIELDS]
        return tokens[0] or 0, tokens[1] or 0

    # The plan as a whole

    def check_keys_unique(self, subtasks: list[SubtaskSpec]) -> None:
        first_index: dict[str, int] = {}
        for spec in list(subtasks):
            if spec.key in first_index:
                self.error(
                    _where(spec),
                    f'"{spec.key}" is already the key of subtasks[{first_index[spec.key]}]; keys must be unique',
                    "key",
                )
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
                    self.error(_where(spec), f'depends on itself ("{upstream}")', "depends_on")
                elif upstream not in known:
                    hint = _did_you_mean(upstream, keys)
                    self.error(_where(spec), f'unknown subtask "{upstream}"{hint}', "depends_on")
                else:
                    edges.append((upstream, spec.key))
        by_key = {spec.key: spec for spec in subtasks}
        for cycle in dag.find_cycles(keys, edges):
            self.error(_where(by_key[cycle[0]]), "cycle: " + " → ".join([*cycle, cycle[0]]), "depends_on")
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
                    self.error(_where(spec), problem, "agent")
        return {name: agents[name] for name in names if name in agents}


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
    return []


_SUBTASK_INDEX = re.compile(r"subtasks\[(\d+)\]")


def _file_order(error: PlanError) -> int:
    """Sort key: plan-level problems first, then each subtask's problems in file order."""
    match = _SUBTASK_INDEX.match(error.where)
    return int(match.group(1)) if match else -1


def _where(spec: SubtaskSpec) -> str:
    return f'subtasks[{spec.position}] (key "{spec.key}")'


def _first_given(*values: int | None) -> int | None:
    return next((value for value in values if value is not None), None)


def _timeout_range() -> tuple[int, int]:
    return 1, settings.GLASSBOX_MAX_TASK_TIMEOUT_S


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

