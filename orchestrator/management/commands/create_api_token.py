"""`python manage.py create_api_token USER NAME`: issue an API token and print it, once.

The token is printed on stdout alone (so a script can capture it) and never again: Glassbox
keeps only its hash. Revoke it in the admin (API tokens → Revoke selected tokens).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from orchestrator.governance import tokens


class Command(BaseCommand):
    help = "Issue an API token for USER, named NAME (what it is for), and print it once."

    def add_arguments(self, parser):
        parser.add_argument("user", help="Username of the token's owner; the token acts with their permissions")
        parser.add_argument("name", help="What the token is for, e.g. 'CI pipeline'")

    def handle(self, *args, user, name, **options):
        User = get_user_model()
        try:
            owner = User.objects.get(**{User.USERNAME_FIELD: user})
        except User.DoesNotExist:
            raise CommandError(
                f"No user named {user!r}. Create one with `python manage.py createsuperuser` or in the admin."
            ) from None
        try:
            token, raw = tokens.issue(owner, name)
        except tokens.TokenError as error:
            raise CommandError(error.sentence) from None
        self.stderr.write(
            f"API token {token.prefix}… ({token.name}) issued to {owner.get_username()}. "
            "Copy it now: it is not shown again. Send it as `Authorization: Bearer TOKEN`."
        )
        self.stdout.write(raw)
