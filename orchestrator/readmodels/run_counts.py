"""How many runs there are and how many have not ended, by status, in words: the runs list's line.

The line said "3 in progress" of a running run, a paused one and one awaiting approval: neither
of the last two is in progress. It names each status that has not ended by its label, as the
table's badges do: "12 runs, 1 running, 1 paused, 1 awaiting approval."
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db.models import Count

from orchestrator.models import Run
from orchestrator.wording import counted

# The statuses of a run that has not ended, in the order the line names them (work first).
NOT_ENDED = (Run.Status.RUNNING, Run.Status.PAUSED, Run.Status.AWAITING_APPROVAL)


def run_counts_text(by_status: Mapping[str, int]) -> str:
    """Runs by status in words: "12 runs, 1 running, 1 paused, 1 awaiting approval." (a status
    with no run left out), "12 runs, all ended." once none is open, "0 runs." before any."""
    total = sum(by_status.values())
    open_ = [f"{by_status[s]} {Run.Status(s).label.lower()}" for s in NOT_ENDED if by_status.get(s)]
    if not total:
        return "0 runs."
    return f"{counted(total, 'run')}, {', '.join(open_) if open_ else 'all ended'}."


def run_counts() -> str:
    """Every run counted by status (one query), as `run_counts_text` says it."""
    rows = Run.objects.order_by().values_list("status").annotate(n=Count("pk"))
    return run_counts_text(dict(rows))
