"""Context passing, honestly bounded: summaries counted as the receiving provider counts tokens,
`inputs: summaries | full` per subtask, and estimates that count what a subtask receives."""

from __future__ import annotations

import logging
import math
from decimal import Decimal

import pytest

from orchestrator.engine import context, runs
from orchestrator.models import Subtask, TaskRun
from orchestrator.providers import token_counting
from orchestrator.providers.fake_anthropic import CHARS_PER_INPUT_TOKEN
from orchestrator.providers.token_counting import AnthropicCounter, WordCounter

# 191 words that the word count lets through whole, and Claude's count does not (issue 12).
LONG_WORDS = " ".join(["interoperability"] * 60 + ["configuration"] * 60 + ["a"] * 71)


def fake_count(text: str) -> int:
    """The fake Messages API's count of a user message: four characters a token."""
    return math.ceil(len(text) / CHARS_PER_INPUT_TOKEN)


@pytest.fixture(autouse=True)
def fresh_counts():
    token_counting._cached_count.cache_clear()
    yield
    token_counting._cached_count.cache_clear()


def test_by_words_191_words_pass_whole():
    assert len(LONG_WORDS.split()) == 191
    assert context.summarize(LONG_WORDS) == LONG_WORDS


def test_counted_as_the_provider_counts_the_summary_fits_its_bound_marker_included():
    summary = context.summarize(LONG_WORDS, 200, count=fake_count)
    assert summary.endswith(" …") and fake_count(summary) <= 200
    longer = LONG_WORDS.split()[: len(summary.split())]  # one word more would not fit
    assert fake_count(" ".join(longer) + " …") > 200


def test_a_text_within_the_bound_is_kept_whole_and_a_cut_prefers_a_sentence_end():
    assert context.summarize("Short text. Two sentences.", 200, count=fake_count) == "Short text. Two sentences."
    text = " ".join(f"Sentence number {i} is here." for i in range(100))
    summary = context.summarize(text, 50, count=WordCounter().count)
    assert summary.endswith(". …") and len(summary.split()) <= 50


def test_claudes_count_comes_from_the_messages_api(fake_anthropic):
    counter = AnthropicCounter("claude-sonnet-4-6")
    summary = context.summarize(LONG_WORDS, 200, count=counter.count)
    assert fake_count(summary) <= 200 < fake_count(LONG_WORDS)
    counted = [r for r in fake_anthropic.requests if r.path == "/v1/messages/count_tokens"]
    assert 2 <= len(counted) <= 12  # a proportional guess, then a narrow bisection
    before = len(fake_anthropic.requests)
    assert context.summarize(summary, 200, count=counter.count) == summary
    assert len(fake_anthropic.requests) - before <= 1  # counted once more at most (cached)


def test_without_the_api_the_count_is_a_conservative_estimate(settings, caplog):
    settings.ANTHROPIC_API_KEY = ""
    with caplog.at_level(logging.WARNING):
        count = AnthropicCounter("claude-sonnet-4-6").count("x" * 90)
    assert count == 30 and "token counting for claude-sonnet-4-6 unavailable" in caplog.text


def plan_with_inputs(make_agent, make_plan, **inputs):
    """scope → (a ∥ b) → synth: a fan-in at the end."""
    make_agent("researcher")
    make_agent("writer")
    extra = {key: {"inputs": value} for key, value in inputs.items()}
    return make_plan(
        {
            "scope": ("researcher", []),
            "a": ("researcher", ["scope"], extra.get("a", {})),
            "b": ("researcher", ["scope"], extra.get("b", {})),
            "synth": ("writer", ["a", "b"], extra.get("synth", {})),
        }
    )


def finished(run, key: str, output: str, summary: str = "") -> TaskRun:
    task = run.tasks.get(subtask__key=key)
    TaskRun.objects.filter(pk=task.pk).update(state="succeeded", output=output, summary=summary or output[:40])
    return task


def test_inputs_are_stored_from_the_plan_document(make_agent, make_plan):
    plan = plan_with_inputs(make_agent, make_plan, a="full", synth="summaries")
    inputs = dict(plan.subtasks.values_list("key", "inputs"))
    assert inputs == {"scope": "", "a": "full", "b": "", "synth": "summaries"}


