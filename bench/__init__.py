"""The Glassbox scheduler benchmark (`make bench`, `python manage.py bench_scheduler`): see docs/benchmarks.md."""
