"""Why a person's action on a run cannot be taken now, in words for people.

Every action (launch, pause, resume, cancel, retry, skip, decide, re-run, a plan edit) checks that it
makes sense in the current state and raises ActionError, whose message is what the API, the command
line, the run page and the inbox show. Permission checks belong to the caller.
"""

from __future__ import annotations

from orchestrator import wording
from orchestrator.models import Run


class ActionError(wording.Refusal):
    """An action that cannot be taken now; the message says why, for people (`sentence` on its own:
    the API's error, the command line's, the run page's and the inbox's)."""


def already_ended(run: Run) -> str:
    """ "run 3 already ended (succeeded)": why nothing can be done to an ended run."""
    return f"run {run.pk} already ended ({run.get_status_display().lower()})"
