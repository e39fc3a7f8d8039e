"""The rate limiter shared by every worker process (DESIGN §3, admission).

Budgets are "N units per minute" named by a free-form key such as ``"sim-server:sim-1:rpm"``.
The algorithm comes from the `limits` library: its sliding-window counter, which weighs the
previous minute's count by how much of it still overlaps the last 60 seconds. We use it rather
than the fixed window because

* taking is atomic and conditional in both backends (a Lua script in Redis, a conditional
  UPDATE in the database): a refused request takes nothing, so a large request that does not
  fit never eats the budget of the small ones behind it (the fixed-window strategy increments
  first and compares afterwards);
* it does not allow the double burst a fixed window allows around the minute boundary, which
  is closer to the continuously refilling buckets real providers use.

Where the counters live (``settings.GLASSBOX_RATE_LIMIT_STORAGE``):

* ``"database"`` (embedded default): :class:`DatabaseStorage`, a `limits` storage backend on the
  ``RateCounter`` table. It is correct across processes: SQLite serialises writers (immediate
  transactions), PostgreSQL locks the counter row during the conditional UPDATE. Called inside
  an outer transaction (a scheduler step), the taking commits or rolls back with it.
* ``"redis"`` (production): :class:`AlignedRedisStorage`, `limits`' Redis storage on
  ``settings.REDIS_URL`` (keys under ``settings.REDIS_PREFIX``) with its sliding window aligned
  on the clock exactly as the database's, so both profiles admit by the same rule. Redis changes
  are not transactional with the database.

Taking is not the last word (DESIGN §9): a provider counts output tokens from ``max_tokens`` when a
request starts and corrects them to the real count when it ends, and so do we. :func:`reserve`
says which minute window it took from, and :func:`correct` later gives back (or adds) the
difference to that same window, so the budget frees as soon as an answer turns out shorter.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from limits import RateLimitItemPerMinute
from limits.storage import RedisStorage, SlidingWindowCounterSupport, Storage
from limits.storage.base import TimestampedSlidingWindow
from limits.strategies import SlidingWindowCounterRateLimiter

from orchestrator import sql
from orchestrator.models import RateCounter

WINDOW_S = 60
# Storage keys get a "/<window number>" suffix and must fit RateCounter.key (255 characters).
MAX_KEY_LENGTH = 200
# A refused acquire never answers 0.0 (which means "taken"): budget freed between the refusal
# and the computation of the wait is picked up by retrying after this short pause.
MIN_WAIT_S = 0.05
_HAIR_S = 0.01

SlidingWindow = tuple[int, float, int, float]


class DatabaseStorage(Storage, SlidingWindowCounterSupport, TimestampedSlidingWindow):
    """A `limits` storage backend on the Django database (``RateCounter`` rows).

    Fixed-window counters (``incr``/``get``/``get_expiry``) use one row per key whose
    ``expires_at`` marks the end of its window; an expired row counts as absent and is reset
    by the next ``incr``. The sliding-window counter uses one row per key and minute, named
    ``<key>/<window number>`` like `limits`' in-memory storage, aligned on the wall clock.
    Rows whose window can no longer matter are deleted whenever a new window row is created.

    ``clock`` returns the current Unix time; tests replace it to move through windows.
    """

    STORAGE_SCHEME = ["django"]

    def __init__(
        self,
        uri: str | None = None,
        wrap_exceptions: bool = False,
        clock: Callable[[], float] = time.time,
        **options: float | str | bool,
    ) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self.clock = clock

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return DatabaseError

    # --- fixed window -----------------------------------------------------------------------

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Add ``amount`` to the counter of ``key`` and return the new count, atomically.

        A live counter is incremented in place; an expired one is restarted at ``amount`` with
        a fresh window; a missing one is created (if another process creates it first, ours
        becomes an increment of theirs).
        """
        now = self.clock()
        with transaction.atomic():
            incremented = RateCounter.objects.filter(key=key, expires_at__gt=now).update(count=F("count") + amount)
            if not incremented:
                restarted = RateCounter.objects.filter(key=key, expires_at__lte=now).update(
                    count=amount, expires_at=now + expiry
                )
                if not restarted:
                    _, created = RateCounter.objects.get_or_create(
                        key=key, defaults={"count": amount, "expires_at": now + expiry}
                    )
                    if not created:
                        RateCounter.objects.filter(key=key).update(count=F("count") + amount)
            return RateCounter.objects.values_list("count", flat=True).get(key=key)

    def get(self, key: str) -> int:
        return self._live_counts([key], self.clock()).get(key, 0)

    def get_expiry(self, key: str) -> float:
        now = self.clock()
        expires_at = (
            RateCounter.objects.filter(key=key, expires_at__gt=now).values_list("expires_at", flat=True).first()
        )
        return expires_at if expires_at is not None else now

    def clear(self, key: str) -> None:
        RateCounter.objects.filter(key=key).delete()

    def reset(self) -> int | None:
        deleted, _ = RateCounter.objects.all().delete()
        return deleted

    def check(self) -> bool:
        try:
            RateCounter.objects.exists()
        except DatabaseError:
            return False
        return True

    # --- sliding window counter -------------------------------------------------------------

    def acquire_sliding_window_entry(
        self, key: str, limit: int, expiry: int, amount: int = 1, now: float | None = None
    ) -> bool:
        """Take ``amount`` if the weighted count of the two windows leaves room, else nothing.

        The room check and the increment are one conditional UPDATE of the current window's
        row, so two processes can never both take the last units. Two statements in the common
        case (both windows read at once, then that UPDATE), since admission takes this for every
        attempt; the current window's row is created only by its first taking.
        """
        if amount > limit:
            return False
        now = self.clock() if now is None else now
        previous_key, current_key = self.sliding_window_keys(key, expiry, now)
        with transaction.atomic(savepoint=False):
            counts = self._live_counts([previous_key, current_key], now)
            if current_key not in counts:
                self._ensure_window_row(current_key, expires_at=self._window_end(expiry, now) + expiry, now=now)
            previous_count = counts.get(previous_key, 0)
            previous_weight = math.floor(previous_count * self._previous_ttl(previous_count, expiry, now) / expiry)
            room = limit - amount - previous_weight
            taken = sql.update(RateCounter, {"count": sql.Add(amount)}, key=current_key, count__lte=room)
        return taken == 1

    def get_sliding_window(self, key: str, expiry: int) -> SlidingWindow:
        """(previous count, previous TTL, current count, current TTL), as `limits` defines them.

        The previous window's TTL is the part of it that still overlaps the last ``expiry``
        seconds (its weight times ``expiry``); the current window's TTL is the time until it
        ends plus ``expiry``, the time during which it still counts at all.
        """
        now = self.clock()
        previous_key, current_key = self.sliding_window_keys(key, expiry, now)
        counts = self._live_counts([previous_key, current_key], now)
        previous_count = counts.get(previous_key, 0)
        current_ttl = self._window_end(expiry, now) - now + expiry
        return previous_count, self._previous_ttl(previous_count, expiry, now), counts.get(current_key, 0), current_ttl

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        previous_key, current_key = self.sliding_window_keys(key, expiry, self.clock())
        RateCounter.objects.filter(key__in=[previous_key, current_key]).delete()

    def adjust_window(self, key: str, window: int, delta: int) -> None:
        """Add ``delta`` (negative: give back) to the count of minute ``window`` of ``key``, never
        below zero; nothing when that window is gone."""
        RateCounter.objects.filter(key=f"{key}/{window}").update(count=Greatest(F("count") + delta, Value(0)))

    # --- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _live_counts(keys: list[str], now: float) -> dict[str, int]:
        return dict(sql.select(RateCounter, ("key", "count"), key__in=keys, expires_at__gt=now))

    def _ensure_window_row(self, key: str, *, expires_at: float, now: float) -> None:
        _, created = RateCounter.objects.get_or_create(key=key, defaults={"count": 0, "expires_at": expires_at})
        if created:
            RateCounter.objects.filter(expires_at__lte=now).delete()

    @staticmethod
    def _window_end(expiry: int, now: float) -> float:
        return (math.floor(now / expiry) + 1) * expiry

    def _previous_ttl(self, previous_count: int, expiry: int, now: float) -> float:
        return self._window_end(expiry, now) - now if previous_count else 0.0


