"""How long a subtask is expected to take: the critical-path weights of admission and pre-flight."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.models import Agent, Plan, Subtask

if TYPE_CHECKING:
    from orchestrator.plans.spec import SubtaskSpec

# Duration estimate for agents without a latency model: output tokens at this speed.
OUTPUT_TOKENS_PER_SECOND = 50.0
MIN_ESTIMATED_DURATION_S = 1.0


def estimated_duration_s(subtask: SubtaskSpec | Subtask, agent: Agent | None) -> float:
    """Expected seconds for one subtask: its agent's latency model, else output tokens / speed.

    A simulated agent's `provider_options["latency"]` gives the centre of its distribution
    (fixed: `seconds`; uniform: midpoint of `low_s`..`high_s`; lognormal: `median_s`). Any other
    agent is estimated at OUTPUT_TOKENS_PER_SECOND, never under MIN_ESTIMATED_DURATION_S.
    """
    return _estimate(subtask.estimated_output_tokens, agent.provider_options if agent is not None else None)


def _estimate(estimated_output_tokens: int, provider_options: Any) -> float:
    latency = _latency_centre_s(provider_options)
    if latency is not None:
        return latency
    return max(MIN_ESTIMATED_DURATION_S, estimated_output_tokens / OUTPUT_TOKENS_PER_SECOND)


def _latency_centre_s(provider_options: Any) -> float | None:
    """The mean/median of a latency model, or None when there is no usable one."""
    if not isinstance(provider_options, dict) or not isinstance(provider_options.get("latency"), dict):
        return None
    latency = provider_options["latency"]
    try:
        match latency.get("dist"):
            case "fixed":
                centre = float(latency["seconds"])
            case "uniform":
                centre = (float(latency["low_s"]) + float(latency["high_s"])) / 2
            case "lognormal":
                centre = float(latency["median_s"])
            case _:
                return None
    except (KeyError, TypeError, ValueError):
        return None
    return centre if centre >= 0 else None


def plan_weights(plan: Plan) -> dict[str, float]:
    """Estimated seconds per subtask key of a saved plan (critical-path weights). Read as plain
    values: the run page's ETA asks for them at every live frame."""
    rows = plan.subtasks.values_list("key", "estimated_output_tokens", "agent__provider_options")
    return {key: _estimate(tokens, options) for key, tokens, options in rows}
