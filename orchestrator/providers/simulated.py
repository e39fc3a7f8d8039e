"""The simulated provider: the default, needs no API key, behaves like a real model API.

Everything random is drawn from ``random.Random`` instances seeded with a SHA-256 of the
request's identity (Python's ``hash()`` is salted per process, so it would not reproduce):

* the text depends on (seed, prompt) only, so a retry writes the same text;
* latency, failures and overload depend also on the attempt number, so a run is
  reproducible but a retry draws anew.

Token counting is approximate and documented: an output token is a whitespace-separated
word of the Markdown produced; an input token is four characters of system prompt and prompt.

Knobs (``Agent.provider_options``)::

    {"latency": {"dist": "fixed", "seconds": 1.0}
               | {"dist": "uniform", "low_s": 0.5, "high_s": 1.5}
               | {"dist": "lognormal", "median_s": 1.0, "sigma": 0.5},   # default 1.0 / 0.4
     "failure_rate": 0.1,        # chance that an attempt fails part-way (retryable)
     "overloaded_rate": 0.05,    # chance that an attempt is refused with a 529
     "hang": true,               # never finishes: keeps yielding empty ticks
     "server_limit": {"requests_per_minute": 50, "tokens_per_minute": 40000}}

Tools (DESIGN §10): offered tools whose names the prompt mentions ("use the calculate tool")
are called in the first turn, in the order mentioned, with arguments derived from each tool's
schema and the request's seed (``orchestrator.tools.arguments``: a schema's ``examples`` are
used), so that demos and tests make real MCP round trips with no key. Once the tool results
are back, the answer is the usual text. No tool mentioned: no call.

The server limit answers like the real API: a 429 with a Retry-After before any output. Its
budget belongs to the model, shared by every agent on it and every worker process (it lives
in :mod:`orchestrator.ratelimit`). A request refused for tokens still counts as a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from orchestrator import db_threads, ratelimit
from orchestrator.providers.base import (
    AgentRequest,
    Completed,
    Overloaded,
    Provider,
    ProviderError,
    RateLimited,
    StreamItem,
    TextDelta,
    ToolUse,
    Usage,
    UsageSoFar,
)
from orchestrator.tools.arguments import example_arguments

# The answer streams in slices of about this long (a few updates a second, as a viewer sees them).
SLICE_S = 0.25
# Natural output length in words (≈ tokens), before max_tokens caps it.
MIN_WORDS, MAX_WORDS = 150, 400
TOPIC_WORDS = 6
CHARS_PER_INPUT_TOKEN = 4
DEFAULT_LATENCY: dict[str, Any] = {"dist": "lognormal", "median_s": 1.0, "sigma": 0.4}
_WORD = re.compile(r"\S+\s*")
_MARKDOWN_SPECIALS = re.compile(r"[#*_`\[\]<>|\\]")


def _clock() -> float:
    return asyncio.get_running_loop().time()


# asyncio wakes a sleeper up to this late: its wait on epoll is in whole milliseconds, rounded up.
TIMER_SLACK_S = 0.001


async def _sleep_until(deadline: float, *, on_time: bool = False) -> None:
    """Sleep until `deadline` on the running loop's clock (`_clock`).

    `on_time`: end within microseconds of it, not up to a millisecond after (`TIMER_SLACK_S`), by
    sleeping to a millisecond before it and giving the loop its turns until it comes. For a call's
    end, as a server's answer arrives when it is sent: ~0.5 ms a call on a chain's critical path,
    which the benchmark's Prefect peer (`time.sleep`) does not pay."""
    if not on_time:
        await asyncio.sleep(max(0.0, deadline - _clock()))
        return
    await asyncio.sleep(max(0.0, deadline - _clock() - TIMER_SLACK_S))
    while _clock() < deadline:
        await asyncio.sleep(0)


def seeded_random(*parts: object) -> random.Random:
    """A generator that gives the same draws for the same ``parts`` in every process."""
    digest = hashlib.sha256("\x1f".join(str(part) for part in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def estimate_input_tokens(request: AgentRequest) -> int:
    """The input tokens of a call, as a server counts them: the system prompt, the whole
    conversation (an agent's later calls send its earlier turns and tool results again) and the
    tools offered."""
    chars = len(request.system_prompt)
    chars += (
        sum(_content_chars(m.get("content")) for m in request.messages) if request.messages else len(request.prompt)
    )
    chars += sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) for t in request.tools)
    return chars // CHARS_PER_INPUT_TOKEN


