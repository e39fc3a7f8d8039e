# Glassbox: `make run` starts the dashboard on the embedded default, `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-services migrate seed clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

migrate: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py createcachetable

seed: migrate
	$(BIN)/python manage.py seed_demo

# Migrates, seeds the demo, then runs daphne and a qcluster together; Ctrl-C stops both.
run: seed
	$(BIN)/python manage.py serve

# The embedded suite: SQLite, the ORM broker, real qcluster processes; no server to install.
test: install
	$(BIN)/pytest -m "not services"

# The tests that need the local Redis (and, later, PostgreSQL): they fail loudly without them.
test-services: install
	$(BIN)/pytest -m services

clean:
	rm -rf $(VENV) glassbox.sqlite3* .test-glassbox.sqlite3* .pytest_cache
