# Glassbox: `make run` starts the dashboard on the embedded default, `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-processes migrate seed clean

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

test: install
	$(BIN)/pytest

clean:
	rm -rf $(VENV) glassbox.sqlite3* .test-glassbox.sqlite3* .pytest_cache
