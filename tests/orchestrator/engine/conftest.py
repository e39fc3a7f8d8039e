"""Fixtures the engine's tests share."""

from __future__ import annotations

import pytest

from orchestrator import ratelimit
from orchestrator.engine import admission
from tests.conftest import stand_still

# The simulated model's per-minute budgets, by unit.
BUDGETS = {unit: admission.admission_key("simulated", "sim-1", unit) for unit in ("rpm", "itpm", "otpm")}


@pytest.fixture
def still_budgets(monkeypatch):
    """The simulated model's budgets empty before the test and after it (on Redis they outlive
    the test database), on a clock that stands still."""
    stand_still(monkeypatch)
    for key in BUDGETS.values():
        ratelimit.reset(key)
    yield
    for key in BUDGETS.values():
        ratelimit.reset(key)
