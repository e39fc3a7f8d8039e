"""The planner: a goal and the active agents become a validated, saved plan (DESIGN §5).

With an API key, Claude is asked through a tool (``submit_plan``) whose input schema is the plan
schema, and ``tool_choice`` forces that tool, so the answer is structured data rather than prose.
The answer is then treated exactly like a plan file: ``plans.validate`` checks it whole (unknown
agents, unknown or cyclic dependencies, sizes ...) and ``plans.save_plan`` saves it in one
transaction. A rejected answer is sent back once with every problem (the repair round trip, as
the ``tool_result`` of the rejected call, ``is_error: true``); a second rejection is a
:class:`PlannerError` naming the problems, and nothing is saved.

Every answer, accepted or not, is kept as a :class:`~orchestrator.models.PlannerAttempt` with the
raw answer and the reason it was rejected, for inspection in the admin.

Without an API key the **simulated planner** builds the plan from templates instead
(simulated_planner.py) — a research fan-out / fan-in, a build pipeline (spec → design → code ∥ tests → review) or a writing pipeline,
chosen from the goal's words — staffed with the active agents whose name, role and capabilities
fit each step. Its plans say so: ``source_name`` is "simulated planner" and
``PlannerResult.simulated`` is true.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anthropic.types import MessageParam, TextBlockParam, ToolParam, ToolResultBlockParam, ToolUseBlockParam
from django.conf import settings
from django.db import transaction

from orchestrator import plans
from orchestrator.models import Agent, Plan, PlannerAttempt
from orchestrator.plans import simulated_planner
from orchestrator.plans.document import PlanDocument
from orchestrator.providers import anthropic as claude
from orchestrator.providers.base import ProviderError, ProviderFeedback, redact_secrets

log = logging.getLogger(__name__)

SIMULATED_PLANNER = "simulated planner"
PLAN_TOOL = "submit_plan"
# A planner's plan is for people to review: far smaller than what a plan file may hold.
MAX_PLANNER_SUBTASKS = 30
MAX_GOAL_CHARS = 5_000
PLANNER_MAX_TOKENS = 8_000
PLANNER_TIMEOUT_S = 120.0
ROUNDS = 2  # the first answer and one repair round trip
FeedbackSink = Callable[[ProviderFeedback | None], Any]


class PlannerError(Exception):
    """No plan: the message names the problem. ``attempt`` is the last PlannerAttempt, if any."""

    def __init__(self, message: str, *, attempt: PlannerAttempt | None = None):
        self.message = redact_secrets(message)
        super().__init__(self.message)
        self.attempt = attempt


@dataclass
class PlannerResult:
    plan: Plan
    simulated: bool
    attempt: PlannerAttempt


def propose_plan(goal: str, *, created_by=None, on_feedback: FeedbackSink | None = None) -> PlannerResult:
    """Propose and save a plan for ``goal`` with the active agents, or raise PlannerError.

    ``on_feedback`` receives what each of Claude's answers said about the rate limits
    (``orchestrator.engine.feedback.apply`` is the engine's handler: the caller passes it,
    since this layer does not decide what the limits become)."""
    goal = (goal or "").strip()
    if not goal:
        raise PlannerError("The goal is empty: say in a sentence what the team should achieve.")
    if len(goal) > MAX_GOAL_CHARS:
        raise PlannerError(f"The goal is {len(goal):,} characters long; at most {MAX_GOAL_CHARS:,} are allowed.")
    agents = list(Agent.objects.filter(status=Agent.Status.ACTIVE).order_by("name"))
    if not agents:
        raise PlannerError(
            "There are no active agents to plan with: activate agents in the admin, or run "
            "`python manage.py seed_demo`."
        )
    if not settings.ANTHROPIC_API_KEY:
        return _simulated_plan(goal, agents, created_by)
    return _claude_plan(goal, agents, created_by, on_feedback or _ignore)


# --- Saving -----------------------------------------------------------------------------------------


def _save(spec: plans.PlanSpec, data: dict[str, Any], attempt: PlannerAttempt, created_by) -> Plan:
    """The plan and the attempt's link to it, in one transaction; nothing when the plan is refused."""
    try:
        with transaction.atomic():
            plan = plans.save_plan(
                spec,
                document=json.dumps(data, indent=2, ensure_ascii=False),
                source=Plan.Source.PLANNER,
                source_name=attempt.model,
                created_by=created_by,
            )
            PlannerAttempt.objects.filter(pk=attempt.pk).update(plan=plan)
    except plans.PlanValidationError as error:
        report = error.report("the planner's plan")
        _reject(attempt, report)
        message = f"The plan could not be saved (the team changed meanwhile):\n{report}"
        raise PlannerError(message, attempt=attempt) from None
    attempt.plan = plan
    return plan


