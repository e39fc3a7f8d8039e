"""The fake API's rate limits: token buckets that refill continuously, as the API's do.

The server reports them in ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
{limit,remaining,reset}`` headers, resets in RFC 3339. With ``enforce_limits`` an empty bucket
answers 429 with ``retry-after`` as the API does.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime


class TokenBucket:
    """A bucket of ``per_minute`` units that refills continuously, like the API's limiter."""

    def __init__(self, per_minute: int, clock=time.monotonic):
        self.per_minute = per_minute
        self.clock = clock
        self.level = float(per_minute)
        self.updated = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.per_minute, self.level + (now - self.updated) * self.per_minute / 60.0)
        self.updated = now

    def remaining(self) -> int:
        self._refill()
        return max(0, math.floor(self.level))

    def wait_for(self, amount: int) -> float:
        """Seconds until ``amount`` units are there (0 when they are)."""
        self._refill()
        missing = min(amount, self.per_minute) - self.level
        return max(0.0, missing * 60.0 / self.per_minute)

    def take(self, amount: int) -> None:
        self._refill()
        self.level = max(0.0, self.level - amount)

    def seconds_to_full(self) -> float:
        self._refill()
        return (self.per_minute - self.level) * 60.0 / self.per_minute

    def refill(self) -> None:
        self.level, self.updated = float(self.per_minute), self.clock()


@dataclass
class RateLimits:
    """The account's limits (the defaults are Tier 1 limits of a Sonnet model)."""

    requests_per_minute: int = 50
    input_tokens_per_minute: int = 30_000
    output_tokens_per_minute: int = 8_000


def rfc3339(seconds_from_now: float) -> str:
    moment = datetime.fromtimestamp(time.time() + seconds_from_now, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
