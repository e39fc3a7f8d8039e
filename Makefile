# Glassbox: `make run` starts the dashboard on the embedded default, `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-services migrate seed clean browser run-prod bench-live lint format

# Python keeps compiled modules (and pytest its rewritten test modules) in __pycache__/. A machine
# that sets PYTHONDONTWRITEBYTECODE made every test process, and every qcluster, daphne and command
# the suite starts, compile the project from source again (collecting the tests: 20 s instead of 12).
unexport PYTHONDONTWRITEBYTECODE

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

migrate: install
	$(BIN)/python manage.py migrate --noinput

seed: migrate
	$(BIN)/python manage.py seed_demo

# Migrates, seeds the demo, then runs daphne and a qcluster together; Ctrl-C stops both.
# `make run PORT=8001` (and HOST=0.0.0.0) serves elsewhere than 127.0.0.1:8000.
HOST ?= 127.0.0.1
PORT ?= 8000
run: seed
	$(BIN)/python manage.py serve --host $(HOST) --port $(PORT)

# The production profile on this machine: daphne and PROD_CLUSTERS qclusters (PROD_WORKERS workers
# each) against PostgreSQL (DATABASE_URL) and Redis (REDIS_URL), both required. It migrates first;
# the demo is not seeded (`python manage.py seed_demo` does it). docs/deploy.md: many machines.
PROD_HOST ?= 127.0.0.1
PROD_PORT ?= 8000
PROD_CLUSTERS ?= 2
PROD_WORKERS ?= 4
run-prod: install
	@case "$$DATABASE_URL" in postgres://*|postgresql://*) ;; \
	*) echo "run-prod: set DATABASE_URL to a PostgreSQL URL, e.g. postgres://glassbox:PASSWORD@127.0.0.1:5432/glassbox" >&2; exit 2;; esac
	@case "$$REDIS_URL" in redis://*|rediss://*) ;; \
	*) echo "run-prod: set REDIS_URL to a Redis URL, e.g. redis://127.0.0.1:6379/0" >&2; exit 2;; esac
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py serve --host $(PROD_HOST) --port $(PROD_PORT) --clusters $(PROD_CLUSTERS) --workers $(PROD_WORKERS)

# The suite runs in two parts, both always, failing if either fails. First the tests that start no
# qcluster, TEST_WORKERS at a time (pytest-xdist; each worker has its own test database, Redis keys
# and queue: tests/conftest.py); then the ones marked `processes`, one at a time, since they start
# qclusters and time their kills, drains and restarts against deadlines. A plain `pytest` runs
# everything in one process, as before.
TEST_WORKERS ?= 2
define run_suite
	$(BIN)/pytest -n $(TEST_WORKERS) -m "($(1)) and not processes"; parallel=$$?; \
	$(BIN)/pytest -m "($(1)) and processes"; alone=$$?; \
	[ $$parallel = 0 ] && [ $$alone = 0 ]
endef

# The embedded suite: SQLite, the ORM broker, real qcluster processes; no server to install.
test: install browser
	$(call run_suite,not services)

# ruff (lint, then the format check) and mypy over glassbox/, orchestrator/ and dashboard/ (CI runs it).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Rewrites the files ruff would change (imports sorted, code formatted).
format: install
	$(BIN)/ruff check --select I --fix .
	$(BIN)/ruff format .

# Debian's Chromium for the browser tests (marked `browser`): Playwright cannot download its own
# browser here, so it drives /usr/bin/chromium. Installed with apt-get when it is missing.
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@if [ ! -x $(CHROMIUM) ]; then \
		echo "Installing Chromium for the browser tests (apt-get)"; \
		$(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver; \
	fi

# The suite again on the production profile: PostgreSQL and Redis at their usual local addresses
# (override with GLASSBOX_TEST_DATABASE_URL / GLASSBOX_TEST_REDIS_URL). Every test that touches a
# database or a service runs, processes and fault drills included; left out are the ones that open
# no database connection and the Chromium tests (the page is the same page: its websocket path on
# Redis is drilled in tests/services/). `make test-services SERVICES_MARKS="processes or not processes"` runs every test.
# Each session gets its own Redis key prefix, django-q2 queue and test database, so sessions sharing
# one server never meet; tests/conftest.py stops at once, naming the server, when one is missing,
# and removes the session's Redis keys at the end.
GLASSBOX_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
GLASSBOX_TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
SERVICES_MARKS ?= services or not (browser or no_database)
test-services: install browser
	session=$$$$; \
	export DATABASE_URL='$(GLASSBOX_TEST_DATABASE_URL)' REDIS_URL='$(GLASSBOX_TEST_REDIS_URL)' \
	GLASSBOX_TEST_REDIS_URL='$(GLASSBOX_TEST_REDIS_URL)' GLASSBOX_TEST_DB_SUFFIX=$$session \
	GLASSBOX_REDIS_PREFIX=glassbox-test-$$session GLASSBOX_Q_NAME=glassbox-test-$$session; \
	$(call run_suite,$(SERVICES_MARKS))

# The live view under load (DESIGN §4): 50 websocket viewers on a 200-task run, on the embedded
# profile and then on the production profile (the local PostgreSQL and Redis, or
# GLASSBOX_TEST_DATABASE_URL / GLASSBOX_TEST_REDIS_URL). Writes bench/results-live.json: whether
# every viewer got every event, p50/p95 event latency, daphne's memory. A measurement, not a test.
bench-live: install
	$(BIN)/python -m bench.live_load --profile embedded
	$(BIN)/python -m bench.live_load --profile production

clean:
	rm -rf $(VENV) glassbox.sqlite3* .test-glassbox.sqlite3* .pytest_cache

# The scheduler benchmark: writes bench/results.json, docs/benchmarks.md and docs/benchmarks/*.png.
# Real qcluster workers and the simulated provider on the embedded default and on PostgreSQL + Redis
# (the local servers, or BENCH_DATABASE_URL / BENCH_REDIS_URL); databases and keys of its own, removed
# afterwards. About 25 minutes on 2 cores with its default of 3 repeats (19 with BENCH_ARGS="--repeats 2").
.PHONY: bench
bench: install
	$(BIN)/pip install --quiet -e ".[test,bench]"
	$(BIN)/python manage.py bench_scheduler $(BENCH_ARGS)
