"""Glassbox's domain model (DESIGN §2), a module per job: the agent registry and providers' limits
(agents), plans (plans), runs and what happens in them (runs), the event log (events), the rate
limiter's counters (rate_counters), API tokens (api_tokens) and the tool registry (tools).

State transitions live in the engine modules (scheduler, execution, runs); the models hold
data, small derived properties and the guards that keep history append-only. Callers import
every name from here (`from orchestrator.models import Run`); the app label stays `orchestrator`.
"""

# In the order the models were written when they were one module: Django registers them as they
# are imported, and that order is the app's (its content types and permissions in a new database).
# isort: off
from orchestrator.models.agents import Agent, ProviderLimit
from orchestrator.models.plans import Dependency, Plan, PlannerAttempt, Subtask
from orchestrator.models.runs import Attempt, Checkpoint, EventSequence, NoRetry, Run, TaskRun
from orchestrator.models.events import AppendOnlyError, Event, EventQuerySet
from orchestrator.models.rate_counters import RateCounter
from orchestrator.models.api_tokens import ApiToken
from orchestrator.models.tools import Tool, ToolGrant, ToolServer
# isort: on

__all__ = [
    "Agent",
    "ApiToken",
    "AppendOnlyError",
    "Attempt",
    "Checkpoint",
    "Dependency",
    "Event",
    "EventQuerySet",
    "EventSequence",
    "NoRetry",
    "Plan",
    "PlannerAttempt",
    "ProviderLimit",
    "RateCounter",
    "Run",
    "Subtask",
    "TaskRun",
    "Tool",
    "ToolGrant",
    "ToolServer",
]
