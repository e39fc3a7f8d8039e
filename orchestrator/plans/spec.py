"""A validated plan, before it is saved: the subtasks, the edges and the agents they name."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.models import Agent, Subtask
from orchestrator.plans import dag
from orchestrator.plans.estimates import estimated_duration_s


@dataclass
class SubtaskSpec:
    key: str
    agent: str
    title: str
    instructions: str = ""
    depends_on: list[str] = field(default_factory=list)
    gate: str = Subtask.Gate.NONE.value
    priority: int = 0
    # Set only when the plan gives them (on the subtask or in `defaults`); else the agent's apply.
    timeout_s: int | None = None
    max_retries: int | None = None
    estimated_input_tokens: int = 0
    estimated_output_tokens: int = 0
    position: int = 0
    inputs: str = ""  # "", "summaries" or "full" (Subtask.Inputs)


@dataclass
class PlanSpec:
    goal: str
    subtasks: list[SubtaskSpec]
    edges: list[dag.Edge]
    defaults: dict[str, int] = field(default_factory=dict)
    # The agents the subtasks name, as looked up during validation.
    agents: dict[str, Agent] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        return [subtask.key for subtask in self.subtasks]

    def weights(self) -> dict[str, float]:
        """Estimated seconds per subtask: the critical-path weights."""
        return {subtask.key: estimated_duration_s(subtask, self.agents.get(subtask.agent)) for subtask in self.subtasks}

    def summary(self) -> dag.DagSummary:
        return dag.summarize(self.keys, self.edges, self.weights())
