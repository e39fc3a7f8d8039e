from django.contrib import admin
from django.urls import include, path

from dashboard.api import api
from dashboard.views import accounts

urlpatterns = [
    # Django's own password change pages, each change audited (before the includes that also route them).
    path("admin/password_change/", accounts.admin_password_change),
    path("accounts/password_change/", accounts.password_change, name="password_change"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("dashboard.urls")),
]
