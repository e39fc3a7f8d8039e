"""How a run runs: concurrency cap, budget, failure policy, plan approval, checked in one place.

Every way of launching (the `launch` and `plan` commands, the JSON API, the New-run page and
`runs.launch` itself) reads its settings through `RunSettings.of` or the `parse_*` functions here,
so a bad value gets the same message, naming the limit, wherever it was typed. The limits are the
Run columns' (the cap's validators, the budget's digits); the defaults are the Django settings
GLASSBOX_DEFAULT_CAP and GLASSBOX_DEFAULT_BUDGET_USD, and for plan approval the rule of
`default_plan_approval` (GLASSBOX_PLAN_APPROVAL_DEFAULT).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.validators import BaseValidator, MaxValueValidator, MinValueValidator

from orchestrator import wording
from orchestrator.models import Run


def _cap_limit(kind: type[BaseValidator]) -> int:
    return next(v.limit_value for v in Run._meta.get_field("cap").validators if isinstance(v, kind))


_BUDGET_FIELD = Run._meta.get_field("budget_usd")
MIN_CAP = _cap_limit(MinValueValidator)
MAX_CAP = _cap_limit(MaxValueValidator)
BUDGET_DECIMALS = _BUDGET_FIELD.decimal_places
MIN_BUDGET_USD = Decimal(1).scaleb(-BUDGET_DECIMALS)  # 0.0001
MAX_BUDGET_USD = Decimal(10) ** (_BUDGET_FIELD.max_digits - BUDGET_DECIMALS) - MIN_BUDGET_USD
FAILURE_POLICIES = tuple(Run.FailurePolicy.values)


class InvalidRunSetting(ValueError):
    """A run setting out of its limits. `problem` is the message without the setting's name."""

    def __init__(self, name: str, problem: str):
        self.name, self.problem = name, problem
        super().__init__(f"{name} {problem}")


def parse_cap(value: Any) -> int:
    """A cap within MIN_CAP..MAX_CAP, from a number or its text."""
    problem = f"must be a whole number from {MIN_CAP} to {MAX_CAP}, got {value!r}"
    if isinstance(value, bool) or isinstance(value, float):
        raise InvalidRunSetting("cap", problem)
    try:
        cap = int(value)
    except (TypeError, ValueError):
        raise InvalidRunSetting("cap", problem) from None
    if not MIN_CAP <= cap <= MAX_CAP:
        raise InvalidRunSetting("cap", problem.replace(repr(value), str(cap)))
    return cap


def parse_budget(value: Any) -> Decimal:
    """A budget in USD within MIN_BUDGET_USD..MAX_BUDGET_USD and BUDGET_DECIMALS places."""
    try:
        amount = None if isinstance(value, bool) else Decimal(str(value).strip())
    except InvalidOperation:
        amount = None
    if amount is None or not amount.is_finite():
        raise InvalidRunSetting("budget", f"must be an amount in USD such as 0.50, got {value!r}")
    if not MIN_BUDGET_USD <= amount <= MAX_BUDGET_USD:
        limits = f"from {wording.budget(MIN_BUDGET_USD)} to {wording.budget(MAX_BUDGET_USD)}"
        raise InvalidRunSetting("budget", f"must be {limits}, got {wording.budget(amount)}")
    if amount != amount.quantize(MIN_BUDGET_USD, rounding="ROUND_DOWN"):
        raise InvalidRunSetting(
            "budget", f"must have at most {BUDGET_DECIMALS} decimal places, got {wording.budget(amount)}"
        )
    return amount


def least_budget_for(cost: Decimal) -> Decimal:
    """The smallest budget a person can type that covers `cost`: rounded up to whole cents from
    $1 (as the pages write dollars), else to the budget's four decimals, and at least
    MIN_BUDGET_USD. The advice said "raise the budget to at least $1.13" of an estimate of
    $1.1254, and a budget of $1.13 was refused again with the same advice."""
    places = Decimal("0.01") if cost >= 1 else MIN_BUDGET_USD
    return max(MIN_BUDGET_USD, cost.quantize(places, rounding=ROUND_CEILING))


