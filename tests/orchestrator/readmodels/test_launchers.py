"""Who launched a run, in words, from its run.created event."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from orchestrator.models import Run
from orchestrator.readmodels import launchers

pytestmark = pytest.mark.django_db

ONE = {"a": ("researcher", [])}


def test_the_command_line_is_named_with_its_user(launched):
    run = launched(ONE, actor_name="cli:root")
    assert launchers.launcher(run) == "root from the command line"
    assert launchers.launched_by(run) == "launched by root from the command line"


def test_a_person_is_named_and_stays_named_once_their_account_is_gone(launched):
    alice = get_user_model().objects.create_user("alice")
    run = launched(ONE, launched_by=alice)
    assert launchers.launched_by(run) == "launched by alice"
    alice.delete()  # the run's launched_by becomes empty; its run.created event still says who
    run.refresh_from_db()
    assert run.launched_by is None and launchers.launched_by(run) == "launched by alice"


def test_a_launch_by_no_person_and_no_command_line_is_not_called_the_command_line(launched):
    run = launched(ONE)
    assert launchers.launched_by(run) == "launched by system"


def test_a_run_without_its_created_event_says_it_was_not_recorded(make_plan, demo_agents):
    run = Run.objects.create(plan=make_plan(ONE), cap=1, budget_usd=1)
    assert launchers.launched_by(run) == "launcher not recorded"
    assert launchers.launchers([run.pk]) == {run.pk: "not recorded"}


def test_the_header_reads_one_row_and_a_list_one_query(launched, django_assert_num_queries):
    alice = get_user_model().objects.create_user("alice")
    runs = [launched(ONE, launched_by=alice), launched(ONE, actor_name="cli:bob"), launched(ONE)]
    with django_assert_num_queries(1):
        launchers.launched_by(runs[1])
    with django_assert_num_queries(1):
        named = launchers.launchers(run.pk for run in runs)
    assert named == {runs[0].pk: "alice", runs[1].pk: "bob from the command line", runs[2].pk: "system"}