# The aligned sliding window in Redis: the same rule as DatabaseStorage.acquire_sliding_window_entry,
# as one script (KEYS: previous window, current window; ARGV: limit, amount, the previous window's
# weight in thousandths, the current window's lifetime in ms).
_ACQUIRE_ALIGNED = """
local limit = tonumber(ARGV[1])
local amount = tonumber(ARGV[2])
local previous = tonumber(redis.call('get', KEYS[1]) or '0')
local current = tonumber(redis.call('get', KEYS[2]) or '0')
if math.floor(previous * tonumber(ARGV[3]) / 1000) + current + amount > limit then
    return 0
end
redis.call('incrby', KEYS[2], amount)
redis.call('pexpire', KEYS[2], tonumber(ARGV[4]))
return 1
"""
_ADJUST_ALIGNED = """
local current = redis.call('get', KEYS[1])
if not current then
    return 0
end
local value = tonumber(current) + tonumber(ARGV[1])
if value < 0 then
    value = 0
end
redis.call('set', KEYS[1], value, 'KEEPTTL')
return 1
"""


class AlignedRedisStorage(RedisStorage, TimestampedSlidingWindow):
    """`limits`' Redis storage whose sliding-window counter has minute windows aligned on the
    clock (``<key>/<window number>``), like :class:`DatabaseStorage`.

    `limits`' own Redis script starts a key's window at its first taking and shifts it relative to
    that, which admits a burst earlier than the database's rule (docs/benchmarks.md measured it)
    and leaves no way to tell later which window an amount was taken from. Aligned windows make
    both storages admit by one rule and let :func:`correct` find the window to adjust.
    """

    STORAGE_SCHEME = ["glassbox+redis"]

    def __init__(self, uri: str, **options) -> None:
        super().__init__(uri, **options)
        self.clock = time.time
        connection = self.client
        self._acquire = connection.register_script(_ACQUIRE_ALIGNED)
        self._adjust = connection.register_script(_ADJUST_ALIGNED)

    def acquire_sliding_window_entry(
        self, key: str, limit: int, expiry: int, amount: int = 1, now: float | None = None
    ) -> bool:
        if amount > limit:
            return False
        now = self.clock() if now is None else now
        previous_key, current_key = self.sliding_window_keys(key, expiry, now)
        window_end = (math.floor(now / expiry) + 1) * expiry
        weight = round(1000 * (window_end - now) / expiry)
        lifetime_ms = math.ceil((window_end - now + expiry) * 1000)
        keys = [self.prefixed_key(previous_key), self.prefixed_key(current_key)]
        return bool(self._acquire(keys, [limit, amount, weight, lifetime_ms]))

    def get_sliding_window(self, key: str, expiry: int) -> SlidingWindow:
        now = self.clock()
        previous_key, current_key = self.sliding_window_keys(key, expiry, now)
        previous, current = self.client.mget([self.prefixed_key(previous_key), self.prefixed_key(current_key)])
        previous_count, current_count = int(previous or 0), int(current or 0)
        window_end = (math.floor(now / expiry) + 1) * expiry
        previous_ttl = window_end - now if previous_count else 0.0
        return previous_count, previous_ttl, current_count, window_end - now + expiry

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        previous_key, current_key = self.sliding_window_keys(key, expiry, self.clock())
        self.client.delete(self.prefixed_key(previous_key), self.prefixed_key(current_key))

    def adjust_window(self, key: str, window: int, delta: int) -> None:
        self._adjust([self.prefixed_key(f"{key}/{window}")], [delta])

    @property
    def client(self) -> Any:
        """The redis-py client (`limits` types it as a narrower protocol)."""
        return self.get_connection()


