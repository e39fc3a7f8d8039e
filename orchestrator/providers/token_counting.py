"""How many tokens a text is, counted as each provider counts them (issue 12, point 7).

Context passed between agents is bounded in tokens (``GLASSBOX_SUMMARY_TOKENS``). Counting words
instead lets 191 words through as ≈ 271 Claude tokens, so the bound is counted by the provider
that receives the text:

* ``anthropic``: the Messages API's own token counting (``POST /v1/messages/count_tokens``,
  ``client.messages.count_tokens``), with the few tokens that wrap any user message taken off.
  Counts are cached per process (the same summary is counted again for every attempt that
  receives it). When the API cannot be asked (no key, an error), a conservative estimate is used
  instead (one token per three characters, more than Claude's tokenizer gives for prose), so the
  bound still holds, and the fallback is logged.
* ``simulated``: its own count of a text, one token per whitespace-separated word.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterable
from typing import Protocol

from orchestrator.providers.base import ProviderError

log = logging.getLogger(__name__)

COUNT_TIMEOUT_S = 10.0
FALLBACK_CHARS_PER_TOKEN = 3


class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...


class WordCounter:
    """The simulated provider's count: words."""

    def count(self, text: str) -> int:
        return len(text.split())


class AnthropicCounter:
    """Claude's count of a text, from the Messages API's token counting."""

    def __init__(self, model: str) -> None:
        self.model = model

    def count(self, text: str) -> int:
        errors: tuple[type[Exception], ...] = (ProviderError, *_sdk_errors())
        try:
            return max(0, _api_count(self.model, text) - _api_count(self.model, ""))
        except errors as error:
            log.warning(
                "token counting for %s unavailable (%s); estimating %d characters a token",
                self.model,
                error,
                FALLBACK_CHARS_PER_TOKEN,
            )
            return math.ceil(len(text) / FALLBACK_CHARS_PER_TOKEN)


class MaxCounter:
    """The strictest of several counts: for a text that several agents receive."""

    def __init__(self, counters: Iterable[TokenCounter]) -> None:
        self.counters = list(counters)

    def count(self, text: str) -> int:
        return max((counter.count(text) for counter in self.counters), default=len(text.split()))


def counter_for(provider: str, model: str) -> TokenCounter:
    if provider == "anthropic":
        return AnthropicCounter(model)
    return WordCounter()


def _sdk_errors() -> tuple[type[Exception], ...]:
    from orchestrator.providers.anthropic import SDK_ERRORS

    return SDK_ERRORS


@functools.lru_cache(maxsize=4096)
def _cached_count(model: str, base_url: str, text: str) -> int:
    from orchestrator.providers.anthropic import sync_client

    sdk = sync_client(COUNT_TIMEOUT_S, who="token counting")
    # An empty message is refused: "" is measured as "." and the one token of "." taken off.
    content = text or "."
    answer = sdk.messages.count_tokens(model=model, messages=[{"role": "user", "content": content}])
    return answer.input_tokens - (1 if not text else 0)


def _api_count(model: str, text: str) -> int:
    from orchestrator.providers.anthropic import base_url

    return _cached_count(model, base_url(), text)
