"""The agent registry and provider limits as governance data: every change is an Event.

The admin (and any other entry point) changes agents and limits only through these functions,
so that the audit log shows who changed what, from which value to which. An agent's lifecycle
is draft → active → retired (and back, if someone decides so); only an active agent can be
scheduled (the scheduler and plan validation refuse the others). Agents are never deleted:
plans, runs and the audit log refer to them; retire one instead.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from orchestrator import events
from orchestrator.models import Agent, ProviderLimit
from orchestrator.providers.options import option_problems
from orchestrator.wording import Refusal

# Fields a person edits, in the order the audit payload lists them.
AGENT_FIELDS = (
    "name",
    "role",
    "capabilities",
    "provider",
    "model",
    "system_prompt",
    "max_concurrency",
    "timeout_s",
    "max_retries",
    "max_output_tokens",
    "max_steps",
    "provider_options",
    "status",
    "owner",
)
LIMIT_FIELDS = (
    "provider",
    "model",
    "requests_per_minute",
    "input_tokens_per_minute",
    "output_tokens_per_minute",
    "max_in_flight",
    "input_price_per_mtok",
    "output_price_per_mtok",
)
# Long texts are cut in the audit payload; the row keeps the whole text.
MAX_AUDIT_TEXT = 2000


class RegistryError(Refusal):
    """A registry change that cannot be made; the message says why, for people (`sentence` on its own)."""


class InvalidSettings(RegistryError):
    """Settings with problems, by field; nothing was saved."""

    def __init__(self, problems: dict[str, list[str]]):
        self.problems = problems
        super().__init__("; ".join(f"{field}: {problem}" for field, items in problems.items() for problem in items))


class InvalidAgent(InvalidSettings):
    """An agent's settings with problems, by field; nothing was saved."""


class InvalidProviderLimit(InvalidSettings):
    """A provider limit's values with problems (a negative price, a limit of 0), by field; nothing was saved."""


def field_problems(obj) -> dict[str, list[str]]:
    """Every problem the model's own validators find in `obj`, by field (all of them, not the first)."""
    try:
        obj.full_clean()
    except ValidationError as error:
        return {field: [str(message) for message in messages] for field, messages in error.message_dict.items()}
    return {}


def agent_problems(agent: Agent) -> dict[str, list[str]]:
    """Every problem of an agent's settings, by field: the model's validators (ranges, the name's
    form and uniqueness, the provider's choices) and the provider's option schema
    (providers/options.py). Empty when the agent may be saved."""
    problems = field_problems(agent)
    if "provider" not in problems:
        options = option_problems(agent.provider, agent.provider_options)
        if options:
            problems.setdefault("provider_options", []).extend(options)
    return problems


def _audit_value(obj, field: str) -> Any:
    """A field's value as plain JSON: users by name, money as text, long texts cut."""
    if field == "owner":
        owner = getattr(obj, "owner", None)
        return owner.get_username() if owner is not None else None
    value = getattr(obj, field)
    if isinstance(value, Decimal):  # as stored: 3 and 3.0000 are the same price
        places = obj._meta.get_field(field).decimal_places
        return format(value.quantize(Decimal(1).scaleb(-places)), "f")
    if isinstance(value, str) and len(value) > MAX_AUDIT_TEXT:
        return value[:MAX_AUDIT_TEXT] + "…"
    return value


def _snapshot(obj, fields) -> dict[str, Any]:
    return {field: _audit_value(obj, field) for field in fields}


def _changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    return {field: [before[field], after[field]] for field in after if before.get(field) != after[field]}


def audited_values(obj: Agent | ProviderLimit) -> dict[str, Any]:
    """An agent's or a provider limit's fields as its audit events record them: take them before
    changing a row in memory and compare with `changed_fields` to say what a save will change."""
    return _snapshot(obj, AGENT_FIELDS if isinstance(obj, Agent) else LIMIT_FIELDS)


def changed_fields(before: dict[str, Any], obj: Agent | ProviderLimit) -> dict[str, list[Any]]:
    """{field: [old, new]} of what changed in `obj` since `audited_values` gave `before`."""
    return _changes(before, audited_values(obj))


# A value longer than this is named in a change's message without its old and new values (a
# system prompt, provider options): the event's payload keeps them whole.
SHORT_VALUE_CHARS = 40


def describe_changes(changes: dict[str, list], *, empty: str = "null") -> str:
    """The changed fields in words, each short value with its old and new value:
    "model sim-1 → sim-2, max_concurrency 4 → 7, system_prompt". `empty` is how a None reads (a
    provider limit's "no limit")."""
    parts = []
    for field, (old, new) in changes.items():
        before, after = json.dumps(old), json.dumps(new)
        short = max(len(before), len(after)) <= SHORT_VALUE_CHARS
        parts.append(f"{field} {_plain(old, empty)} → {_plain(new, empty)}" if short else field)
    return ", ".join(parts)