def _content_chars(content: Any) -> int:
    """The characters of a message's content: its text, or its blocks' texts, tool inputs and results."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(_content_chars(block) for block in content)
    if isinstance(content, dict):
        if "text" in content:
            return _content_chars(content["text"])
        if "input" in content:
            return len(json.dumps(content["input"], default=str))
        return _content_chars(content.get("content"))
    return 0


INVALID_PREFIX = "Invalid simulated provider options: "


def _invalid(message: str) -> ProviderError:
    """A configuration error: retrying the same request cannot help."""
    return ProviderError(f"{INVALID_PREFIX}{message}", retryable=False)


def _number(spec: dict[str, Any], name: str, default: float, *, minimum: float = 0.0) -> float:
    value = spec.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < minimum:
        raise _invalid(f"{name} must be a number >= {minimum}, got {value!r}.")
    return float(value)


def _rate(options: dict[str, Any], name: str) -> float:
    value = _number(options, name, 0.0)
    if value > 1:
        raise _invalid(f"{name} must be between 0 and 1, got {value!r}.")
    return value


def _optional_budget(spec: dict[str, Any], name: str) -> int | None:
    value = spec.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid(f"server_limit.{name} must be a whole number >= 1, got {value!r}.")
    return value


@dataclass(frozen=True)
class LatencyModel:
    """How long one attempt takes, as a distribution."""

    dist: str
    seconds: float = 0.0
    low_s: float = 0.0
    high_s: float = 0.0
    median_s: float = 1.0
    sigma: float = 0.4

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> LatencyModel:
        spec = options.get("latency") or DEFAULT_LATENCY
        if not isinstance(spec, dict):
            raise _invalid(f"latency must be an object, got {spec!r}.")
        dist = spec.get("dist", "lognormal")
        if dist == "fixed":
            return cls(dist, seconds=_number(spec, "seconds", 1.0))
        if dist == "uniform":
            low_s, high_s = _number(spec, "low_s", 0.5), _number(spec, "high_s", 1.5)
            if high_s < low_s:
                raise _invalid(f"latency high_s ({high_s}) is below low_s ({low_s}).")
            return cls(dist, low_s=low_s, high_s=high_s)
        if dist == "lognormal":
            return cls(
                dist,
                median_s=_number(spec, "median_s", DEFAULT_LATENCY["median_s"]),
                sigma=_number(spec, "sigma", DEFAULT_LATENCY["sigma"]),
            )
        raise _invalid(f"latency dist must be 'fixed', 'uniform' or 'lognormal', got {dist!r}.")

    def draw(self, rng: random.Random) -> float:
        if self.dist == "fixed":
            return self.seconds
        if self.dist == "uniform":
            return rng.uniform(self.low_s, self.high_s)
        if self.median_s == 0:
            return 0.0
        return rng.lognormvariate(math.log(self.median_s), self.sigma)

    def expected_s(self) -> float:
        """The mean: sums of estimates (critical path, total work) then come out unbiased."""
        if self.dist == "fixed":
            return self.seconds
        if self.dist == "uniform":
            return (self.low_s + self.high_s) / 2
        return self.median_s * math.exp(self.sigma**2 / 2)


@dataclass(frozen=True)
class SimulationOptions:
    latency: LatencyModel
    failure_rate: float
    overloaded_rate: float
    hang: bool
    requests_per_minute: int | None
    tokens_per_minute: int | None

    @classmethod
    def parse(cls, options: dict[str, Any]) -> SimulationOptions:
        server_limit = options.get("server_limit") or {}
        if not isinstance(server_limit, dict):
            raise _invalid(f"server_limit must be an object, got {server_limit!r}.")
        return cls(
            latency=LatencyModel.from_options(options),
            failure_rate=_rate(options, "failure_rate"),
            overloaded_rate=_rate(options, "overloaded_rate"),
            hang=bool(options.get("hang", False)),
            requests_per_minute=_optional_budget(server_limit, "requests_per_minute"),
            tokens_per_minute=_optional_budget(server_limit, "tokens_per_minute"),
        )


# The options SimulationOptions.parse reads; any other key would be ignored silently (a typo).
KNOWN_OPTIONS = ("latency", "failure_rate", "overloaded_rate", "hang", "server_limit")
# Keys other code reads from a simulated agent's options, accepted as they are: "bench" holds the
# per-node durations of the benchmark's instrumentation (bench/hooks.py).
EXTENSION_OPTIONS = ("bench",)


def option_problems(options: Any) -> list[str]:
    """Every problem of a simulated agent's ``provider_options``, in words ([] when they are valid).

    A pure entry point for the places where options are entered (admin, CLI, API) and for plan
    validation, so that bad options are refused there rather than failing the run. The rules are
    ``SimulationOptions.parse``'s own, applied to each option apart so that every problem is named
    at once; beyond them, an unknown key is named (parse would ignore it) and ``hang`` must be a
    boolean (parse would read "no" as true).
    """
    if not isinstance(options, dict):
        return [f"provider options must be an object (a JSON mapping), got {options!r}"]
    problems = [
        f"unknown option {key!r}: the simulated provider takes {', '.join(KNOWN_OPTIONS)}"
        for key in options
        if key not in KNOWN_OPTIONS and key not in EXTENSION_OPTIONS
    ]
    for key in KNOWN_OPTIONS:
        if key not in options:
            continue
        if key == "hang":
            if not isinstance(options[key], bool):
                problems.append(f"hang must be true or false, got {options[key]!r}")
            continue
        try:
            SimulationOptions.parse({key: options[key]})
        except ProviderError as error:
            problems.append(str(error).removeprefix(INVALID_PREFIX).rstrip("."))
    return problems


@dataclass(frozen=True)
class SimulatedOutput:
    """The words one request produces, each with the whitespace that follows it."""

    words: list[str]
    stop_reason: str

    @property
    def text(self) -> str:
        return "".join(self.words)


_SENTENCES = [
    "{agent} started with the {adj} {noun}, since the rest builds on it.",
    "The {noun} depends on a {adj} {noun2}, so it is worth the effort to {verb} it early.",
    "A simple plan is to {verb} the {noun} first and then {verb2} the {noun2}.",
    "Evidence so far suggests that the {noun} is {adj} rather than {adj2}.",
    "If the {noun} changes, the {noun2} has to be revisited as well.",
    "We recommend that the team {verb} each {noun} before the next step.",
    "The main open question is whether the {noun} stays {adj} over time.",
    "A quick estimate puts the {noun} at about {number} units, which looks {adj}.",
    "Nothing here blocks progress, but the {noun2} deserves a second look.",
    "In short, {verb} the {noun} and keep the {noun2} {adj}.",
]
_BULLETS = [
    "- **{Noun}**: {verb} it and record what you find.",
    "- **{Noun}**: {adj} for now; {verb} the {noun2} next.",
    "- **{Noun}**: about {number} units, {adj} rather than {adj2}.",
]
_NOUNS = [
    "constraint",
    "dependency",
    "risk",
    "assumption",
    "trade-off",
    "requirement",
    "milestone",
    "metric",
    "interface",
    "bottleneck",
    "estimate",
    "scenario",
    "budget",
    "deadline",
]
_ADJECTIVES = [
    "critical",
    "minor",
    "likely",
    "costly",
    "reversible",
    "measurable",
    "hidden",
    "obvious",
    "shared",
    "independent",
    "stable",
    "uncertain",
]
_VERBS = ["validate", "measure", "simplify", "document", "prototype", "review", "isolate", "test", "compare"]


def label_line(agent_name: str) -> str:
    """The first line of every simulated output: it is never mistaken for a model's."""
    return f"_[simulated output from {agent_name}]_"


