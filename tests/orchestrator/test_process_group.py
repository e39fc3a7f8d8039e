"""A process group that ends with its leader, with real processes: what the leader started ends
when it ends, however it ends, and the watcher that sees to it stays out of the leader's way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from orchestrator import process_group
from tests.conftest import ROOT, kill_session, process_ended, session_members, wait_until

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the watcher waits on a pidfd (Linux)")

# Becomes the leader of a group that ends with it, then runs the command given in its place.
LEADER = "import os, sys\nfrom orchestrator import process_group\nprocess_group.end_when_leader_exits()\nos.execvp(sys.argv[1], sys.argv[1:])\n"


def leader(*command: str, new_session: bool = True) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", LEADER, *command],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def test_what_the_leader_started_ends_when_it_exits_and_its_status_is_its_own():
    proc = leader("sh", "-c", "sleep 600 & echo $!; exit 5", new_session=False)
    out, _ = proc.communicate(timeout=30)  # the watcher holds no end of the leader's pipes
    helper = int(out)
    try:
        assert proc.returncode == 5
        wait_until(lambda: process_ended(helper), 15, f"the leader's helper (pid {helper}) to end")
    finally:
        if not process_ended(helper):
            os.kill(helper, signal.SIGKILL)


def test_what_ignores_sigterm_is_killed_after_the_grace():
    proc = leader("sh", "-c", "(trap '' TERM; exec sleep 600) & echo $!; exit 0", new_session=False)
    helper = int(proc.communicate(timeout=30)[0])
    try:
        wait_until(lambda: process_ended(helper), 15 + process_group.TERM_GRACE_S, "the stubborn helper to end")
    finally:
        if not process_ended(helper):
            os.kill(helper, signal.SIGKILL)


def test_a_leader_that_led_no_group_is_made_the_leader_of_one():
    """Else the group ended would have been its starter's (here: this test's)."""
    proc = leader(sys.executable, "-c", "import os; print(os.getpid(), os.getpgrp())", new_session=False)
    pid, pgid = proc.communicate(timeout=30)[0].split()
    assert pid == pgid == str(proc.pid)
    assert os.getpgrp() != proc.pid


def test_the_watcher_is_neither_the_leaders_child_nor_in_its_group_nor_holds_its_streams():
    """The program the leader runs finds no child it did not start, signals to its group do not
    reach the watcher, and the end of its pipes is its own."""
    proc = leader("sleep", "600")
    try:
        wait_until(lambda: len(session_members(proc.pid)) == 2, 15, "the leader and its watcher")
        (watcher,) = set(session_members(proc.pid)) - {proc.pid}
        stat = open(f"/proc/{watcher}/stat").read().rsplit(")", 1)[1].split()
        parent, group = int(stat[1]), int(stat[2])
        assert parent != proc.pid and group == watcher
        assert {os.readlink(f"/proc/{watcher}/fd/{fd}") for fd in (0, 1, 2)} == {os.devnull}
        proc.kill()
        proc.wait(timeout=30)
        wait_until(lambda: not session_members(proc.pid), 15, "the watcher to end with its leader")
    finally:
        kill_session(proc.pid)
