"""The benchmark's qcluster entry point: ``python -m bench.worker``.

Exactly ``manage.py qcluster``, with the benchmark hooks (bench.hooks) installed first, so that
every worker process django-q2 forks inherits them. Used only by the benchmark harness.
"""

from __future__ import annotations

import os


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "glassbox.settings")
    import django

    django.setup()
    from bench import hooks

    hooks.install()
    from django.core.management import call_command

    call_command("qcluster")


if __name__ == "__main__":
    main()
