"""`python manage.py bench_scheduler [--quick] [--json] ...`: the scheduler benchmark (bench/, docs/benchmarks.md).

Thin: the benchmark lives in the `bench` package of the source tree. It creates databases of its
own (a SQLite file; with the production profile a PostgreSQL database and Redis keys of its own),
never touches the configured one, and removes what it created.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Benchmark the scheduler with real qcluster workers and the simulated provider (see docs/benchmarks.md)."
    requires_system_checks: list = []

    def add_arguments(self, parser):
        from bench import cli

        cli.add_arguments(parser)

    def handle(self, *args, **options):
        try:
            from bench import cli, harness
        except ImportError as exc:
            raise CommandError(f"the benchmark needs the source tree's bench/ package: {exc}") from exc
        try:
            cli.run(options, stdout=self.stdout)
        except harness.BenchError as exc:
            raise CommandError(str(exc)) from exc