class _PerMinuteBudget(RateLimitItemPerMinute):
    """A per-minute limit whose storage key is the caller's key alone.

    `limits` puts the limit's amount into its keys by default. Ours must not carry it, so that
    ``reset(key)`` works without knowing the budget and an edited limit (a ProviderLimit
    changed in the admin) keeps counting the traffic already taken this minute.
    """

    def key_for(self, *identifiers: bytes | str | int | float) -> str:
        return "/".join(str(identifier) for identifier in identifiers)


def get_storage() -> Storage:
    """The storage chosen by the settings (built once per configuration)."""
    return _build_storage(settings.GLASSBOX_RATE_LIMIT_STORAGE, settings.REDIS_URL, settings.REDIS_PREFIX)


@functools.cache
def _build_storage(kind: str, redis_url: str, redis_prefix: str) -> Storage:
    if kind == "database":
        return DatabaseStorage()
    if kind == "redis":
        if not redis_url:
            raise ImproperlyConfigured("GLASSBOX_RATE_LIMIT_STORAGE is 'redis' but REDIS_URL is not set.")
        return AlignedRedisStorage(redis_url, key_prefix=f"{redis_prefix}:ratelimit")
    raise ImproperlyConfigured(f"GLASSBOX_RATE_LIMIT_STORAGE must be 'database' or 'redis', not {kind!r}.")


def _limiter() -> SlidingWindowCounterRateLimiter:
    return SlidingWindowCounterRateLimiter(get_storage())


def _check_key(key: str) -> None:
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"A rate-limit key must have 1 to {MAX_KEY_LENGTH} characters, got {len(key)}.")


def _check_budget(per_minute: int) -> None:
    if per_minute < 1:
        raise ValueError(f"A per-minute budget must be at least 1, got {per_minute}.")