def _topic(prompt: str) -> str:
    """The first words of the prompt's first line (its title), without Markdown syntax, "…" when cut."""
    first_line = next((line for line in prompt.splitlines() if line.strip()), "")
    all_words = first_line.split()
    words = [_MARKDOWN_SPECIALS.sub("", word) for word in all_words[:TOPIC_WORDS]]
    topic = " ".join(word for word in words if word) or "the task"
    return f"{topic} …" if len(all_words) > TOPIC_WORDS else topic


def _introduction(agent: str, topic: str) -> str:
    return f'{agent} worked on "{topic}" and reports the findings below.'


def _sentence(rng: random.Random, template: str, agent: str, topic: str) -> str:
    noun, noun2 = rng.sample(_NOUNS, 2)
    adj, adj2 = rng.sample(_ADJECTIVES, 2)
    verb, verb2 = rng.sample(_VERBS, 2)
    return template.format(
        agent=agent,
        topic=topic,
        noun=noun,
        noun2=noun2,
        Noun=noun.capitalize(),
        adj=adj,
        adj2=adj2,
        verb=verb,
        verb2=verb2,
        number=rng.randint(2, 97),
    )


def _paragraph(rng: random.Random, agent: str, topic: str) -> str:
    return " ".join(_sentence(rng, rng.choice(_SENTENCES), agent, topic) for _ in range(rng.randint(2, 4)))