def test_by_default_summaries_and_a_fan_in_gets_full_outputs(make_agent, make_plan):
    run = runs.launch(plan_with_inputs(make_agent, make_plan))
    finished(run, "scope", "Scope output in full. " * 5, "Scope summary.")
    finished(run, "a", "Alpha output in full.", "Alpha summary.")
    finished(run, "b", "Beta output in full.", "Beta summary.")
    assert "Scope summary." in context.build_prompt(run.tasks.get(subtask__key="a"))
    synth = context.build_prompt(run.tasks.get(subtask__key="synth"))
    assert "Alpha output in full." in synth and "Alpha summary." not in synth


def test_a_subtask_may_choose_full_outputs_or_summaries(make_agent, make_plan):
    run = runs.launch(plan_with_inputs(make_agent, make_plan, a="full", synth="summaries"))
    finished(run, "scope", "Scope output in full, every word of it.", "Scope summary.")
    finished(run, "a", "Alpha output in full.", "Alpha summary.")
    finished(run, "b", "Beta output in full.", "Beta summary.")
    a_prompt = context.build_prompt(run.tasks.get(subtask__key="a"))
    assert "Scope output in full, every word of it." in a_prompt and "Scope summary." not in a_prompt
    synth = context.build_prompt(run.tasks.get(subtask__key="synth"))
    assert "Alpha summary." in synth and "Alpha output in full." not in synth


def test_a_summary_is_bounded_again_for_a_claude_agent_that_receives_it(make_agent, make_plan, fake_anthropic):
    make_agent("researcher")
    make_agent("claude", provider="anthropic", model="claude-sonnet-4-6", provider_options={})
    run = runs.launch(make_plan({"up": ("researcher", []), "down": ("claude", ["up"])}))
    finished(run, "up", LONG_WORDS, LONG_WORDS)  # a summary bounded by words only
    prompt = context.build_prompt(run.tasks.get(subtask__key="down"))
    received = prompt.split("(up): ", 1)[1]
    assert fake_count(received) <= 200 < fake_count(LONG_WORDS)


def test_a_summary_is_made_for_the_strictest_agent_downstream(make_agent, make_plan, fake_anthropic):
    make_agent("researcher")
    make_agent("claude", provider="anthropic", model="claude-sonnet-4-6", provider_options={})
    run = runs.launch(make_plan({"up": ("researcher", []), "sim": ("researcher", ["up"]), "c": ("claude", ["up"])}))
    up = run.tasks.get(subtask__key="up")
    summary = context.summary_for(up, LONG_WORDS)
    assert fake_count(summary) <= 200 and len(summary.split()) < 191
    alone = runs.launch(make_plan({"solo": ("researcher", [])}))
    assert context.summary_for(alone.tasks.get(), LONG_WORDS) == LONG_WORDS  # words: its own agent's count


def test_the_estimate_counts_what_each_subtask_receives(make_agent, make_plan, priced_limit):
    summaries = plan_with_inputs(make_agent, make_plan, synth="summaries")
    default = make_plan(
        {
            "scope": ("researcher", []),
            "a": ("researcher", ["scope"]),
            "b": ("researcher", ["scope"]),
            "synth": ("writer", ["a", "b"]),
        }
    )
    per_summary = context.received_tokens_bound(Subtask.Inputs.SUMMARIES, 1)
    assert per_summary == 220
    full_fan_in = context.received_tokens_bound(Subtask.Inputs.FULL, 2)
    price = Decimal(3) / 1_000_000
    # a and b receive one summary each; synth two summaries, or (by default, a fan-in) full outputs.
    assert runs.estimate_cost(default) - runs.estimate_cost(summaries) == (full_fan_in - 2 * per_summary) * price


def test_admission_reserves_for_full_inputs_on_a_single_upstream(make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({"up": ("researcher", []), "down": ("researcher", ["up"], {"inputs": "full"})}))
    bound = context.prompt_token_bound(run.tasks.get(subtask__key="down"))
    assert bound >= context.FULL_INPUTS_BUDGET_TOKENS