def seconds_until_free(window: SlidingWindow, limit: int, amount: int, expiry: int = WINDOW_S) -> float:
    """Seconds until ``amount`` units fit in the sliding window described by ``window``.

    ``window`` is what a storage's ``get_sliding_window`` returns; ``amount`` must not exceed
    ``limit``. The storages admit when ``floor(previous × weight) + current + amount <= limit``,
    where the previous window's weight decays linearly to nothing when the current window
    ends. If the current window alone leaves room, we wait for the previous window's weight
    to decay far enough; if not, for the current window to end and then for its own weight,
    now as the previous window, to decay far enough. A hair is added so that a caller who
    waits exactly this long finds the budget free.
    """
    previous_count, previous_ttl, current_count, current_ttl = window
    room_beside_current = limit - amount - current_count
    if room_beside_current >= 0:
        if previous_count <= 0:
            return 0.0
        wait = previous_ttl - (room_beside_current + 1) * expiry / previous_count
        return wait + _HAIR_S if wait >= 0 else 0.0
    until_window_ends = max(0.0, current_ttl - expiry)
    return until_window_ends + expiry * (1 - (limit - amount + 1) / current_count) + _HAIR_S


def _sliding_windows(limiter) -> SlidingWindowCounterSupport:
    """The limiter's storage, which keeps sliding windows (both storages we configure do)."""
    return cast(SlidingWindowCounterSupport, limiter.storage)


@dataclass(frozen=True)
class Reservation:
    """What :func:`reserve` did: ``wait_s`` 0.0 when it took the units (from minute ``window``),
    otherwise the seconds until enough of the budget is free (nothing taken)."""

    wait_s: float
    window: int | None = None
    taken: int = 0

    @property
    def granted(self) -> bool:
        return self.wait_s == 0.0


def reserve(key: str, amount: int, per_minute: int, *, at: float | None = None) -> Reservation:
    """Take ``amount`` units from the per-minute budget ``key`` if they fit (see :func:`acquire`),
    saying which minute window they were taken from, for :func:`correct`. ``at``: the moment of the
    taking (default now), so that several budgets taken together fall in one window."""
    _check_key(key)
    _check_budget(per_minute)
    if amount < 0:
        raise ValueError(f"Cannot acquire a negative amount ({amount}).")
    if amount == 0:
        return Reservation(0.0)
    charged = min(amount, per_minute)
    item = _PerMinuteBudget(per_minute)
    storage = cast(DatabaseStorage | AlignedRedisStorage, get_storage())
    now = storage.clock() if at is None else at
    if storage.acquire_sliding_window_entry(item.key_for(key), item.amount, item.get_expiry(), charged, now=now):
        return Reservation(0.0, window=int(now // item.get_expiry()), taken=charged)
    window = _sliding_windows(_limiter()).get_sliding_window(key, item.get_expiry())
    return Reservation(max(MIN_WAIT_S, seconds_until_free(window, per_minute, charged, item.get_expiry())))


def acquire(key: str, amount: int, per_minute: int) -> float:
    """Take ``amount`` units from the per-minute budget ``key`` if they fit.

    Returns 0.0 when taken; otherwise takes nothing and returns the seconds until enough of
    the budget is free (then call again: someone else may have taken it meanwhile).

    An ``amount`` above ``per_minute`` could never fit, so it is charged as the whole budget:
    it waits until the budget is entirely unused (up to two minutes after the last taking on
    the key, since the sliding window remembers the previous minute) and then takes all of
    it, which keeps everyone else out for about a minute. It cannot deadlock, but steady
    traffic on the key can keep it waiting: size requests within the budget.
    """
    return reserve(key, amount, per_minute).wait_s


def correct(key: str, window: int, delta: int) -> None:
    """Add ``delta`` units to what minute ``window`` of budget ``key`` holds (negative: give back
    what a request reserved and did not use). Never below zero; nothing once the window is gone,
    since it no longer counts."""
    _check_key(key)
    if delta:
        cast(DatabaseStorage | AlignedRedisStorage, get_storage()).adjust_window(key, window, delta)


def peek(key: str, per_minute: int) -> tuple[int, float]:
    """(units remaining now, seconds until the whole budget is free again), taking nothing."""
    _check_key(key)
    _check_budget(per_minute)
    item = _PerMinuteBudget(per_minute)
    limiter = _limiter()
    remaining = limiter.get_window_stats(item, key).remaining
    window = _sliding_windows(limiter).get_sliding_window(key, item.get_expiry())
    return remaining, seconds_until_free(window, per_minute, per_minute, item.get_expiry())


def reset(key: str) -> None:
    """Forget everything taken from the budget ``key``."""
    _check_key(key)
    _limiter().clear(_PerMinuteBudget(1), key)