def budget_shortfall(cost: Decimal, budget: Decimal, *, what: str = "the estimated cost") -> str:
    """Why `budget` does not cover `cost`, and the least budget that does, which is accepted when
    typed: "the estimated cost $1.13 is over the budget of $0.50: raise the budget to at least
    $1.13". When `cost` as the pages round it is not that least budget, it is written to its last
    decimal: "$1.1404 … at least $1.15", never "$1.14 … at least $1.15", nor "$1.12 is over the
    budget of $1.12"."""
    least = least_budget_for(cost)
    shown = wording.usd(cost) if wording.usd_shown(cost) == least else wording.budget(cost)
    return (
        f"{what} {shown} is over the budget of {wording.budget(budget)}: "
        f"raise the budget to at least {wording.budget(least)}"
    )


def parse_failure_policy(value: Any) -> str:
    if value not in FAILURE_POLICIES:
        raise InvalidRunSetting("failure policy", f"must be {' or '.join(FAILURE_POLICIES)}, got {value!r}")
    return value


APPROVER_PERMISSION = "orchestrator.decide_checkpoint"
PLAN_APPROVAL_DEFAULTS = ("auto", "always", "never")


def default_plan_approval() -> bool:
    """Whether a run waits for its plan's approval when whoever launches it does not say.

    GLASSBOX_PLAN_APPROVAL_DEFAULT: `always`, `never`, or `auto` (the default): yes as soon as
    more than one active person may approve checkpoints (the Approver role, the permission given
    directly, or a superuser), so that with separation of duties someone other than the launcher
    reviews the plan. A single-user install (the demo's superuser alone) launches straight away:
    no one else could approve.
    """
    from django.contrib.auth import get_user_model

    choice = settings.GLASSBOX_PLAN_APPROVAL_DEFAULT
    if choice != "auto":
        return choice == "always"
    approvers = get_user_model().objects.with_perm(APPROVER_PERMISSION, is_active=True, include_superusers=True)
    return approvers[:2].count() > 1


@dataclass(frozen=True)
class RunSettings:
    cap: int
    budget_usd: Decimal
    failure_policy: str = Run.FailurePolicy.CONTINUE.value
    require_plan_approval: bool = False

    @classmethod
    def of(
        cls,
        *,
        cap: Any = None,
        budget_usd: Any = None,
        failure_policy: Any = None,
        require_plan_approval: bool | None = None,
    ) -> RunSettings:
        """Checked settings; what is not given (None) is the default (plan approval: the rule of
        `default_plan_approval`). Raises InvalidRunSetting."""
        if require_plan_approval is None:
            require_plan_approval = default_plan_approval()
        return cls(
            cap=parse_cap(settings.GLASSBOX_DEFAULT_CAP if cap is None else cap),
            budget_usd=parse_budget(settings.GLASSBOX_DEFAULT_BUDGET_USD if budget_usd is None else budget_usd),
            failure_policy=parse_failure_policy(failure_policy or Run.FailurePolicy.CONTINUE.value),
            require_plan_approval=bool(require_plan_approval),
        )

    @classmethod
    def defaults(cls) -> RunSettings:
        return cls.of()

    def as_dict(self) -> dict[str, Any]:
        """The settings as keyword arguments of `runs.launch` (and of RunSettings.of)."""
        return asdict(self)


def check_defaults(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """System check: the default cap and budget (GLASSBOX_DEFAULT_CAP, GLASSBOX_DEFAULT_BUDGET_USD)
    obey the same limits as a person's, so a bad default stops start-up instead of every launch."""
    problems: list[checks.CheckMessage] = []
    for variable, parse, value in (
        ("GLASSBOX_DEFAULT_CAP", parse_cap, settings.GLASSBOX_DEFAULT_CAP),
        ("GLASSBOX_DEFAULT_BUDGET_USD", parse_budget, settings.GLASSBOX_DEFAULT_BUDGET_USD),
    ):
        try:
            parse(value)
        except InvalidRunSetting as error:
            problems.append(checks.Error(f"{variable}={value!r}: {error}", id="glassbox.E001"))
    return problems
