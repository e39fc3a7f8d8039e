"""Is a django-q2 cluster running? Read from the stats that clusters keep in the shared cache."""

from __future__ import annotations

from django_q.conf import Conf
from django_q.status import Stat


def running_clusters() -> list[Stat]:
    return [stat for stat in Stat.get_all() if stat.status not in (Conf.STOPPED, Conf.STOPPING)]


def cluster_is_running() -> bool:
    return bool(running_clusters())
