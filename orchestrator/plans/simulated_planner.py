"""The simulated planner's plans: a goal becomes a plan document from templates, with no model.

A research fan-out / fan-in, a build pipeline (spec → design → code ∥ tests → review) or a
writing pipeline, chosen from the goal's words, staffed with the active agents whose name, role
and capabilities fit each step. Deterministic: the same goal and team give the same plan.
orchestrator/plans/planner.py validates, keeps and saves what this proposes, as for Claude.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.models import Agent

# Words that point a goal at one shape of plan.
SHAPE_WORDS = {
    "research": {
        "research",
        "compare",
        "comparison",
        "investigate",
        "survey",
        "evaluate",
        "assess",
        "study",
        "explore",
        "analyse",
        "analyze",
        "analysis",
        "options",
        "market",
        "decide",
        "decision",
        "choose",
        "whether",
        "which",
        "pros",
        "cons",
        "risks",
        "brief",
        "versus",
        "vs",
    },
    "build": {
        "build",
        "implement",
        "develop",
        "code",
        "feature",
        "add",
        "create",
        "ship",
        "fix",
        "refactor",
        "api",
        "app",
        "application",
        "service",
        "endpoint",
        "migrate",
        "integrate",
        "deploy",
        "prototype",
        "bug",
        "library",
        "website",
        "backend",
        "frontend",
        "cli",
        "database",
    },
    "write": {
        "write",
        "draft",
        "document",
        "documentation",
        "report",
        "article",
        "blog",
        "post",
        "guide",
        "proposal",
        "announcement",
        "newsletter",
        "essay",
        "tutorial",
        "readme",
        "summarise",
        "summarize",
        "presentation",
        "email",
    },
}
SHAPE_ORDER = ("research", "build", "write")  # ties go to the earlier shape

# Words in an agent's name, role or capabilities that fit each kind of step.
STEP_WORDS = {
    "research": {"research", "researcher", "facts", "sources", "investigate", "analysis", "analyst", "questions"},
    "design": {"design", "designs", "architect", "architecture", "system", "systems", "modelling", "modeling"},
    "code": {
        "code",
        "coder",
        "developer",
        "python",
        "django",
        "sql",
        "implement",
        "engineer",
        "programming",
        "refactoring",
    },
    "test": {"test", "tests", "tester", "pytest", "qa", "testing", "measurements", "instrumentation"},
    "review": {"review", "reviews", "reviewer", "security", "consistency", "correctness", "audit"},
    "write": {"write", "writes", "writer", "writing", "synthesis", "documents", "documentation", "editor"},
}
_WORDS = re.compile(r"[a-z0-9]+")


def choose_shape(goal: str) -> str:
    words = _WORDS.findall(goal.lower())
    scores = {shape: sum(word in SHAPE_WORDS[shape] for word in words) for shape in SHAPE_ORDER}
    best = max(SHAPE_ORDER, key=lambda shape: (scores[shape], -SHAPE_ORDER.index(shape)))
    return best if scores[best] else "research"


class _Staffing:
    """Picks the active agent that fits a kind of step best; round-robin when none fits."""

    def __init__(self, agents: list[Agent]):
        self.agents = agents
        self.words = {agent.pk: self._words_of(agent) for agent in agents}
        self.fallback = 0

    @staticmethod
    def _words_of(agent: Agent) -> set[str]:
        text = " ".join([agent.name, agent.role or "", *(str(c) for c in agent.capabilities or [])])
        return set(_WORDS.findall(text.lower().replace("_", " ").replace("-", " ")))

    def agent_for(self, kind: str) -> str:
        scores = [(len(self.words[agent.pk] & STEP_WORDS[kind]), agent) for agent in self.agents]
        best_score = max(score for score, _ in scores)
        if best_score:
            return next(agent.name for score, agent in scores if score == best_score)
        agent = self.agents[self.fallback % len(self.agents)]
        self.fallback += 1
        return agent.name


def _step(
    key: str, kind: str, title: str, instructions: str, depends_on: list[str], staff: _Staffing, **extra: Any
) -> dict[str, Any]:
    return {
        "key": key,
        "agent": staff.agent_for(kind),
        "title": title,
        "instructions": instructions,
        "depends_on": depends_on,
        "estimate": {"input_tokens": extra.pop("input_tokens", 600), "output_tokens": extra.pop("output_tokens", 800)},
        **extra,
    }


RESEARCH_ANGLES = (
    ("background", "Background and current state", "what the situation is today and how it came to be"),
    ("options", "Options and alternatives", "the realistic options, including doing nothing, and how they differ"),
    ("risks", "Risks and constraints", "what could go wrong with each option and which constraints rule options out"),
    (
        "costs",
        "Costs and effort",
        "what each option costs in money, time and people, with the evidence for the numbers",
    ),
)


def research_plan(goal: str, staff: _Staffing) -> list[dict[str, Any]]:
    """Fan-out / fan-in: frame the question, four angles side by side, one synthesis."""
    angle_list = "; ".join(f"{title.lower()} ({what})" for _, title, what in RESEARCH_ANGLES)
    steps = [
        _step(
            "scope",
            "research",
            "Frame the question",
            "State the question behind the goal in one sentence, the assumptions you make, and for each of "
            f"these angles the two or three questions it must answer: {angle_list}.",
            [],
            staff,
            priority=10,
            output_tokens=500,
        )
    ]
    for key, title, what in RESEARCH_ANGLES:
        steps.append(
            _step(
                f"research_{key}",
                "research",
                title,
                f"Using the frame from the scoping step, investigate {what}. Report each finding with its "
                "evidence and say how certain it is.",
                ["scope"],
                staff,
            )
        )
    steps.append(
        _step(
            "synthesis",
            "write",
            "Bring the findings together",
            "Merge the four investigations into one brief: the answer to the question, the reasons for it, "
            "the open risks and a recommendation. Say where the investigations disagree.",
            [f"research_{key}" for key, _, _ in RESEARCH_ANGLES],
            staff,
            input_tokens=3000,
            output_tokens=1000,
        )
    )
    return steps


def build_plan(goal: str, staff: _Staffing) -> list[dict[str, Any]]:
    """A build pipeline: spec → design (reviewed by a person) → code ∥ tests → review."""
    return [
        _step(
            "spec",
            "research",
            "Write the specification",
            "Write a short specification for the goal: user stories, behaviour at the edges (errors, limits), "
            "security requirements, and acceptance criteria a tester can check one by one.",
            [],
            staff,
            priority=10,
        ),
        _step(
            "design",
            "design",
            "Design the implementation",
            "From the specification, design the implementation: components, data model, interfaces and the "
            "trade-offs you chose. A person reviews this design before any code is written.",
            ["spec"],
            staff,
            gate="after",
            priority=8,
            output_tokens=1000,
        ),
        _step(
            "implement",
            "code",
            "Implement the approved design",
            "Implement the approved design. Where it is silent, choose the simplest option and note it. Return "
            "the code as files with their paths, then the list of deviations from the design.",
            ["design"],
            staff,
            priority=5,
            input_tokens=2000,
            output_tokens=1000,
        ),
        _step(
            "tests",
            "test",
            "Write the tests",
            "From the acceptance criteria and the approved design, write tests that fail when the behaviour is "
            "wrong, one or more per criterion, against the design's names.",
            ["design"],
            staff,
            priority=5,
            input_tokens=2000,
            output_tokens=900,
        ),
        _step(
            "review",
            "review",
            "Review implementation and tests",
            "Review the implementation and the tests together against the specification: security first, then "
            "correctness, then coverage of every acceptance criterion. List blocking issues and suggestions "
            'separately, each with a concrete fix, and end with "approve" or "changes requested".',
            ["implement", "tests"],
            staff,
            input_tokens=4000,
        ),
    ]


WRITING_SECTIONS = (
    ("context", "Context and motivation", "why the reader should care and what they need to know first"),
    ("body", "Main content", "the substance: the facts, the argument or the steps, in a logical order"),
    ("next_steps", "Conclusions and next steps", "what follows from the content and what the reader should do"),
)


def writing_plan(goal: str, staff: _Staffing) -> list[dict[str, Any]]:
    """A writing pipeline: outline → sections side by side → one edited document."""
    steps = [
        _step(
            "outline",
            "research",
            "Outline the document",
            "Name the audience and the purpose, then outline the document: for each section "
            f"({', '.join(title.lower() for _, title, _ in WRITING_SECTIONS)}) the points it must make.",
            [],
            staff,
            priority=10,
            output_tokens=500,
        )
    ]
    for key, title, what in WRITING_SECTIONS:
        steps.append(
            _step(
                f"section_{key}",
                "write",
                f"Draft: {title.lower()}",
                f"Following the outline, draft the section on {what}. Keep to the outline's points.",
                ["outline"],
                staff,
            )
        )
    steps.append(
        _step(
            "edit",
            "write",
            "Edit into one document",
            "Merge the drafted sections into one consistent document: one voice, no repetition, transitions "
            "between sections, and a title. Note any point of the outline that no section covered.",
            [f"section_{key}" for key, _, _ in WRITING_SECTIONS],
            staff,
            input_tokens=3000,
            output_tokens=1200,
        )
    )
    return steps


SHAPES = {"research": research_plan, "build": build_plan, "write": writing_plan}


def simulated_plan_data(goal: str, agents: list[Agent]) -> dict[str, Any]:
    """The simulated planner's plan document for ``goal``: same goal and team, same plan."""
    shape = choose_shape(goal)
    return {"goal": goal, "subtasks": SHAPES[shape](goal, _Staffing(agents))}
