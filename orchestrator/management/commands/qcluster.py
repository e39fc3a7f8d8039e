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

The queue between the pusher and the workers is orchestrator/management/task_queue.py's: a worker
killed with SIGKILL while it waited for work no longer leaves every other worker waiting for ever.
"""

from __future__ import annotations

import os
import signal

from django.conf import settings
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as QClusterCommand

from orchestrator.management import task_queue


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
        cluster = GracefulCluster()
        cluster.start()
        if options.get("run_once", False):
            cluster.stop()