def _reject(attempt: PlannerAttempt, error: str) -> None:
    attempt.error = redact_secrets(error)
    PlannerAttempt.objects.filter(pk=attempt.pk).update(error=attempt.error)


# --- Claude ---------------------------------------------------------------------------------------


SYSTEM_PROMPT = (
    "You are the planner of a team of AI agents. You break a goal into subtasks, give each to "
    "the team member best suited to it, and say which subtasks need the results of which. "
    "Subtasks without a dependency between them run at the same time, so prefer independent "
    "branches where the work allows it. You answer only by calling the submit_plan tool."
)


# What the planner leaves to people: the goal is theirs, timeouts and retries are the agents'.
PLANNER_OMITS = {"plan": ("goal", "defaults"), "subtask": ("timeout_s", "max_retries")}
# What a planner's subtask must say besides what every plan file must.
PLANNER_REQUIRES = ("instructions", "depends_on")


def plan_tool(agents: list[Agent]) -> ToolParam:
    """The tool whose input schema is the plan schema, with the team's names as the only agents."""
    return {
        "name": PLAN_TOOL,
        "description": (
            "Submit the plan: its subtasks, each with the agent that does it and the keys of the "
            "subtasks it depends on. The plan is checked whole; if it is rejected you are told why."
        ),
        "input_schema": plan_input_schema([agent.name for agent in agents]),
    }


def plan_input_schema(agent_names: list[str]) -> dict[str, Any]:
    """`plans.document.PlanDocument`'s JSON schema, inlined, with the planner's limits layered on:
    the team's names as the only agents, at most MAX_PLANNER_SUBTASKS subtasks, instructions and
    dependencies required, and without the fields the planner leaves to people."""
    schema = _inline(PlanDocument.model_json_schema())
    _omit(schema, PLANNER_OMITS["plan"])
    subtasks = schema["properties"]["subtasks"]
    subtasks["maxItems"] = MAX_PLANNER_SUBTASKS
    subtask = subtasks["items"]
    _omit(subtask, PLANNER_OMITS["subtask"])
    subtask["properties"]["agent"]["enum"] = agent_names
    subtask["required"] = [*subtask["required"], *PLANNER_REQUIRES]
    return schema


