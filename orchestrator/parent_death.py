"""A process told by the kernel when its parent dies, however it dies (Linux's PR_SET_PDEATHSIG).

A qcluster's workers, pusher and monitor are children of its sentinel; killed with SIGKILL (the
OOM killer picks one process, not a group), the sentinel could not stop them, and they ran on
re-parented to PID 1. The pipe multiprocessing keeps from a child to its parent does not tell
them either: each child the sentinel forks later inherits the sentinel's end of every earlier
child's pipe, so a worker's pipe stays open while any sibling lives.

The kernel's parent-death signal has neither problem. It is sent when the *thread* that forked
the process ends, which for django-q2's sentinel (it forks from its main thread) is the process's
death. The setting is not inherited by a fork, and survives an exec (but a set-user-ID one).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
SUPPORTED = sys.platform.startswith("linux")


def signal_when_parent_dies(signum: int, parent_pid: int) -> bool:
    """Have the kernel send `signum` to this process when its parent, `parent_pid`, dies.

    Should the parent have died already (before this call), the signal is sent at once, so that
    the caller's handler runs either way. Returns False where the kernel cannot (not Linux).
    """
    if not SUPPORTED:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
        return False
    if os.getppid() != parent_pid:  # re-parented before the setting took effect
        os.kill(os.getpid(), signum)
    return True
