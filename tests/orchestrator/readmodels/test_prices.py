"""Which models have a price, and the tokens runs used on those without, many runs in one read:
the runs lists and the API's runs say what a run's cost leaves out as its Cost card does."""

from __future__ import annotations

from decimal import Decimal

import pytest

from orchestrator.models import Agent, Attempt, ProviderLimit
from orchestrator.readmodels import costs, prices
from orchestrator.readmodels.tasks import agents_of, task_states
from orchestrator.readmodels.totals import totals

from .conftest import start, succeed

pytestmark = pytest.mark.django_db


def test_the_runs_unpriced_tokens_are_read_at_once_as_the_cost_card_counts_them(launched, django_assert_num_queries):
    Agent.objects.filter(name="researcher").update(model="sim-unpriced")
    mixed = launched({"a": ("researcher", []), "b": ("researcher", []), "w": ("writer", ["a"])})
    priced = launched({"w": ("writer", [])})
    unstarted = launched({"a": ("researcher", [])})
    succeed(mixed.tasks.get(subtask__key="a"), tokens=(1_000, 200))
    succeed(mixed.tasks.get(subtask__key="w"), tokens=(500, 500))  # sim-1 has a price
    attempt = start(mixed.tasks.get(subtask__key="b"))
    Attempt.objects.filter(pk=attempt.pk).update(output_tokens=12)  # streamed so far
    succeed(priced.tasks.get(subtask__key="w"), tokens=(500, 500))
    price_list = prices.price_list()
    with django_assert_num_queries(1):
        by_run = prices.unpriced_by_run([mixed.pk, priced.pk, unstarted.pk], price_list)
    assert by_run == {mixed.pk: {"simulated:sim-unpriced": 1_212}}
    assert by_run[mixed.pk] == totals(mixed).unpriced_tokens  # the Cost card's count
    assert prices.unpriced_by_run([]) == {}


def test_a_row_says_what_its_cost_leaves_out_in_a_few_words():
    assert prices.unpriced_short({"anthropic:a": 1_000, "openai:b": 212}) == "+ 1,212 tokens with no price"
    assert prices.unpriced_short({"openai:b": 1}) == "+ 1 token with no price"
    assert prices.unpriced_short({}) == ""


def test_a_model_has_a_price_when_either_price_is_set(launched):
    """Both at 0 is the default a limit is made with, not a price someone set."""
    limit = ProviderLimit(provider="simulated", model="m")
    assert not limit.is_priced
    limit.input_price_per_mtok = Decimal("0.25")
    assert limit.is_priced
    run = launched({"w": ("writer", [])})
    succeed(run.tasks.get(subtask__key="w"), tokens=(10, 2))
    ProviderLimit.objects.filter(model="sim-1").update(input_price_per_mtok=0, output_price_per_mtok=0)
    tasks = task_states(run)
    assert prices.unpriced_by_run([run.pk]) == {run.pk: {"simulated:sim-1": 12}}
    assert prices.unpriced_by_run([run.pk])[run.pk] == totals(run, tasks, agents=agents_of(tasks)).unpriced_tokens


def test_tokens_count_against_the_model_each_attempt_ran_with_not_the_agents_model_now(launched):
    """The note matched a run's tokens to its agents' models now: moved to a priced model after it
    ran on an unpriced one, the researcher's 1,212 tokens vanished from the note, and moved back,
    the note named tokens a price had counted. An attempt's request says the model it ran with."""
    Agent.objects.filter(name="researcher").update(model="sim-unpriced")
    run = launched({"a": ("researcher", []), "b": ("researcher", [])}, cap=2)
    researcher = Agent.objects.get(name="researcher")

    def ran(key: str, model: str) -> None:
        task = run.tasks.get(subtask__key=key)
        succeed(task, tokens=(1_000, 212))
        Attempt.objects.filter(task_run=task).update(request={"provider": "simulated", "model": model})

    def said() -> list[dict[str, int]]:
        """The Cost card's count, the runs list's, and the cost lines' tokens per model."""
        lines = {line["name"]: line["input_tokens"] + line["output_tokens"] for line in costs.by_model(run)}
        return [totals(run).unpriced_tokens, prices.unpriced_by_run([run.pk]).get(run.pk, {}), lines]

    ran("a", "sim-unpriced")
    assert said() == [{"simulated:sim-unpriced": 1_212}] * 2 + [{"simulated:sim-unpriced": 1_212}]
    researcher.model = "sim-1"  # priced; the registry saves it so (updated_at moves on)
    researcher.save()
    ran("b", "sim-1")
    both = {"simulated:sim-1": 1_212, "simulated:sim-unpriced": 1_212}
    assert said() == [{"simulated:sim-unpriced": 1_212}] * 2 + [both]
    researcher.model = "sim-unpriced"
    researcher.save()
    assert said() == [{"simulated:sim-unpriced": 1_212}] * 2 + [both]  # b's ran on sim-1, priced


def test_an_estimate_names_the_models_it_counts_at_nothing():
    """New run's pre-flight, the plan page and the approvals inbox say it in one sentence."""
    price_list = {
        ("simulated", "sim-1"): ProviderLimit(
            provider="simulated", model="sim-1", input_price_per_mtok=Decimal("3"), output_price_per_mtok=Decimal("15")
        ),
        ("simulated", "sim-free"): ProviderLimit(provider="simulated", model="sim-free"),  # both at 0: no price
    }
    used = [("simulated", "sim-x"), ("simulated", "sim-1"), ("simulated", "sim-free"), ("simulated", "sim-x")]
    missing = prices.unpriced_models(used, price_list)
    assert missing == ["simulated:sim-free", "simulated:sim-x"]
    assert prices.estimate_note(missing) == (
        "No price is known for simulated:sim-free, simulated:sim-x: counted as $0"
        " (set prices in the admin under provider limits)."
    )
    assert prices.unpriced_models([("simulated", "sim-1")], price_list) == []
    assert prices.estimate_note([]) == ""
