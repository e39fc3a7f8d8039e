"""A person's own password change, on the site's page and the admin's, is on the audit log.

Django's password change pages save the new password and redirect; wrapped here, each saved
change is recorded (`user.password_changed`, no value: orchestrator/governance/accounts.py) in
the same transaction, as a change made to someone else's login in the admin is.
"""

from __future__ import annotations

import functools

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.db import transaction

from orchestrator.governance import accounts


def audited_password_change(view):
    """`view`, a password change page, with each change it saves on the audit log."""

    @functools.wraps(view)
    def audited(request, *args, **kwargs):
        with transaction.atomic():
            response = view(request, *args, **kwargs)
            # Saved: the page redirects. (It redirects a visitor who is not logged in too, to the login.)
            if request.method == "POST" and response.status_code == 302 and request.user.is_authenticated:
                accounts.record_password_changed(request.user, user=request.user)
        return response

    return audited


password_change = audited_password_change(auth_views.PasswordChangeView.as_view())
# The admin's own page, behind the admin's login and staff check as in admin.site.urls.
admin_password_change = audited_password_change(admin.site.admin_view(admin.site.password_change, cacheable=True))
