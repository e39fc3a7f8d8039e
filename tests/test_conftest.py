"""The suite's own set-up: what keeps parallel test workers apart (tests/conftest.py)."""

from execnet import XSpec

from tests.conftest import pytest_xdist_setupnodes


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
