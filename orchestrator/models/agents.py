"""The agent registry: who an agent is, which provider and model it uses, its limits (Agent); and
the limits and prices shared by every agent of one provider and model (ProviderLimit)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone


class Agent(models.Model):
    """A registry entry: who an agent is, which provider and model it uses, its limits."""

    class Status(models.TextChoices):
        DRAFT = "draft"
        ACTIVE = "active"
        RETIRED = "retired"

    class Provider(models.TextChoices):
        SIMULATED = "simulated"
        ANTHROPIC = "anthropic"

    name = models.SlugField(max_length=64, unique=True)
    role = models.CharField(max_length=200, blank=True)
    capabilities = models.JSONField(default=list, blank=True)
    provider = models.CharField(max_length=20, choices=Provider.choices, default=Provider.SIMULATED)
    model = models.CharField(max_length=100, default="sim-1")
    system_prompt = models.TextField(blank=True)
    max_concurrency = models.PositiveIntegerField(default=2, validators=[MinValueValidator(1)])
    timeout_s = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(settings.GLASSBOX_MAX_TASK_TIMEOUT_S)]
    )
    max_retries = models.PositiveIntegerField(default=3, validators=[MaxValueValidator(20)])
    max_output_tokens = models.PositiveIntegerField(default=1024, validators=[MinValueValidator(1)])
    # Model calls one attempt may make when the agent uses tools (each answer to tool results is
    # one more call); the agent loop stops there (orchestrator/engine/agent_loop.py).
    max_steps = models.PositiveIntegerField(
        default=8, validators=[MinValueValidator(1), MaxValueValidator(100)], help_text="Model calls per attempt"
    )
    # Provider-specific knobs, e.g. for the simulated provider:
    # {"latency": {"dist": "lognormal", "median_s": 1.0, "sigma": 0.5}, "failure_rate": 0.0, "seed": 7}
    provider_options = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_schedulable(self) -> bool:
        return self.status == self.Status.ACTIVE


class ProviderLimit(models.Model):
    """Limits and prices shared by every agent that uses one provider and model."""

    # Admission reads an empty limit and 0 alike as "no limit", so 0 is refused: a person who
    # writes 0 output tokens per minute means none, and would get no cap at all.
    NO_ZERO_LIMIT = "Enter 1 or more, or leave it blank for no limit (0 would mean no limit too)."
    NEGATIVE_PRICE = "A price cannot be negative: enter 0 or more."
    LIMIT_VALIDATORS = [MinValueValidator(1, message=NO_ZERO_LIMIT)]
    PRICE_VALIDATORS = [MinValueValidator(Decimal("0"), message=NEGATIVE_PRICE)]
    CONFIGURED_LIMITS = ("requests_per_minute", "input_tokens_per_minute", "output_tokens_per_minute", "max_in_flight")

    provider = models.CharField(max_length=20, choices=Agent.Provider.choices)
    model = models.CharField(max_length=100)
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True, validators=LIMIT_VALIDATORS)
    input_tokens_per_minute = models.PositiveIntegerField(null=True, blank=True, validators=LIMIT_VALIDATORS)
    output_tokens_per_minute = models.PositiveIntegerField(null=True, blank=True, validators=LIMIT_VALIDATORS)
    max_in_flight = models.PositiveIntegerField(null=True, blank=True, validators=LIMIT_VALIDATORS)
    # Adaptive concurrency: the in-flight cap in force now (None = max_in_flight, or no cap).
    effective_in_flight = models.PositiveIntegerField(null=True, blank=True)
    # Successes since the effective cap last changed: it grows by one per window of successes.
    successes_since_change = models.PositiveIntegerField(default=0)
    input_price_per_mtok = models.DecimalField(
        max_digits=10, decimal_places=4, default=Decimal("0"), validators=PRICE_VALIDATORS
    )
    output_price_per_mtok = models.DecimalField(
        max_digits=10, decimal_places=4, default=Decimal("0"), validators=PRICE_VALIDATORS
    )
    # A 429/529 backs off the whole provider until this moment.
    backoff_until = models.DateTimeField(null=True, blank=True)
    # With no requests_per_minute configured or reported: how many requests the provider accepted
    # in the minute before its last 429, and when that was (engine/adaptive.py learn_request_rate).
    learned_requests_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Learned from the provider's 429s while requests per minute is empty: admission keeps to it, "
        "plus one per minute since it was learned. Setting requests per minute overrides it.",
    )
    learned_at = models.DateTimeField(null=True, blank=True, help_text="When the request rate was last learned.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "model"], name="unique_provider_model")]
        ordering = ["provider", "model"]

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"

    # A learned request rate grows by one per minute without a 429: it probes upwards, as a limit
    # learned low (another client's burst, a token limit's refusal) must not hold for ever.
    LEARNED_RATE_GROWTH_PER_MINUTE = 1

    def per_minute(self, field: str, now: datetime | None = None) -> int | None:
        """The per-minute budget admission keeps to for `field` (requests_per_minute,
        input_tokens_per_minute, output_tokens_per_minute): the value configured or reported by
        the provider; for requests, failing both, the rate learned from the provider's 429s."""
        if field != "requests_per_minute" or not self.rate_is_learned:
            return getattr(self, field)
        assert self.learned_requests_per_minute is not None  # rate_is_learned
        minutes = 0
        if self.learned_at is not None:
            elapsed = ((now or timezone.now()) - self.learned_at).total_seconds()
            minutes = max(0, int(elapsed // 60))
        return self.learned_requests_per_minute + minutes * self.LEARNED_RATE_GROWTH_PER_MINUTE

    @property
    def rate_is_learned(self) -> bool:
        """Admission keeps to a request rate learned from 429s (none configured or reported)."""
        return not self.requests_per_minute and bool(self.learned_requests_per_minute)

    # Both prices at 0 is the default a row is made with (a limit set for its rates alone, a model
    # seed_demo has no list price for): nothing tells it apart from a price of 0 set on purpose,
    # so it counts as no price, and a run on it says its cost leaves the model's tokens out.
    UNPRICED_HELP = (
        "USD per million tokens. With both prices at 0 (the default) the model counts as unpriced: "
        "its runs say their cost leaves its tokens out, and the budget cannot stop its calls."
    )

    @property
    def is_priced(self) -> bool:
        """Someone set a price: either price above 0 (both at 0 is the default, not a price)."""
        return bool(self.input_price_per_mtok or self.output_price_per_mtok)

    # Anthropic bills prompt-cache reads at 0.1× and (5-minute) cache writes at 1.25× the base
    # input price (https://docs.anthropic.com/en/docs/about-claude/pricing); both are reported
    # apart from `input_tokens` in the API's usage.
    CACHE_READ_PRICE_FACTOR = Decimal("0.1")
    CACHE_WRITE_PRICE_FACTOR = Decimal("1.25")

    def cost(
        self, input_tokens: int, output_tokens: int, *, cache_read_tokens: int = 0, cache_creation_tokens: int = 0
    ) -> Decimal:
        cached_input = (
            Decimal(cache_read_tokens) * self.CACHE_READ_PRICE_FACTOR
            + Decimal(cache_creation_tokens) * self.CACHE_WRITE_PRICE_FACTOR
        )
        return (
            (Decimal(input_tokens) + cached_input) * self.input_price_per_mtok
            + Decimal(output_tokens) * self.output_price_per_mtok
        ) / Decimal(1_000_000)
