from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from orchestrator.models import Run


@login_required
def home(request):
    """A plain list of runs until the glass-box dashboard lands."""
    runs = Run.objects.select_related("plan", "launched_by")[:100]
    return render(request, "dashboard/home.html", {"runs": runs})
