"""`python manage.py qcluster`: django-q2's cluster, with a shutdown that SIGTERM to the whole
process group cannot hang (this command takes the place of django-q2's own: the orchestrator app
is listed before django_q in INSTALLED_APPS).

What systemd does to stop a service — SIGTERM to every process of the group at once — killed
django-q2's sentinel (it resets SIGTERM to its default, death) while the main process was telling
it to stop through a shared event, and the main process then waited on that event for ever; it
also killed every worker at once, losing the attempts they ran. Here the sentinel, and the pusher
and monitor it starts, are forked with SIGTERM blocked: they stop in django-q2's own order when the
main process tells them to. The workers unblock it and drain their agent host on it
(orchestrator/engine/host.py: stop taking work, finish or hand back what they run, exit).

A main process killed with SIGKILL (the OOM killer, `kill -9`) left the sentinel, re-parented to
PID 1, running its workers with nobody to stop them: beside the cluster `serve` started in its
place, and after `serve` stopped. Here the sentinel stops its cluster when its main process dies,
as that process would have told it to: the workers drain their agent hosts and every process of
the cluster ends.

A sentinel killed with SIGKILL alone left its workers hosting their attempts, and its pusher taking
tasks from the broker, re-parented to PID 1 with nobody to stop them. Here each child of the
sentinel is told by the kernel when the sentinel dies (orchestrator/parent_death.py): a worker
drains its agent host as on a stop and exits (orchestrator/engine/host.py), the pusher stops
taking tasks, and the monitor ends. The main process, which exited 0 in silence, now fails naming
the sentinel's death, so that a process manager restarting on failure starts the cluster again.

The queue between the pusher and the workers is orchestrator/management/task_queue.py's: a worker
killed with SIGKILL while it waited for work no longer leaves every other worker waiting for ever.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading

import django_q.cluster
from django.conf import settings
from django.core.management.base import CommandError
from django_q.cluster import Cluster, Sentinel
from django_q.management.commands.qcluster import Command as QClusterCommand
from django_q.monitor import monitor
from django_q.pusher import pusher

from orchestrator import parent_death
from orchestrator.management import task_queue
from orchestrator.management.commands.serve import describe_exit

log = logging.getLogger(__name__)


class WatchfulSentinel(Sentinel):
    """django-q2's sentinel, which also stops its cluster when the main process dies.

    A thread waits on the pipe multiprocessing keeps from every child to its parent: the kernel
    closes the parent's end when the parent dies, however it dies, and the wait returns (no
    polling; the main process forks nothing else that could hold that end open). The thread then
    sets the stop event, as the main process does on SIGTERM: the sentinel stops in django-q2's
    own order (pusher, a STOP to each worker, monitor) and its workers drain their agent hosts.
    """

    def __init__(self, stop_event, *args, **kwargs):
        watch = threading.Thread(target=self.stop_when_orphaned, args=(stop_event,), name="glassbox-parent-watch")
        watch.daemon = True
        watch.start()
        super().__init__(stop_event, *args, **kwargs)

    @staticmethod
    def stop_when_orphaned(stop_event) -> None:
        parent = multiprocessing.parent_process()
        assert parent is not None  # the sentinel is a child of the main process
        parent.join()
        if not stop_event.is_set():  # not stopped by its main process: it died
            log.warning("the qcluster's main process (pid %s) died: stopping its cluster", parent.pid)
            stop_event.set()

    def spawn_pusher(self):
        return self.spawn_process(pusher_stopping_with_its_sentinel, self.task_queue, self.event_out, self.broker)

    def spawn_monitor(self):
        return self.spawn_process(monitor_ending_with_its_sentinel, self.result_queue, self.broker)


# The pusher's and monitor's SIGTERM stays blocked (see GracefulCluster): another signal tells them.
SENTINEL_DIED = signal.SIGUSR1


def pusher_stopping_with_its_sentinel(task_queue, event_out, broker) -> None:
    """django-q2's pusher, which stops taking tasks from the broker when its sentinel dies, as it
    does when its sentinel stops it (`event_out`): what it pushed already still reaches the
    workers, which hand it back to the broker while they drain."""

    def stop(signum, frame) -> None:
        # From a thread: the handler may interrupt the pusher's own use of the event's lock.
        threading.Thread(target=event_out.set, name="glassbox-pusher-stop", daemon=True).start()

    signal.signal(SENTINEL_DIED, stop)
    parent_death.signal_when_parent_dies(SENTINEL_DIED, _sentinel_pid())
    pusher(task_queue, event_out, broker)


def monitor_ending_with_its_sentinel(result_queue, broker) -> None:
    """django-q2's monitor, which ends at once when its sentinel dies. What it would still save
    are django-q2's own records of tasks; our attempt rows are the record, and a task the broker
    hands out again for want of an acknowledgement finds its attempt taken or ended."""
    parent_death.signal_when_parent_dies(signal.SIGKILL, _sentinel_pid())
    monitor(result_queue, broker)


def _sentinel_pid() -> int:
    sentinel = multiprocessing.parent_process()
    assert sentinel is not None and sentinel.pid is not None  # forked by the sentinel
    return sentinel.pid


class GracefulCluster(Cluster):
    def start(self) -> int:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            return super().start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class Command(QClusterCommand):
    help = "Starts a Django Q cluster (django-q2's qcluster, stopping gracefully on SIGTERM)."

    def handle(self, *args, **options):
        # django-q2's handle(), with our cluster: its options mean the same.
        settings.SECRET_KEY  # noqa: B018 - signing needs it: fail before starting anything
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        task_queue.install()
        django_q.cluster.Sentinel = WatchfulSentinel  # Cluster.start forks the sentinel by this name
        cluster = GracefulCluster()
        cluster.start()
        if options.get("run_once", False):
            cluster.stop()
            return
        sentinel = cluster.sentinel
        sentinel.join()  # what multiprocessing's exit did; a stop (SIGTERM, SIGINT) ends it too
        if cluster.stop_event is not None and not cluster.stop_event.is_set():
            # Not stopped: the sentinel died. This process exited 0 and said nothing, so neither a
            # person nor a process manager restarting on failure knew that the cluster was gone.
            raise CommandError(
                f"the cluster's sentinel (pid {sentinel.pid}) {describe_exit(sentinel.exitcode)}: its workers "
                "drain their agent hosts and stop; start the cluster again"
            )