def _bullets(rng: random.Random, agent: str, topic: str) -> str:
    return "\n".join(_sentence(rng, rng.choice(_BULLETS), agent, topic) for _ in range(rng.randint(3, 5)))


def compose_markdown(rng: random.Random, agent: str, prompt: str, min_words: int) -> str:
    """A few paragraphs and a list about the prompt, at least ``min_words`` words long."""
    topic = _topic(prompt)
    blocks = [
        label_line(agent),
        f"## {agent}: {topic}",
        f"{_introduction(agent, topic)} {_paragraph(rng, agent, topic)}",
    ]
    while sum(len(block.split()) for block in blocks) < min_words:
        blocks.append(_bullets(rng, agent, topic) if len(blocks) % 3 == 0 else _paragraph(rng, agent, topic))
    return "\n\n".join(blocks) + "\n"


def generate_output(request: AgentRequest) -> SimulatedOutput:
    """The output for ``request``: the same for the same (seed, prompt), whatever the attempt.

    Its natural length is drawn between MIN_WORDS and MAX_WORDS (ending on a whole block);
    longer than ``max_tokens`` it is cut there, with stop reason "max_tokens" as the real API
    would say. The label line is never cut, even under a ``max_tokens`` smaller than it.
    """
    rng = seeded_random("text", request.seed, request.prompt)
    natural_length = rng.randint(MIN_WORDS, MAX_WORDS)
    words = _WORD.findall(compose_markdown(rng, request.agent_name, request.prompt, natural_length))
    if len(words) <= request.max_tokens:
        return SimulatedOutput(words, "end_turn")
    kept = max(request.max_tokens, len(label_line(request.agent_name).split()))
    return SimulatedOutput(words[:kept], "max_tokens")


def planned_tool_calls(request: AgentRequest) -> list[ToolUse]:
    """The tool calls of the first turn: the offered tools the prompt names, in the order named,
    with arguments from their schemas (none once tool results came back)."""
    if not request.tools or any(_has_tool_results(message) for message in request.messages):
        return []
    text = f"{request.system_prompt}\n{request.prompt}".lower()
    named = sorted(
        (position, tool.name, tool) for tool in request.tools if (position := _mention(text, tool.name.lower())) >= 0
    )
    return [
        ToolUse(
            id=f"toolu_sim_{request.attempt}_{index}",
            name=tool.name,
            input=example_arguments(tool.input_schema, f"{request.seed}:{request.attempt}:{tool.name}"),
        )
        for index, (_, _, tool) in enumerate(named)
    ]


def _mention(text: str, name: str) -> int:
    """Where ``name`` first stands as a word of ``text`` (-1: nowhere)."""
    found = re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text)
    return found.start() if found else -1