def _omit(schema: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        schema["properties"].pop(name, None)
    schema["required"] = [name for name in schema.get("required", []) if name not in names]


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every `$ref` replaced by its definition and pydantic's titles left out."""
    definitions = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, list):
            return [resolve(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            referred = definitions[node["$ref"].rsplit("/", 1)[-1]]
            return resolve({**referred, **{key: value for key, value in node.items() if key != "$ref"}})
        resolved = {key: resolve(value) for key, value in node.items() if key not in ("title", "properties")}
        if "properties" in node:
            resolved["properties"] = {name: resolve(value) for name, value in node["properties"].items()}
        return resolved

    return resolve(schema)


def planner_prompt(goal: str, agents: list[Agent]) -> str:
    team = "\n".join(_describe_agent(agent) for agent in agents)
    return (
        f"Goal: {goal}\n\n"
        f"The team (give every subtask to one of these agents, by name):\n{team}\n\n"
        "Plan the work and submit it with the submit_plan tool:\n"
        "- a few well-scoped subtasks (usually 3 to 8, never more than "
        f"{MAX_PLANNER_SUBTASKS}), each with a unique key, one agent, a title and instructions;\n"
        "- depends_on names the keys whose results a subtask needs; no cycles;\n"
        "- when the work branches, end with one subtask that brings the results together;\n"
        '- gate "after" makes a person review a subtask\'s output first: use it only for '
        "decisions that are expensive to undo;\n"
        "- estimate the input and output tokens of each subtask roughly."
    )


def _describe_agent(agent: Agent) -> str:
    capabilities = ", ".join(str(c) for c in agent.capabilities or []) or "none listed"
    role = agent.role or "no role given"
    return f"- {agent.name}: {role}. Capabilities: {capabilities}."


@dataclass
class _Answer:
    content: list[TextBlockParam | ToolUseBlockParam]  # the assistant's content blocks, to send back when repairing
    tool_input: Any  # the submit_plan call's input; None when the answer did not call it
    raw: str
    stop_reason: str
    input_tokens: int
    output_tokens: int


def _ignore(feedback: ProviderFeedback | None) -> None:
    pass


def _ask(messages: list[MessageParam], agents: list[Agent], model: str, on_feedback: FeedbackSink) -> _Answer:
    """One call to Claude; ProviderError (redacted, SDK retries off) when it fails."""
    sdk = claude.sync_client(PLANNER_TIMEOUT_S, who="the planner")
    try:
        raw_response = sdk.messages.with_raw_response.create(
            model=model,
            max_tokens=PLANNER_MAX_TOKENS,
            system=SYSTEM_PROMPT,
            messages=messages,
            tools=[plan_tool(agents)],
            tool_choice={"type": "tool", "name": PLAN_TOOL},
        )
        on_feedback(claude.rate_limit_feedback(model, raw_response.headers))
        message = raw_response.parse()
    except claude.SDK_ERRORS as exc:
        error = claude.map_error(exc, timeout_s=PLANNER_TIMEOUT_S, model=model)
        on_feedback(error.feedback)
        raise error from None
    content: list[TextBlockParam | ToolUseBlockParam] = []
    tool_input: Any = None
    texts: list[str] = []
    for block in message.content:
        if block.type == "text":
            content.append({"type": "text", "text": block.text})
            texts.append(block.text)
        elif block.type == "tool_use":
            content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
            if block.name == PLAN_TOOL and tool_input is None:
                tool_input = block.input
    if tool_input is not None:
        raw = json.dumps(tool_input, indent=2, ensure_ascii=False)
    else:
        raw = "\n".join(texts)
    return _Answer(
        content=content,
        tool_input=tool_input,
        raw=raw,
        stop_reason=message.stop_reason or "",
        input_tokens=message.usage.input_tokens or 0,
        output_tokens=message.usage.output_tokens or 0,
    )


class _Rejected(Exception):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def interpret(answer: _Answer, goal: str, agents: list[Agent]) -> tuple[plans.PlanSpec, dict[str, Any]]:
    """The validated plan in Claude's answer, or _Rejected listing every problem."""
    if answer.stop_reason == "max_tokens":
        raise _Rejected(
            [
                f"the answer was cut off at the limit of {PLANNER_MAX_TOKENS:,} output tokens: the plan is too "
                "large; propose fewer, broader subtasks"
            ]
        )
    if answer.tool_input is None:
        said = " ".join(answer.raw.split())[:200]
        raise _Rejected([f"the answer did not call the {PLAN_TOOL} tool" + (f' (it said: "{said}")' if said else "")])
    if not isinstance(answer.tool_input, dict):
        kind = type(answer.tool_input).__name__
        raise _Rejected([f"the {PLAN_TOOL} input must be an object with subtasks, got {kind}"])
    if len(answer.raw.encode()) > plans.MAX_PLAN_BYTES:
        size = len(answer.raw.encode())
        raise _Rejected([f"the answer is {size:,} bytes; a plan may have at most {plans.MAX_PLAN_BYTES:,}"])
    data = {name: value for name, value in answer.tool_input.items() if name != "goal"}
    subtasks = data.get("subtasks")
    if isinstance(subtasks, str):  # the list sent as JSON text: decode it, or say why it is not JSON
        try:
            subtasks = data["subtasks"] = json.loads(subtasks)
        except json.JSONDecodeError as exc:
            raise _Rejected([f"subtasks is not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"]) from None
    if isinstance(subtasks, list) and len(subtasks) > MAX_PLANNER_SUBTASKS:
        raise _Rejected(
            [f"the plan has {len(subtasks)} subtasks; the planner may propose at most {MAX_PLANNER_SUBTASKS}"]
        )
    data = {"goal": goal, **data}
    try:
        spec = plans.validate(data, agents={agent.name: agent for agent in agents})
    except plans.PlanValidationError as error:
        raise _Rejected([str(problem) for problem in error.errors]) from None
    return spec, data


def repair_request(answer: _Answer, problems: list[str]) -> list[MessageParam]:
    """The messages that send the problems back: the answer, then one tool_result per tool call."""
    listing = "\n".join(f"- {problem}" for problem in problems)
    feedback = (
        f"The plan was rejected and nothing was saved. Problems:\n{listing}\n"
        f"Call {PLAN_TOOL} again with the whole corrected plan."
    )
    tool_ids = [block["id"] for block in answer.content if block["type"] == "tool_use"]
    if not tool_ids:
        return [
            {"role": "assistant", "content": answer.content or [{"type": "text", "text": answer.raw or "-"}]},
            {"role": "user", "content": feedback},
        ]
    results: list[ToolResultBlockParam] = [
        {"type": "tool_result", "tool_use_id": tool_id, "is_error": True, "content": feedback} for tool_id in tool_ids
    ]
    return [{"role": "assistant", "content": answer.content}, {"role": "user", "content": results}]


def _claude_plan(goal: str, agents: list[Agent], created_by, on_feedback: FeedbackSink) -> PlannerResult:
    model = settings.GLASSBOX_MODEL
    messages: list[MessageParam] = [{"role": "user", "content": planner_prompt(goal, agents)}]
    problems: list[str] = []
    attempt: PlannerAttempt | None = None
    for round_number in range(1, ROUNDS + 1):
        try:
            answer = _ask(messages, agents, model, on_feedback)
        except ProviderError as error:
            attempt = PlannerAttempt.objects.create(
                goal=goal, model=model, round=round_number, error=error.message, created_by=created_by
            )
            message = f"The planner could not get an answer from Claude ({model}): {error.message}"
            raise PlannerError(message, attempt=attempt) from None
        attempt = PlannerAttempt.objects.create(
            goal=goal,
            model=model,
            round=round_number,
            raw_answer=redact_secrets(answer.raw),
            input_tokens=answer.input_tokens,
            output_tokens=answer.output_tokens,
            created_by=created_by,
        )
        try:
            spec, data = interpret(answer, goal, agents)
        except _Rejected as rejected:
            problems = rejected.problems
            _reject(attempt, "\n".join(problems))
            log.info("planner answer %s rejected (round %s): %s", attempt.pk, round_number, "; ".join(problems))
            messages += repair_request(answer, problems)
            continue
        return PlannerResult(plan=_save(spec, data, attempt, created_by), simulated=False, attempt=attempt)
    listing = "\n".join(f"  {problem}" for problem in problems)
    raise PlannerError(
        f"Claude's plan was rejected {ROUNDS} times (the second time after being told why); nothing was saved. "
        f"Problems in the last answer:\n{listing}",
        attempt=attempt,
    )


# --- The simulated planner (templates in simulated_planner.py) -----------------------------------


def _simulated_plan(goal: str, agents: list[Agent], created_by) -> PlannerResult:
    data = simulated_planner.simulated_plan_data(goal, agents)
    attempt = PlannerAttempt.objects.create(
        goal=goal,
        model=SIMULATED_PLANNER,
        simulated=True,
        raw_answer=json.dumps(data, indent=2, ensure_ascii=False),
        created_by=created_by,
    )
    try:
        spec = plans.validate(data, agents={agent.name: agent for agent in agents})
    except plans.PlanValidationError as error:  # a template that does not fit this team
        report = error.report(SIMULATED_PLANNER)
        _reject(attempt, report)
        raise PlannerError(f"The simulated planner made an invalid plan:\n{report}", attempt=attempt) from None
    return PlannerResult(plan=_save(spec, data, attempt, created_by), simulated=True, attempt=attempt)
