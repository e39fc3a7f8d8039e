"""Is an agent's `provider_options` valid for its provider? Named problems, checked where the
options are entered (the admin, `manage.py agent`, the API) and before a plan runs.

Each provider owns its schema: the simulated provider's is `simulated.option_problems` (the
rules of `SimulationOptions.parse`); the anthropic provider takes no options, so any key would
be silently ignored and is named instead.
"""

from __future__ import annotations

from typing import Any


def option_problems(provider: str, options: Any) -> list[str]:
    """Every problem of `options` for `provider`, in words ([] when they are valid)."""
    if provider == "simulated":
        from orchestrator.providers.simulated import option_problems as simulated_problems

        return simulated_problems(options)
    if not isinstance(options, dict):
        return [f"provider options must be an object (a JSON mapping), got {options!r}"]
    if provider == "anthropic":
        return [f"unknown option {key!r}: the anthropic provider takes no provider options" for key in options]
    return [f"unknown provider {provider!r}"]