def _has_tool_results(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def _attempt_random(request: AgentRequest, purpose: str) -> random.Random:
    return seeded_random(purpose, request.seed, request.agent_name, request.prompt, request.attempt)


class SimulatedProvider(Provider):
    name = "simulated"

    async def stream(self, request: AgentRequest) -> AsyncGenerator[StreamItem, None]:
        # The call's latency runs from the request, as a server's does: the limit check and making
        # the text happen within it, not before it starts (see the first slice below).
        began = _clock()
        options = SimulationOptions.parse(request.options)
        if options.requests_per_minute or options.tokens_per_minute:
            await db_threads.run(self._enforce_server_limit, request, options)
        self._maybe_overloaded(request, options)
        input_tokens = estimate_input_tokens(request)
        yield UsageSoFar(Usage(input_tokens=input_tokens))  # as the Messages API's message_start
        if options.hang:
            while True:  # never answers: the caller's deadline or a cancellation ends it
                await asyncio.sleep(3600)
        calls = planned_tool_calls(request)
        if calls:
            async with contextlib.aclosing(self._call_tools(request, calls, input_tokens)) as items:
                async for item in items:
                    yield item
            return
        duration_s = self.draw_latency_s(request)
        slices = max(1, math.ceil(duration_s / SLICE_S))
        failing_slice = self._failing_slice(request, options, slices)
        # Made within the latency, as a server makes its answer while the caller waits: after one
        # turn of the loop (sleep(0)), so the calls of a wave that start together all start before
        # any of them makes its text, and the text costs a call nothing after its latency (made at
        # the first slice, it added ~0.5 ms to every call, on a chain's critical path).
        await asyncio.sleep(0)
        output = generate_output(request)
        total = len(output.words)
        for index in range(slices):
            if index == failing_slice:
                written = index * total // slices
                raise ProviderError(
                    f"simulated failure after {written} output tokens (failure_rate={options.failure_rate})",
                    retryable=True,
                )
            # On the answer's own clock, as a server streams: the time the caller takes with one
            # slice does not delay the next, so the call takes its drawn latency (sleeping a slice
            # after each added the caller's work: ~3 ms a call on a loaded worker).
            await _sleep_until(began + duration_s * (index + 1) / slices, on_time=index == slices - 1)
            start, end = index * total // slices, (index + 1) * total // slices
            yield TextDelta(text="".join(output.words[start:end]), output_tokens=end)
        usage = Usage(input_tokens=input_tokens, output_tokens=total)
        yield UsageSoFar(usage)
        yield Completed(
            usage=usage,
            stop_reason=output.stop_reason,
            simulated=True,
            content=[{"type": "text", "text": output.text}],
        )

    async def _call_tools(
        self, request: AgentRequest, calls: list[ToolUse], input_tokens: int
    ) -> AsyncGenerator[StreamItem, None]:
        """A turn that asks for tools: a sentence, then the calls."""
        text = f"I will use {', '.join(call.name for call in calls)}."
        await asyncio.sleep(min(self.draw_latency_s(request), SLICE_S))
        words = len(text.split()) + sum(len(str(call.input).split()) for call in calls)
        yield TextDelta(text=text, output_tokens=words)
        for call in calls:
            yield ToolUse(id=call.id, name=call.name, input=call.input)
        usage = Usage(input_tokens=input_tokens, output_tokens=words)
        yield UsageSoFar(usage)
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in calls]
        yield Completed(usage=usage, stop_reason="tool_use", simulated=True, content=content)

    def estimate_duration_s(self, agent: Any, output_tokens: int) -> float:
        """The expected latency of ``agent``'s distribution.

        A simulated attempt's duration is drawn as a whole, independent of its length, so
        ``output_tokens`` does not change the estimate.
        """
        return LatencyModel.from_options(agent.provider_options or {}).expected_s()

    def draw_latency_s(self, request: AgentRequest) -> float:
        """This attempt's duration: reproducible for (seed, attempt), different for a retry."""
        latency = LatencyModel.from_options(request.options)
        return latency.draw(_attempt_random(request, "latency"))

    def _enforce_server_limit(self, request: AgentRequest, options: SimulationOptions) -> None:
        budgets = [
            ("rpm", "requests", 1, options.requests_per_minute),
            ("tpm", "tokens", estimate_input_tokens(request) + request.max_tokens, options.tokens_per_minute),
        ]
        for suffix, unit, amount, per_minute in budgets:
            if per_minute is None:
                continue
            wait_s = ratelimit.acquire(f"sim-server:{request.model}:{suffix}", amount, per_minute)
            if wait_s > 0:
                retry_after_s = max(1, math.ceil(wait_s))
                raise RateLimited(
                    f"429 rate_limit_error: this request would exceed the simulated limit of "
                    f"{per_minute} {unit} per minute for model {request.model}; "
                    f"retry after {retry_after_s} s",
                    retry_after_s=retry_after_s,
                    status_code=429,
                )

    def _maybe_overloaded(self, request: AgentRequest, options: SimulationOptions) -> None:
        if _attempt_random(request, "overloaded").random() < options.overloaded_rate:
            raise Overloaded(
                "529 overloaded_error: the simulated provider is overloaded", retry_after_s=1, status_code=529
            )

    def _failing_slice(self, request: AgentRequest, options: SimulationOptions, slices: int) -> int | None:
        """The slice at which this attempt fails, part-way through, or None if it succeeds."""
        rng = _attempt_random(request, "failure")
        if rng.random() >= options.failure_rate:
            return None
        if slices == 1:
            return 0
        return min(slices - 1, max(1, math.floor(slices * rng.uniform(0.2, 0.8))))
