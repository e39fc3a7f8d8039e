"""`python manage.py fake_anthropic [--port 8765]`: a local fake Messages API for offline demos.

Point Glassbox (or any Anthropic SDK client) at it:

    ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=any-value python manage.py serve

It answers every request with deterministic text (streamed a few words at a time, with
`--chunk-delay` seconds between deltas so the live view has something to show), forced tool
calls with the smallest input their schema accepts, calls of offered tools (`--tool-calls-per-turn`
of them, then a text once their results come back), and rate-limit headers like the real API.
Scripted answers (errors, 429s, slow or broken streams) are queued with `POST /_fake/replies`;
see orchestrator/providers/fake_anthropic/replies.py. Ctrl-C stops it.
"""

from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand, CommandError

from orchestrator.management.console import positive_int
from orchestrator.providers.fake_anthropic import FakeAnthropicServer, RateLimits


def port_number(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {port}")
    return port


def non_negative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {number}")
    return number


class Command(BaseCommand):
    help = "Run a local fake of the Anthropic Messages API (for tests and offline demos) until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="Address to listen on (default 127.0.0.1).")
        parser.add_argument("--port", type=port_number, default=8765, help="Port (default 8765; 0 picks a free one).")
        parser.add_argument(
            "--chunk-delay",
            type=non_negative,
            default=0.05,
            help="Seconds between two streamed deltas of an unscripted answer (default 0.05).",
        )
        parser.add_argument(
            "--tool-calls-per-turn",
            type=int,
            default=1,
            help="Tool calls in an unscripted answer to a request that offers tools (default 1; 0: none).",
        )
        parser.add_argument("--requests-per-minute", type=positive_int, default=RateLimits.requests_per_minute)
        parser.add_argument("--input-tokens-per-minute", type=positive_int, default=RateLimits.input_tokens_per_minute)
        parser.add_argument(
            "--output-tokens-per-minute", type=positive_int, default=RateLimits.output_tokens_per_minute
        )
        parser.add_argument(
            "--enforce-limits",
            action="store_true",
            help="Answer 429 with retry-after when a per-minute budget is used up (default: only report it).",
        )

    def handle(
        self,
        *args,
        host,
        port,
        chunk_delay,
        tool_calls_per_turn,
        requests_per_minute,
        input_tokens_per_minute,
        output_tokens_per_minute,
        enforce_limits,
        **options,
    ):
        limits = RateLimits(requests_per_minute, input_tokens_per_minute, output_tokens_per_minute)
        try:
            server = FakeAnthropicServer(
                host,
                port,
                limits=limits,
                enforce_limits=enforce_limits,
                chunk_delay_s=chunk_delay,
                tool_calls_per_turn=max(0, tool_calls_per_turn),
            )
        except OSError as error:
            raise CommandError(f"Cannot listen on {host}:{port}: {error.strerror or error}") from None
        self.stdout.write(f"Fake Anthropic Messages API on {server.url}")
        self.stdout.write(f"Use it with: ANTHROPIC_BASE_URL={server.url} ANTHROPIC_API_KEY=any-value")
        self.stdout.write(
            f"Limits per minute: {limits.requests_per_minute} requests, {limits.input_tokens_per_minute} input tokens, "
            f"{limits.output_tokens_per_minute} output tokens ({'enforced' if enforce_limits else 'reported only'}). "
            "Ctrl-C stops it."
        )
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            self.stdout.write("Stopped.")
