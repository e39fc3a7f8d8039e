"""A background thread in every qcluster worker process that runs the reaper's tick every second.

django-q2's scheduler looks at Schedules only every 30 seconds and a Schedule repeats at most
once a minute; leases of 15 seconds and retry backoffs of one second need a finer clock. q2
offers one hook into its worker processes, the `post_spawn` signal, so this module connects
to it (the one signal receiver in the project). Ticks across processes are thinned by a
conditional update on one shared row: at most one tick per interval runs cluster-wide, and a
killed process's ticker is simply replaced by the others'.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection

log = logging.getLogger(__name__)

TICKER_KEY = "glassbox:ticker"
_started = threading.Event()


def claim_tick(interval_s: float) -> bool:
    """True for exactly one caller per interval across every process sharing the database."""
    from orchestrator.models import RateCounter

    now = time.time()
    RateCounter.objects.get_or_create(key=TICKER_KEY, defaults={"count": 0, "expires_at": 0})
    return bool(
        RateCounter.objects.filter(key=TICKER_KEY, expires_at__lte=now).update(expires_at=now + interval_s * 0.9)
    )


def ticker_loop(interval_s: float) -> None:
    from orchestrator.engine.reaper import tick

    while True:
        time.sleep(interval_s)
        try:
            close_old_connections()
            if claim_tick(interval_s):
                tick()
        except Exception:  # the ticker must survive a locked database or a transient error
            log.exception("reaper tick failed")
        finally:
            connection.close()


def start_ticker(**kwargs) -> None:
    """post_spawn receiver: start this process's ticker thread once (and, as this is a worker
    process, stop ringing doorbells that could not reach any viewer from here, and let SIGTERM
    drain its agent host instead of killing it: orchestrator/engine/host.py)."""
    from orchestrator.engine.host import prepare_worker_process
    from orchestrator.events import silence_doorbell_if_unreachable

    silence_doorbell_if_unreachable()
    prepare_worker_process()
    if _started.is_set() or not settings.GLASSBOX_TICK_S:
        return
    _started.set()
    threading.Thread(target=ticker_loop, args=(settings.GLASSBOX_TICK_S,), name="glassbox-ticker", daemon=True).start()