def _plain(value, empty: str) -> str:
    if value is None:
        return empty
    return value if isinstance(value, str) and value else json.dumps(value)


# --- Agents --------------------------------------------------------------------------------------


def set_status(agent: Agent, status: str, *, user=None, actor: str = "") -> bool:
    """Move an agent to `status` (draft, active, retired) and record it. False if it was already there.

    A retired agent stays in the registry (plans and history refer to it) but is never
    scheduled again: tasks of its runs that have not started wait with the reason shown.
    """
    if status not in Agent.Status.values:
        raise RegistryError(f"unknown agent status {status!r}: use one of {', '.join(Agent.Status.values)}")
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        old = locked.status
        if old == status:
            agent.status = status
            return False
        locked.status = status
        locked.save(update_fields=["status", "updated_at"])
        _record_status_change(locked, old, status, user, actor)
    agent.status = status
    return True


def _record_status_change(agent: Agent, old: str, new: str, user, actor: str) -> None:
    events.record(
        "agent.status_changed",
        agent=agent,
        user=user,
        actor_name=actor,
        message=f"agent {agent.name} {old} → {new}",
        payload={"agent": agent.name, "from": old, "to": new},
    )


def save_agent(agent: Agent, *, user=None, actor: str = "") -> Agent:
    """Create or update an agent (from the admin, `manage.py agent` or the API) and record every
    changed field. Invalid settings raise InvalidAgent naming every problem, and nothing is saved.
    `actor` names who changed it when no user did (the command line: `console.cli_actor()`).

    A new agent gives `agent.created` with its fields; a change gives `agent.changed` with
    {field: [old, new]} and, when the status moved, also `agent.status_changed`, so that one
    event type lists every lifecycle transition whatever the entry point. Saving with no
    change records nothing.
    """
    problems = agent_problems(agent)
    if problems:
        raise InvalidAgent(problems)
    with transaction.atomic():
        previous = Agent.objects.select_for_update().filter(pk=agent.pk).first() if agent.pk else None
        if previous is None:
            agent.save()
            events.record(
                "agent.created",
                agent=agent,
                user=user,
                actor_name=actor,
                message=f"agent {agent.name} created ({agent.status})",
                payload={"agent": agent.name, "fields": _snapshot(agent, AGENT_FIELDS)},
            )
            return agent
        changes = _changes(_snapshot(previous, AGENT_FIELDS), _snapshot(agent, AGENT_FIELDS))
        agent.save()
        if changes:
            events.record(
                "agent.changed",
                agent=agent,
                user=user,
                actor_name=actor,
                message=f"agent {agent.name} changed: {describe_changes(changes)}",
                payload={"agent": agent.name, "changes": changes},
            )
        if "status" in changes:
            old_status, new_status = changes["status"]
            _record_status_change(agent, old_status, new_status, user, actor)
    return agent


# --- Provider limits -----------------------------------------------------------------------------


def save_provider_limit(limit: ProviderLimit, *, user=None, actor: str = "") -> ProviderLimit:
    """Create or update a provider's limits and prices and record what changed. `actor` names who
    changed them when no user did (the command line: `console.cli_actor()`). Saving with no change
    records nothing.

    Lowering `max_in_flight` below the adaptive cap in force brings that cap down with it, so
    the new limit holds at once. Invalid values (a negative price, a limit of 0) raise
    InvalidProviderLimit naming every problem, and nothing is saved.
    """
    problems = field_problems(limit)
    if problems:
        raise InvalidProviderLimit(problems)
    with transaction.atomic():
        previous = ProviderLimit.objects.select_for_update().filter(pk=limit.pk).first() if limit.pk else None
        if (
            limit.max_in_flight is not None
            and limit.effective_in_flight is not None
            and limit.effective_in_flight > limit.max_in_flight
        ):
            limit.effective_in_flight = limit.max_in_flight
        limit.save()
        if previous is None:
            events.record(
                "provider_limit.created",
                user=user,
                actor_name=actor,
                message=f"provider limit {limit} created",
                payload={"limit": str(limit), "fields": _snapshot(limit, LIMIT_FIELDS)},
            )
            return limit
        changes = _changes(_snapshot(previous, LIMIT_FIELDS), _snapshot(limit, LIMIT_FIELDS))
        if changes:
            events.record(
                "provider_limit.changed",
                user=user,
                actor_name=actor,
                message=f"provider limit {limit} changed: {describe_changes(changes, empty='no limit')}",
                payload={"limit": str(limit), "changes": changes},
            )
    return limit


def delete_provider_limit(limit: ProviderLimit, *, user=None, actor: str = "") -> None:
    """Delete a provider's limits and prices (its agents then run uncapped and unpriced), recorded."""
    with transaction.atomic():
        fields = _snapshot(limit, LIMIT_FIELDS)
        name = str(limit)
        limit.delete()
        events.record(
            "provider_limit.deleted",
            user=user,
            actor_name=actor,
            message=f"provider limit {name} deleted",
            payload={"limit": name, "fields": fields},
        )
