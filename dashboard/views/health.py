"""`GET /health/`: is this instance able to work? For load balancers and monitoring.

No login: a probe has no session. The answer reveals nothing secret (backends, latencies,
exception class names; see orchestrator.engine.health) and is never cached.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from orchestrator.engine import health as engine_health


@login_not_required
@never_cache
@require_safe
async def health(request):
    """200 with the report when the database, the broker and the channel layer all answer, else 503."""
    report = await engine_health.acheck()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)
