"""/favicon.ico: what a browser asks for on a page that names no icon (the admin's, the login's)."""

from django.templatetags.static import static
from django.views.generic import RedirectView


class FaviconRedirect(RedirectView):
    """The dashboard's icon, resolved at request time (the static storage may hash its name)."""

    permanent = True
    http_method_names = ["get", "head"]

    def get_redirect_url(self, *args, **kwargs) -> str:
        return static("dashboard/favicon.svg")
