"""The suite's own set-up: what keeps parallel test workers apart, and what ends a test process
that does not exit (tests/conftest.py)."""

import faulthandler
from types import SimpleNamespace

from execnet import XSpec

from tests.conftest import EXIT_WATCHDOG_S, pytest_unconfigure, pytest_xdist_setupnodes


def test_each_xdist_worker_gets_redis_keys_and_a_queue_of_its_own(monkeypatch):
    monkeypatch.setenv("GLASSBOX_REDIS_PREFIX", "glassbox-test-41")
    monkeypatch.setenv("GLASSBOX_Q_NAME", "glassbox-test-41")
    specs = [XSpec("popen"), XSpec("popen")]
    pytest_xdist_setupnodes(config=None, specs=specs)
    assert [spec.env for spec in specs] == [
        {"GLASSBOX_REDIS_PREFIX": "glassbox-test-41-gw0", "GLASSBOX_Q_NAME": "glassbox-test-41-gw0"},
        {"GLASSBOX_REDIS_PREFIX": "glassbox-test-41-gw1", "GLASSBOX_Q_NAME": "glassbox-test-41-gw1"},
    ]


def test_on_the_embedded_default_no_worker_environment_is_set(monkeypatch):
    monkeypatch.delenv("GLASSBOX_REDIS_PREFIX", raising=False)
    monkeypatch.delenv("GLASSBOX_Q_NAME", raising=False)
    specs = [XSpec("popen"), XSpec("popen")]
    pytest_xdist_setupnodes(config=None, specs=specs)
    assert [spec.env for spec in specs] == [{}, {}]


def armed_watchdogs(monkeypatch, config) -> list:
    armed: list = []
    monkeypatch.setattr(faulthandler, "dump_traceback_later", lambda timeout, exit: armed.append((timeout, exit)))
    pytest_unconfigure(config)
    return armed


def test_the_process_that_runs_pytest_is_ended_if_it_does_not_exit_in_time(monkeypatch):
    assert armed_watchdogs(monkeypatch, SimpleNamespace()) == [(EXIT_WATCHDOG_S, True)]


def test_an_xdist_worker_waiting_for_the_others_to_finish_arms_no_watchdog(monkeypatch):
    assert armed_watchdogs(monkeypatch, SimpleNamespace(workerinput={"workerid": "gw0"})) == []
