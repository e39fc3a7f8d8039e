"""Which models have a price, and the tokens runs used on those without: their cost counts them as
$0 and their budget, which reserves and settles in dollars, cannot stop those calls.

A model has a price when its ProviderLimit row sets one (`ProviderLimit.is_priced`: both prices at
0, the default, is none). An attempt's tokens count against the model it ran with, as its request
recorded it (`ran_with`), not its agent's model now: an agent moved to a priced model made the
tokens its earlier attempts used on an unpriced one vanish from the note, and the other way round.
The run page's Cost card, `run_status`, the runs lists and the API's runs say what a cost leaves
out by one rule (`unpriced`) in the same words (`unpriced_text`, and `unpriced_short` for a list's
row). An estimate, made before any tokens are used, counts a model without a price at $0 and says
so by one sentence too (`unpriced_models`, `estimate_note`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from django.db.models import CharField, F, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from orchestrator import sql
from orchestrator.models import Attempt, ProviderLimit


def price_list() -> dict[tuple[str, str], ProviderLimit]:
    """Every provider:model with a ProviderLimit row (its in-flight cap, its prices), read in one
    statement. A row whose prices are both 0 has no price (`ProviderLimit.is_priced`). The cost
    estimate (engine/cost_estimates.py) prices a plan from the same list."""
    return {
        (limit.provider, limit.model): limit for limit in sql.objects(ProviderLimit, order_by=("provider", "model"))
    }


Prices = Mapping[tuple[str, str], ProviderLimit]


def ran_with() -> dict[str, Coalesce]:
    """The provider and model an attempt ran with, for `values()`: as its request recorded them
    (engine/attempt_requests.py, kept when it was claimed), else its agent's (an attempt never
    claimed has no request, and no tokens either)."""
    return {
        "provider": Coalesce(KT("request__provider"), F("task_run__agent__provider"), output_field=CharField()),
        "model": Coalesce(KT("request__model"), F("task_run__agent__model"), output_field=CharField()),
    }


def unpriced(used: Iterable[tuple[str, str, int]], prices: Prices) -> dict[str, int]:
    """Of the tokens used per (provider, model), those on models without a price, "provider:model"
    -> tokens in name order: the one rule of the run page, `run_status`, the runs list and the API."""
    left_out: dict[str, int] = {}
    for provider, model, tokens in used:
        limit = prices.get((provider, model))
        if tokens and (limit is None or not limit.is_priced):
            name = f"{provider}:{model}"
            left_out[name] = left_out.get(name, 0) + tokens
    return dict(sorted(left_out.items()))


def unpriced_models(models: Iterable[tuple[str, str]], prices: Prices) -> list[str]:
    """Of the (provider, model) pairs, those without a price, as "provider:model" in name order:
    what an estimate counts at $0 (`estimate_note`)."""
    return sorted(
        {
            f"{provider}:{model}"
            for provider, model in models
            if (limit := prices.get((provider, model))) is None or not limit.is_priced
        }
    )


def estimate_note(models: Sequence[str]) -> str:
    """What a cost estimate leaves out, in one sentence ("" when every model has a price): "No
    price is known for simulated:x: counted as $0 (set prices in the admin under provider
    limits)." New run's pre-flight, the plan page and a plan in the approvals inbox say it alike."""
    if not models:
        return ""
    return f"No price is known for {', '.join(models)}: counted as $0 (set prices in the admin under provider limits)."


def unpriced_by_run(run_ids: Iterable[int], prices: Prices | None = None) -> dict[int, dict[str, int]]:
    """`costs.unpriced_tokens` of many runs (run id -> its unpriced tokens; a run with none is left
    out), from their attempts' tokens (a running one's so far too), each on the model it ran with,
    in one statement: the runs list and the API's runs (and a run's Cost card once one of its
    agents has changed since its launch). `prices`: `price_list` (read here when not given)."""
    ids = list(run_ids)
    if not ids:
        return {}
    rows = (
        Attempt.objects.filter(task_run__run_id__in=ids)
        .order_by()
        .values("task_run__run_id", **ran_with())
        .annotate(tokens=Sum("input_tokens") + Sum("output_tokens"))
        .values_list("task_run__run_id", "provider", "model", "tokens")
    )
    used: dict[int, list[tuple[str, str, int]]] = {}
    for run_id, provider, model, tokens in rows:
        used.setdefault(run_id, []).append((provider, model, tokens or 0))
    prices = price_list() if prices is None else prices
    by_run = {run_id: unpriced(run_used, prices) for run_id, run_used in used.items()}
    return {run_id: left_out for run_id, left_out in by_run.items() if left_out}


def unpriced_text(used: Mapping[str, int]) -> str:
    """What the run's cost leaves out, in one sentence ("" when every model it used has a price):
    "anthropic:claude-x has no price: its 1,212 tokens are not in the cost, and the budget cannot
    stop them (set prices in the admin under provider limits)". The run page's Cost card,
    `run_status`, the API's runs and the title of a runs list's note say it alike."""
    if not used:
        return ""
    total = sum(used.values())
    if len(used) == 1:
        (name,) = used
        subject, have, its = name, "has", "its"
    else:
        names = [f"{name} ({_tokens(tokens)})" for name, tokens in used.items()]
        subject, have, its = f"{', '.join(names[:-1])} and {names[-1]}", "have", "their"
    verb, them = ("is", "it") if total == 1 else ("are", "them")
    return (
        f"{subject} {have} no price: {its} {_tokens(total)} {verb} not in the cost, and the budget cannot stop {them}"
        " (set prices in the admin under provider limits)"
    )


def unpriced_short(used: Mapping[str, int]) -> str:
    """What a run's cost leaves out, short enough for a row of the runs list ("" when nothing):
    "+ 1,212 tokens with no price" (the whole of it, `unpriced_text`, is the row's title)."""
    return f"+ {_tokens(sum(used.values()))} with no price" if used else ""


def _tokens(count: int) -> str:
    """ "1,212 tokens", "1 token"."""
    return f"{count:,} token{'' if count == 1 else 's'}"
