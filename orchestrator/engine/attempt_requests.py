"""The exact request behind each attempt, kept on its Attempt row (`Attempt.request`).

People debugging an answer need what the model was given, as LangSmith shows it: the provider and
model, `max_tokens`, the timeout, the system prompt and the prompt itself with the upstream
summaries that `context.build_prompt` put in it. The worker records it when it builds the
request, before it is sent, so a failed or lost attempt shows it too.
"""

from __future__ import annotations

from typing import Any

from orchestrator.models import Attempt
from orchestrator.providers.base import AgentRequest


def as_record(request: AgentRequest) -> dict[str, Any]:
    """The request as JSON: what the provider was asked, nothing secret (no API key is in it)."""
    return {
        "provider": request.provider,
        "model": request.model,
        "max_tokens": request.max_tokens,
        "timeout_s": request.timeout_s,
        "system_prompt": request.system_prompt,
        "prompt": request.prompt,
        "options": request.options,
    }


def record(attempt_id: int, request: AgentRequest) -> None:
    """Keep `request` on its attempt (one UPDATE; the attempt's state is not touched)."""
    Attempt.objects.filter(pk=attempt_id).update(request=as_record(request))
