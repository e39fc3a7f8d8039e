"""The shared rate limiter's counters, when it keeps them in the database (orchestrator/ratelimit.py)."""

from __future__ import annotations

from django.db import models


class RateCounter(models.Model):
    """A counter of the shared rate limiter when it lives in the database (embedded default)."""

    key = models.CharField(max_length=255, unique=True)
    count = models.BigIntegerField(default=0)
    expires_at = models.FloatField(help_text="Unix time at which the window resets")

    def __str__(self) -> str:
        return self.key
