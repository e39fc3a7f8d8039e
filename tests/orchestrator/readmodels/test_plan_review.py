"""A plan under review: its subtasks in the plan's order, each with what it depends on, and when
the list is too long to show whole."""

from __future__ import annotations

import pytest

from orchestrator.engine import runs
from orchestrator.readmodels import plan_review

pytestmark = pytest.mark.django_db


def test_the_review_lists_each_subtask_with_its_agent_gate_instructions_and_upstreams(demo_agents, make_plan):
    plan = make_plan(
        {
            "scope": ("researcher", []),
            "notes": ("researcher", []),
            "draft": ("writer", ["scope", "notes"], {"gate": "before", "instructions": "Two pages at most."}),
        },
        goal="Write it up",
    )
    run = runs.launch(plan, require_plan_approval=True)

    review = plan_review.plan_review(run)

    assert [(r.key, r.title, r.agent, r.gate, r.depends_on) for r in review.rows] == [
        ("scope", "Scope", "researcher", "none", []),
        ("notes", "Notes", "researcher", "none", []),
        ("draft", "Draft", "writer", "before", ["scope", "notes"]),
    ]
    assert review.rows[2].instructions == "Two pages at most."
    assert review.count == "3 subtasks" and not review.scrolls


def test_a_review_longer_than_the_page_shows_whole_scrolls(demo_agents, make_plan):
    whole = plan_review.PLAN_REVIEW_WHOLE
    at_most = runs.launch(
        make_plan({f"t{n:02d}": ("researcher", []) for n in range(whole)}), require_plan_approval=True
    )
    longer = runs.launch(
        make_plan({f"t{n:02d}": ("researcher", []) for n in range(whole + 1)}), require_plan_approval=True
    )
    assert not plan_review.plan_review(at_most).scrolls
    assert plan_review.plan_review(longer).scrolls and plan_review.plan_review(longer).count == "16 subtasks"
