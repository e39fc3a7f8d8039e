"""A process group that ends with its leader: what the leader started goes when it goes.

:func:`end_when_leader_exits` forks a watcher that waits for the calling process to exit (a
pidfd, Linux 5.3 and later) and then ends every process left in its group: SIGTERM, and SIGKILL
after :data:`TERM_GRACE_S`, as the ``mcp`` SDK ends a stdio server's group on a close. The caller
then execs whatever is to lead the group (orchestrator/tools/stdio_launcher.py, a tool server).

Why: a worker killed with SIGKILL closes nothing, and the kernel's parent-death signal
(orchestrator/parent_death.py) kills the process it was set in, not what that process started.
A tool server that is a shell script running ``python server.py``, ``npx …``, or one with helpers,
left those running, re-parented to PID 1. A death is told to the dead process's parent, to
children that asked (as the server did) and to whoever holds a pidfd of it: hence a watcher that
holds the leader's.

The watcher is not the leader's child (it is forked twice, the middle process reaped at once),
so the program the leader execs finds no child it did not start itself; and it leaves the group,
so that neither its own signals nor the SDK's reach it. It stays in the leader's session, which
(the leader leading that too, as the SDK starts a server) keeps the group's id from being reused
while it signals the group. It holds none of the caller's standard streams: the end of a pipe is
the leader's business alone. A process that left the group (``setsid``, a daemon) is not
followed, as the SDK does not follow it either. The watcher is a forked interpreter, about 10 MB.
"""

from __future__ import annotations

import os
import select
import signal
import time
from contextlib import suppress
from typing import NoReturn

TERM_GRACE_S = 2.0  # the mcp SDK's own, between SIGTERM and SIGKILL (FORCE_KILL_TIMEOUT)
POLL_S = 0.05


def end_when_leader_exits() -> bool:
    """Make this process the leader of its group (if it is not: of a new session), and have the
    group ended when it exits, however it exits. Returns False where no watcher can be started
    (no pidfd)."""
    leader = os.getpid()
    if os.getpgrp() != leader:
        os.setsid()
    try:
        pidfd = os.pidfd_open(leader)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
        return False
    try:
        middle = os.fork()
        if middle == 0:
            _start_watcher(pidfd, leader)
        os.waitpid(middle, 0)
    finally:
        os.close(pidfd)  # the watcher keeps its own copy
    return True


def _start_watcher(pidfd: int, group: int) -> NoReturn:
    """In the middle process: let go of the standard streams, fork the watcher out of the group,
    exit. Never returns."""
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        watcher = os.fork()
        if watcher == 0:
            try:
                os.setpgid(0, 0)
                exited = select.poll()
                exited.register(pidfd, select.POLLIN)
                exited.poll()  # readable once the leader has exited
                end_group(group)
            finally:
                os._exit(0)
        with suppress(OSError):  # out of the group before the leader runs on, whichever is first
            os.setpgid(watcher, watcher)
    finally:
        os._exit(0)


def end_group(pgid: int) -> None:
    """SIGTERM to every process of the group; SIGKILL to those left after TERM_GRACE_S."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + TERM_GRACE_S
    while time.monotonic() < deadline:
        if not has_living_members(pgid):
            return
        time.sleep(POLL_S)
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def has_living_members(pgid: int) -> bool:
    """Whether a process of the group is alive (from /proc). A zombie is dead: one that nobody
    reaps (PID 1 of a container without an init) would have the group look alive for ever to a
    signal 0 (``killpg(pgid, 0)``)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                state, _ppid, pgrp = stat.read().rsplit(b")", 1)[1].split()[:3]
        except OSError:  # ended meanwhile
            continue
        if int(pgrp) == pgid and state not in (b"Z", b"X"):
            return True
    return False
