"""How long a subtask is expected to take: the critical-path weights of admission and pre-flight."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.models import Agent, Plan, Subtask
from orchestrator.providers.simulated import DEFAULT_LATENCY, LatencyModel

if TYPE_CHECKING:
    from orchestrator.plans.spec import SubtaskSpec

# Duration estimate for agents without a latency model: output tokens at this speed.
OUTPUT_TOKENS_PER_SECOND = 50.0
MIN_ESTIMATED_DURATION_S = 1.0


def estimated_duration_s(subtask: SubtaskSpec | Subtask, agent: Agent | None) -> float:
    """Expected seconds for one subtask: its agent's latency model, else output tokens / speed.

    A simulated agent's `provider_options["latency"]` gives the mean of its distribution (fixed:
    `seconds`; uniform: midpoint of `low_s`..`high_s`; lognormal: `median_s` × e^(sigma²/2)).
    The mean, not the median: a critical path and a schedule add durations up, and the sum of
    lognormal draws centres on the sum of their means (with the median, the 293-task plan's
    forecast came out 8 % short of its runs). Any other agent is estimated at
    OUTPUT_TOKENS_PER_SECOND, never under MIN_ESTIMATED_DURATION_S.
    """
    return duration_s(subtask.estimated_output_tokens, agent.provider_options if agent is not None else None)


def duration_s(estimated_output_tokens: int, provider_options: Any) -> float:
    """`estimated_duration_s` from plain values: a subtask's estimated output tokens and its agent's
    provider options (read as values where rows would cost too much: the live ETA)."""
    latency = _latency_mean_s(provider_options)
    if latency is not None:
        return latency
    return max(MIN_ESTIMATED_DURATION_S, estimated_output_tokens / OUTPUT_TOKENS_PER_SECOND)


def _latency_mean_s(provider_options: Any) -> float | None:
    """The mean of a latency model, or None when there is no complete one."""
    if not isinstance(provider_options, dict) or not isinstance(provider_options.get("latency"), dict):
        return None
    latency = provider_options["latency"]
    try:
        match latency.get("dist"):
            case "fixed":
                model = LatencyModel("fixed", seconds=float(latency["seconds"]))
            case "uniform":
                model = LatencyModel("uniform", low_s=float(latency["low_s"]), high_s=float(latency["high_s"]))
            case "lognormal":
                sigma = float(latency.get("sigma", DEFAULT_LATENCY["sigma"]))
                model = LatencyModel("lognormal", median_s=float(latency["median_s"]), sigma=sigma)
            case _:
                return None
    except (KeyError, TypeError, ValueError):
        return None
    mean = model.expected_s()
    return mean if mean >= 0 else None


def plan_weights(plan: Plan) -> dict[str, float]:
    """Estimated seconds per subtask key of a saved plan (critical-path weights). Read as plain
    values: the run page's ETA asks for them at every live frame."""
    rows = plan.subtasks.values_list("key", "estimated_output_tokens", "agent__provider_options")
    return {key: duration_s(tokens, options) for key, tokens, options in rows}
