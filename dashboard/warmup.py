"""What the live view's first frame would otherwise do, done once when daphne starts.

Django builds its URL reverse tables at the first `reverse()` (a `{% url %}` in a fragment) and
compiles each template at its first render, and the live view's first frames are where those
happen: a run's first round after daphne starts (its plan's approval, or a viewer that resumed)
took 0.31 s instead of 0.13 s in-process, and the broadcaster's pacing then made the next round
wait as long (bench-live: the approval's and the fan-out's events 0.6-0.9 s late on a 2-core
machine, every later frame ~0.15 s). A websocket needs no HTTP request before it (a browser
reconnecting after a restart), so nothing else would have done this work first.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.template.loader import get_template
from django.urls import get_resolver

from .fragments import T as PARTIALS  # the fragments' folder: "dashboard/partials/"


def warm_up() -> None:
    """Build the URL reverse tables and compile the live view's fragments (and what they include)."""
    get_resolver().reverse_dict  # noqa: B018 - reading it builds the tables for every `reverse()`
    for path in sorted((Path(settings.BASE_DIR) / "templates" / PARTIALS).glob("*.html")):
        get_template(PARTIALS + path.name)
